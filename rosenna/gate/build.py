"""Building the gate's harnesses: the generated archives with each offload model's flags, the
harness programs from :mod:`rosenna.gate.harness`, and the CUPTI transfer counter.

Every builder returns ``(harness name, executable or None, note)``: a build that fails is a row
that says why, never an exception that hides the other harnesses.
"""

import os
import shlex
import shutil
import subprocess

from rosenna import toolrun
from rosenna.errors import BuildError
from rosenna.gate import harness


class Shell:
    """Runs the gate's commands and keeps each one with its status and the tail of its output."""

    def __init__(self):
        self.log = []  # (command, status, output tail)

    def sh(self, argv, cwd=None, env=None, check=True, timeout=900):
        text = shlex.join(argv)
        rc, out = toolrun.execute(argv, cwd, env, timeout)
        self.log.append((text if cwd is None else f"(cd {cwd} && {text})", rc, out[-3000:]))
        if check and rc != 0:
            raise BuildError(f"`{text}` failed with status {rc}: {_last_line(out)}")
        return rc, out


def _last_line(output):
    """The last line of a command's output that says something (the error, usually)."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def note_of(exc):
    """The one-line note of a failed build, for the report's table."""
    return str(exc).replace("\n", " ")


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_harness(vdir, name, values):
    """Write harness ``name``'s source into ``vdir``; return its path."""
    src = os.path.join(vdir, harness.FILES[name][1])
    _write(src, harness.render(name, **values))
    return src


#: The per-point harnesses of each directive model: the config attribute of its flags.
FLAGS_OF = {"omp": "flags", "acc": "acc_flags"}


def per_point(shell, c, values, vdir, lib_dir, defs, model):
    """Harnesses 1 and 2 (OpenMP target) or 1b and 2b (OpenACC ``parallel loop gang vector``): the
    per-point routine inside the harness's own loop, C and Fortran, against archives built in
    ``lib_dir`` with that model's offload flags."""
    n = values["n"]
    offload = getattr(c, FLAGS_OF[model])
    flags = shlex.split(offload)
    builds = []
    try:
        shell.sh(["make", "-s", "-f", f"{n}.mk", "ROSENNA_BACKEND=omp", f"CC={c.cc}", f"CFLAGS={c.cflags}",
                  f"ROSENNA_OFFLOAD_FLAGS={offload}"], cwd=lib_dir)
        src = write_harness(vdir, f"c-{model}", values)
        exe = src[:-2]
        shell.sh([c.cc, *shlex.split(c.cflags), *flags, *defs, "-I", lib_dir, src, os.path.join(lib_dir, f"lib{n}.a"), "-lm", "-o", exe])
        builds.append((f"c-{model}", exe, ""))
    except BuildError as exc:
        builds.append((f"c-{model}", None, note_of(exc)))
    if c.fc != "none":
        builds.append(fortran(shell, c, values, vdir, lib_dir, defs, model, f"fortran-{model}"))
    return builds


def fortran(shell, c, values, vdir, lib_dir, defs, model, name):
    """A Fortran harness (``fortran-<model>`` per point, or ``batch-fortran-<model>`` for a
    whole-field plan) against the module's archive built in ``lib_dir`` with that model's flags."""
    n = values["n"]
    offload = getattr(c, FLAGS_OF[model])
    try:
        shell.sh(["make", "-s", "-f", f"{n}_fortran.mk", f"FC={c.fc}", f"FFLAGS={c.fflags}",
                  f"ROSENNA_OFFLOAD_FLAGS={offload}"], cwd=lib_dir)
        src = write_harness(vdir, name, values)
        exe = src[:-4]
        mod_dir = os.path.join(vdir, f"{name}-mod")
        os.makedirs(mod_dir, exist_ok=True)
        shell.sh([c.fc, *shlex.split(c.fflags), *shlex.split(offload), *defs, "-I", lib_dir, "-J", mod_dir, src,
                  os.path.join(lib_dir, f"lib{n}_f.a"), "-o", exe])
        return name, exe, ""
    except BuildError as exc:
        return name, None, note_of(exc)


def per_point_names(c):
    """The per-point harnesses this configuration runs, in order."""
    models = ["omp"] + (["acc"] if c.acc_flags else [])
    langs = ["c"] + (["fortran"] if c.fc != "none" else [])
    return [f"{lang}-{model}" for model in models for lang in langs]


