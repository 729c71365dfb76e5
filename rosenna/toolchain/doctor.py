"""What this machine has for building and checking rosenna's generated code (`rosenna doctor`).

Each check looks for one piece a toolchain profile or `rosenna verify`/`gpu-gate` needs: the host
compilers, GCC's offload compilers and libgomp plugins (nvptx, amdgcn), clang's libomptarget, the
NVIDIA HPC SDK, the CUDA toolkit, ROCm, oneAPI, the GPUs, onnxruntime and the build tools. A
missing piece is reported with what provides it (the Debian/Ubuntu package, or the vendor's SDK),
so a site admin knows what to install. Nothing is changed.

GCC finds its offload compiler as ``accel/<target>/mkoffload`` among its own programs
(``gcc -print-prog-name``): without it ``-foffload=nvptx-none`` fails with "could not find
accel/nvptx-none/mkoffload". libgomp loads ``libgomp-plugin-<target>.so.1`` at run time; without
it an offload region silently runs on the host.
"""

import glob
import os
import shutil
from dataclasses import dataclass

from rosenna import toolrun

OK, MISSING, PARTIAL = "ok", "missing", "partial"

#: GCC offload targets: the -foffload name, the libgomp plugin, and the Debian/Ubuntu packages.
GCC_OFFLOAD = (
    ("nvptx-none", "nvptx", "NVIDIA", "gcc-offload-nvptx (or gcc-N-offload-nvptx for gcc-N), libgomp-plugin-nvptx1"),
    ("amdgcn-amdhsa", "gcn", "AMD", "gcc-offload-amdgcn (or gcc-N-offload-amdgcn), libgomp-plugin-amdgcn1"),
)


@dataclass(frozen=True)
class Check:
    """One line of the report: what was looked for, what was found, and how to get it."""

    area: str
    status: str  # OK, MISSING or PARTIAL
    detail: str
    fix: str = ""

    def to_dict(self):
        return {"area": self.area, "status": self.status, "detail": self.detail, "fix": self.fix}


def _found(command, env=None):
    path = shutil.which(command, path=(env or os.environ).get("PATH"))
    return path


def _version(command, env=None):
    status, out = toolrun.execute([command, "--version"], env=env, timeout=30)
    first = out.strip().splitlines()[0] if status == 0 and out.strip() else ""
    return first[:100]


def _gcc_program(gcc, name, env=None):
    """The path of GCC's own program or file ``name``, or None (GCC echoes the bare name back)."""
    for flag in ("-print-prog-name=", "-print-file-name="):
        status, out = toolrun.execute([gcc, flag + name], env=env, timeout=30)
        path = out.strip()
        if status == 0 and os.path.isabs(path) and os.path.exists(path):
            return path
    return None


def host_compilers(env=None):
    out = []
    for command, what, fix in (("gcc", "C compiler with OpenMP", "apt-get install gcc"),
                               ("gfortran", "Fortran compiler with OpenMP", "apt-get install gfortran"),
                               ("make", "runs the generated .mk recipes", "apt-get install make"),
                               ("cmake", "builds with the generated <name>Config.cmake", "apt-get install cmake"),
                               ("pkg-config", "reads the generated .pc files", "apt-get install pkg-config")):
        path = _found(command, env)
        out.append(Check(f"host: {command}", OK if path else MISSING,
                         f"{_version(command, env) or path} ({what})" if path else f"not on PATH ({what})",
                         "" if path else fix))
    return out


def gcc_offload(gcc="gcc", env=None):
    """GCC's offload compilers and libgomp plugins, for each target."""
    if not _found(gcc, env):
        return [Check(f"gcc offload: {target}", MISSING, f"{gcc} not on PATH", "apt-get install gcc")
                for target, _, _, _ in GCC_OFFLOAD]
    out = []
    for target, plugin, vendor, packages in GCC_OFFLOAD:
        mkoffload = _gcc_program(gcc, f"accel/{target}/mkoffload", env)
        runtime = _gcc_program(gcc, f"libgomp-plugin-{plugin}.so.1", env) or _system_library(
            f"libgomp-plugin-{plugin}.so.1")
        found = [p for p in (mkoffload, runtime) if p]
        status = OK if len(found) == 2 else (PARTIAL if found else MISSING)
        detail = (f"-foffload={target} ({vendor} GPUs): " +
                  f"mkoffload {'at ' + mkoffload if mkoffload else 'not found'}, "
                  f"plugin {'at ' + runtime if runtime else 'not found'}")
        out.append(Check(f"gcc offload: {target}", status, detail,
                         "" if status == OK else f"Debian/Ubuntu: apt-get install {packages}"))
    return out


