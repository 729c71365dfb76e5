"""rosenna: ONNX models as per-point C and Fortran routines for scientific solvers."""

__version__ = "0.2.0.dev0"
