"""rosenna: ONNX models as per-point C and Fortran routines for scientific solvers.

The package owns the whole compiler; its subpackages are its stages, each owning one step
(docs/architecture.md): passes/, ops/, strategy/, emit/, toolchain/, gate/, commands/."""

__version__ = "0.2.1.dev0"
