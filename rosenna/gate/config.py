"""What the gate runs with: the :class:`Config`, its defaults, and the checks made before anything
is built (a visible device, offload flags that offload)."""

import os
import shutil
from dataclasses import dataclass, replace

from rosenna.errors import UsageError

BACKENDS = ("cuda", "hip", "omp")
#: --weights: which builds of the model the gate runs ("embedded" alone: bench/h200.sh table).
WEIGHTS = {"both": (("embedded", True), ("file-loaded", False)), "embedded": (("embedded", True),),
           "file-loaded": (("file-loaded", False),)}
#: Points timed per harness on a device; on the host fallback (no device: CI, a login node) the
#: default is small enough that the gate ends in about a minute on 2 cores.
POINTS_DEVICE = 1_000_000
POINTS_HOST = 10_000

#: Environment variables that hide every GPU from a process when set to one of these values.
_HIDING = {"CUDA_VISIBLE_DEVICES": ("", "-1", "NoDevFiles", "none"),
           "HIP_VISIBLE_DEVICES": ("", "-1"), "ROCR_VISIBLE_DEVICES": ("", "-1")}


@dataclass
class Config:
    model: str = "gemm_big"  # a zoo name or an .onnx path
    cc: str = None
    fc: str = None  # "none": skip the Fortran harness
    flags: str = None  # OpenMP offload flags for cc and fc
    acc_flags: str = None  # OpenACC flags for cc and fc: runs the OpenACC harnesses (host fallback: -fopenacc)
    backend: str = None
    host_fallback: bool = False
    points: int = None  # default POINTS_DEVICE, or POINTS_HOST with host_fallback
    out: str = "gpu-gate"
    devcc: str = None
    devflags: str = None
    cflags: str = None  # optimisation flags of cc and host_cc (default: the gcc profile's)
    fflags: str = None  # of fc
    target: str = None  # archspec's name of the CPU the gcc profile's defaults are for (None: this host)
    gpu_arch: str = None  # the GPU they are for (None: the profile's, else detected)
    host_cc: str = "gcc"  # compiles <name>.c of the native-kernel archive
    reps: int = 11
    weights: str = "both"  # a key of WEIGHTS
    label: str = ""  # names the compiler set in the report
    profile: dict = None  # the toolchain profile used: {"name", "file", "reason"}, or None
    tuning: object = None  # the generated code's rosenna.strategy.Tuning (None: the defaults)
    precision: str = None  # "bf16" / "fp16": the generated code's --precision (None: the model's type)


class NoDevice(UsageError):
    """The gate was asked to run on a GPU, and this process sees none."""


def resolved(config):
    """A copy of ``config`` with every default filled in.

    Raises:
        UsageError: for an unknown backend or fewer than one point.
    """
    c = replace(config)  # a copy that keeps the tuning a Tuning (asdict would make it a dict)
    c.cc = c.cc or os.environ.get("CC", "gcc")
    c.fc = c.fc or os.environ.get("FC", "gfortran")
    if c.host_fallback:
        c.backend = c.backend or "omp"
        c.flags = c.flags if c.flags is not None else "-fopenmp"
        c.acc_flags = c.acc_flags if c.acc_flags is not None else "-fopenacc"
    else:
        c.backend = c.backend or ("cuda" if shutil.which("nvcc") else "hip" if shutil.which("hipcc") else "omp")
        c.flags = c.flags if c.flags is not None else "-fopenmp -foffload=nvptx-none"
    if c.weights not in WEIGHTS:
        raise UsageError(f"--weights {c.weights!r}: choose one of {', '.join(WEIGHTS)}")
    if c.backend not in BACKENDS:
        raise UsageError(f"--backend {c.backend!r}: choose one of {', '.join(BACKENDS)}")
    if None in (c.cflags, c.fflags) or (c.backend != "omp" and None in (c.devcc, c.devflags)):
        try:
            from rosenna import toolchain  # the gcc profile: the one source of compiler defaults
        except ImportError as exc:  # a GPU node's bare python3 may lack archspec / jsonschema / yaml
            raise UsageError(f"the gcc toolchain profile gives the flags not named here, and reading it needs "
                             f"{exc.name} (pip install rosenna's dependencies), or give --cflags, --fflags, "
                             "--devcc and --devflags") from None
        profile = toolchain.resolve(None, target=c.target, gpu_arch=c.gpu_arch)
        c.cflags = profile.optimize_c if c.cflags is None else c.cflags
        c.fflags = profile.optimize_fortran if c.fflags is None else c.fflags
        if c.backend != "omp":
            c.devcc = c.devcc or profile.device_compiler(c.backend)
            c.devflags = c.devflags or profile.device_flags(c.backend)
    if c.points is None:
        c.points = POINTS_HOST if c.host_fallback else POINTS_DEVICE
    if c.points < 1:
        raise UsageError(f"--points {c.points}: give at least 1")
    return c


def check_device(environ=None, gpus=None):
    """Raise :class:`NoDevice` unless this process can see a GPU.

    Args:
        environ: the environment (default ``os.environ``).
        gpus: the GPUs detected (default: detect them now with nvidia-smi, rocm tools, sycl-ls).
    """
    environ = os.environ if environ is None else environ
    hidden = [f"{var}={environ[var]!r}" for var, values in _HIDING.items()
              if var in environ and environ[var].strip() in values]
    if gpus is None:
        from rosenna.toolchain.detection import detect_gpus

        gpus = detect_gpus()
    if gpus and not hidden:
        return
    why = ("this process is told to use none: " + ", ".join(hidden)) if hidden else \
        "nvidia-smi, rocm_agent_enumerator/rocminfo and sycl-ls found none"
    raise NoDevice(
        f"no GPU is visible on this node ({why}). Ask the batch job for one (Slurm: --gpus=1 or "
        f"--gres=gpu:1; PBS: -l select=1:ngpus=1), check CUDA_VISIBLE_DEVICES, or run with --host-fallback "
        "to check the host build only")


def check_offload(profile, host_fallback):
    """Raise UsageError when ``profile`` would build the device harnesses without offload flags.

    A profile without ``flags.omp_offload`` (``gcc``, which ``auto`` falls back to) compiles the
    OpenMP target loops for the host: every device check would fail, or pass for the wrong reason.
    """
    if host_fallback or profile is None or profile.flags_omp_offload:
        return
    why = f" (chosen because {profile.reason})" if profile.reason else ""
    raise UsageError(
        f"toolchain profile '{profile.name}' has no OpenMP offload flags (flags.omp_offload in {profile.source})"
        f"{why}, so the gate's harnesses would not run on the GPU. Name a GPU profile (--toolchain nvhpc, "
        "rocm, gcc-nvptx, clang-offload; see `rosenna toolchain detect`), give --flags, or run with --host-fallback")