def batch_omp(shell, c, values, vdir, lib_dir, defs, name="batch-omp"):
    """Harness 3 on the OpenMP build: ``<name>_infer_batch`` on device pointers, the archive
    built with the offload compiler and flags."""
    n = values["n"]
    try:
        shell.sh(["make", "-s", "-f", f"{n}.mk", "ROSENNA_BACKEND=omp", f"CC={c.cc}", f"CFLAGS={c.cflags}",
                  f"ROSENNA_OFFLOAD_FLAGS={c.flags}"], cwd=lib_dir)
        src = write_harness(vdir, "batch-omp", values)
        exe = os.path.join(vdir, "h3_batch_omp")
        shell.sh([c.cc, *shlex.split(c.cflags), *shlex.split(c.flags), *defs, "-I", lib_dir, src, os.path.join(lib_dir, f"lib{n}.a"),
                  "-lm", "-o", exe])
        return name, exe, ""
    except BuildError as exc:
        return name, None, note_of(exc)


def batch_native(shell, c, values, vdir, lib_dir, defs):
    """Harness 3 on the native backend: the CUDA (or HIP) archive, device data handed to
    ``<name>_infer_batch``."""
    n = values["n"]
    try:
        shell.sh(["make", "-s", "-f", f"{n}.mk", f"ROSENNA_BACKEND={c.backend}", f"CC={c.host_cc}", f"CFLAGS={c.cflags}",
                  "ROSENNA_OFFLOAD_FLAGS=", f"DEVCC={c.devcc}", f"DEVFLAGS={c.devflags}"], cwd=lib_dir)
        if c.backend == "hip":
            raise BuildError("the batch and user-kernel harnesses are written for the CUDA runtime; "
                             "the hip archive was built (compile-only here)")
        src = write_harness(vdir, "batch-cuda", values)
        exe = os.path.join(vdir, "h3_batch")
        shell.sh([c.devcc, *shlex.split(c.devflags), *defs, "-I", lib_dir, src, os.path.join(lib_dir, f"lib{n}.a"), "-o", exe])
        return "batch", exe, ""
    except BuildError as exc:
        return "batch", None, note_of(exc)


def cuda_user(shell, c, values, vdir, lib_dir, defs, name="cuda-user"):
    """Harness 4 (``cuda-user``): the user's own CUDA kernel calling ``<name>_infer`` per thread;
    harness 5 (``cuda-warp``): the same calling ``<name>_infer_warp`` from every lane."""
    n = values["n"]
    try:
        src = write_harness(vdir, name, values)
        exe = os.path.join(vdir, os.path.splitext(harness.FILES[name][1])[0])
        shell.sh([c.devcc, *shlex.split(c.devflags), "-rdc=true", *defs, "-I", lib_dir, src,
                  os.path.join(lib_dir, f"lib{n}_device.a"), os.path.join(lib_dir, f"lib{n}.a"), "-o", exe])
        return name, exe, ""
    except BuildError as exc:
        return name, None, note_of(exc)


def cuda_root(devcc):
    """The CUDA installation nvcc belongs to, as nvcc's dry run names it (a wrapper script on PATH
    may hide it; the generated .mk finds its runtime library the same way)."""
    try:
        out = subprocess.run([devcc, "-dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        if line.startswith("#$ TOP="):
            return os.path.realpath(line[len("#$ TOP="):].strip())
    return os.path.dirname(os.path.dirname(os.path.realpath(shutil.which(devcc) or devcc)))


def cupti_dirs(devcc):
    """(include dir, library dir) of CUPTI next to ``devcc``'s CUDA, or None."""
    root = cuda_root(devcc)
    env = os.environ.get("ROSENNA_CUPTI_DIR")
    cands = ([env] if env else []) + [os.path.join(root, "extras", "CUPTI"), root,
                                      os.path.join(root, "targets", "x86_64-linux")]
    for base in cands:
        inc = os.path.join(base, "include")
        for lib in ("lib64", "lib"):
            libdir = os.path.join(base, lib)
            if os.path.isfile(os.path.join(inc, "cupti.h")) and any(
                    f.startswith("libcupti.so") for f in (os.listdir(libdir) if os.path.isdir(libdir) else [])):
                return inc, libdir
    return None


def counter(shell, devcc, out):
    """Build the CUPTI transfer counter into ``out``; its path, or None where CUPTI is missing."""
    dirs = cupti_dirs(devcc)
    if not dirs:
        return None
    src = os.path.join(out, "count_transfers.cu")
    _write(src, harness.COUNTER)
    lib = os.path.join(out, "libcount_transfers.so")
    rc, _ = shell.sh([devcc, "-shared", "-Xcompiler", "-fPIC", "-I", dirs[0], src, "-L", dirs[1], "-lcupti",
                      "-Xlinker", f"-rpath,{dirs[1]}", "-o", lib], check=False)
    return lib if rc == 0 else None