def _system_library(name):
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/lib"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    return None


def clang_offload(env=None):
    """clang (any clang-N on PATH) and the libomptarget next to it."""
    path_var = (env or os.environ).get("PATH", "")
    names = ["clang"] + sorted({os.path.basename(p) for d in path_var.split(os.pathsep) if d
                                for p in glob.glob(os.path.join(d, "clang-[0-9]*"))
                                if os.path.basename(p)[6:].isdigit()}, reverse=True)
    clang = next((n for n in names if _found(n, env)), None)
    if clang is None:
        return [Check("clang offload", MISSING, "no clang on PATH",
                      "Debian/Ubuntu: apt-get install clang-16 libomp-16-dev (libomptarget); or LLVM's own build")]
    status, out = toolrun.execute([clang, "-print-file-name=libomptarget.so"], env=env, timeout=30)
    target = out.strip()
    if not (status == 0 and os.path.isabs(target) and os.path.exists(target)):
        status, out = toolrun.execute([clang, "-print-resource-dir"], env=env, timeout=30)
        libdir = os.path.normpath(os.path.join(out.strip(), "..", "..")) if status == 0 else ""
        hits = glob.glob(os.path.join(libdir, "libomptarget.so*")) if libdir else []
        target = hits[0] if hits else ""
    version = _version(clang, env)
    if target:
        return [Check("clang offload", OK, f"{version}; libomptarget at {target}")]
    major = clang[6:] if clang.startswith("clang-") else "N"
    return [Check("clang offload", PARTIAL, f"{version}; no libomptarget.so next to it",
                  f"Debian/Ubuntu: apt-get install libomp-{major}-dev (libomptarget and its device runtimes)")]


#: Vendor compilers: (area, command, what it is, where it comes from).
VENDOR_TOOLS = (
    ("NVIDIA HPC SDK", "nvc", "nvc/nvfortran: OpenMP offload (-mp=gpu) and OpenACC (-acc)",
     "the NVIDIA HPC SDK (nvhpc), or `module load nvhpc`"),
    ("CUDA toolkit", "nvcc", "nvcc: the native CUDA backend and your kernels",
     "the CUDA toolkit (Debian: nvidia-cuda-toolkit), or `module load cuda`"),
    ("ROCm", "hipcc", "hipcc: the native HIP backend; amdclang for OpenMP offload",
     "ROCm (AMD's repositories; Debian/Ubuntu: hipcc), or `module load rocm`"),
    ("Intel oneAPI", "icx", "icx/ifx: OpenMP offload to Intel GPUs (-fopenmp-targets=spir64)",
     "Intel oneAPI HPC Toolkit, or `module load intel-oneapi-compilers`"),
)


def vendor_tools(env=None):
    out = []
    for area, command, what, fix in VENDOR_TOOLS:
        path = _found(command, env)
        out.append(Check(area, OK if path else MISSING, f"{_version(command, env) or path}" if path else
                         f"{command} not on PATH ({what})", "" if path else fix))
    return out


def gpus():
    from rosenna.toolchain import detection

    notes = []
    found = detection.detect_gpus(notes)
    if not found:
        return [Check("GPU", MISSING, "none visible (nvidia-smi, rocm_agent_enumerator, sycl-ls)",
                      "on a cluster, run this on a GPU node (inside a job that requests a GPU)")]
    return [Check("GPU", OK, f"{gpu.describe()} [{gpu.tool}]") for gpu in found]


def onnxruntime():
    try:
        import onnxruntime as ort
    except ImportError:
        return [Check("onnxruntime", MISSING, "not importable: `rosenna verify` and `gpu-gate` need it",
                      "pip install 'rosenna[verify]' (Spack: rosenna+verify)")]
    return [Check("onnxruntime", OK, f"onnxruntime {ort.__version__} (the reference of verify and gpu-gate)")]


def run_all(env=None, gpu=True):
    """Every check, in report order."""
    out = host_compilers(env) + gcc_offload(env=env) + clang_offload(env) + vendor_tools(env)
    if gpu:
        out += gpus()
    return out + onnxruntime()
