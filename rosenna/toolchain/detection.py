"""What this node has: the host CPU (archspec), its GPUs, and the compilers on PATH.

Nothing here raises for a missing or failing tool: each probe that cannot run or prints something
unexpected leaves a note, and ``rosenna toolchain detect`` shows the notes.
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import warnings
from dataclasses import asdict, dataclass, field

import archspec.cpu

# The compilers looked for on PATH besides those the profiles name.
KNOWN_COMPILERS = (
    "gcc", "g++", "gfortran",
    "clang", "clang++", "flang", "flang-new",
    "nvc", "nvc++", "nvfortran", "nvcc",
    "amdclang", "amdclang++", "amdflang", "hipcc",
    "icx", "icpx", "ifx",
)

# The compiler names archspec's optimization_flags() knows.
ARCHSPEC_COMPILERS = ("gcc", "clang", "aocc", "intel", "oneapi", "nvhpc")

# How long a probe may take before it is given up, in seconds.
TIMEOUT = 20

# Banner text -> the compiler's name in archspec's tables (None: a device compiler archspec has no
# CPU flags for). The first pattern that matches the --version banner wins.
_FAMILIES = (
    (re.compile(r"Cuda compilation tools|NVIDIA \(R\) Cuda"), "nvcc"),
    (re.compile(r"HIP version"), "hipcc"),
    (re.compile(r"Intel\(R\) oneAPI|Intel\(R\) Fortran|ifx \(IFX\)"), "oneapi"),
    (re.compile(r"^\s*nv(c|c\+\+|fortran) \d|NVIDIA Compilers|PGI", re.M), "nvhpc"),
    (re.compile(r"AOCC", re.I), "aocc"),
    (re.compile(r"clang|flang", re.I), "clang"),
    (re.compile(r"GCC|GNU Fortran|Free Software Foundation|^g(cc|\+\+|fortran)", re.M), "gcc"),
)
_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+(?:\.\d+)?)")
_NVCC_VERSION = re.compile(r"release (\d+\.\d+)")
_HIP_VERSION = re.compile(r"HIP version: (\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Cpu:
    name: str
    vendor: str
    family: str
    features: tuple


@dataclass(frozen=True)
class Gpu:
    """One kind of GPU: ``arch`` is the compute capability digits ("90") or the gfx name."""

    vendor: str  # "nvidia", "amd" or "intel"
    arch: str
    model: str
    count: int
    tool: str  # the command that reported it

    def describe(self):
        arch = f"cc {self.arch}" if self.vendor == "nvidia" else self.arch
        label = f"{self.model} ({arch})" if self.model and self.arch else (self.model or arch)
        return f"{self.count} x {label}" if self.count > 1 else label


@dataclass(frozen=True)
class Compiler:
    command: str  # as named (e.g. "gcc" or "/tmp/g12/usr/bin/gcc-12")
    path: str
    version: str  # "" when the banner showed none
    family: str  # archspec's name ("gcc", "clang", "nvhpc", "oneapi", "aocc"), "nvcc", "hipcc" or ""
    banner: str
    host_flags: str = ""  # archspec's optimisation flags for the host CPU, "" when none
    host_flags_note: str = ""  # why there are none


@dataclass(frozen=True)
class Detection:
    cpu: Cpu
    gpus: tuple
    compilers: tuple
    notes: tuple = field(default_factory=tuple)

    def vendors(self):
        """The GPU vendors present, each once, in the order found."""
        out = []
        for gpu in self.gpus:
            if gpu.vendor not in out:
                out.append(gpu.vendor)
        return out

    def compiler(self, command):
        """The detected compiler for ``command`` (as named in a profile), or None."""
        for c in self.compilers:
            if c.command == command:
                return c
        return None

    def to_dict(self):
        return asdict(self)


def _run(argv, notes, env=None):
    """Run a probe; its stdout, or None (with a note) when it cannot run or fails."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT, env=env, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as exc:
        notes.append(f"{shlex.join(argv)}: could not run: {exc}")
        return None
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        notes.append(f"{shlex.join(argv)}: exit status {proc.returncode}" + (f": {err[-1]}" if err else ""))
        return None
    return proc.stdout + proc.stderr


def detect_cpu():
    """The host CPU as archspec sees it."""
    target = archspec.cpu.host()
    return Cpu(
        name=target.name,
        vendor=target.vendor,
        family=str(target.family),
        features=tuple(sorted(target.features)),
    )


def _nvidia(notes):
    if not shutil.which("nvidia-smi"):
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"], notes)
    counts = {}
    for line in (out or "").splitlines():
        if not line.strip():
            continue
        model, _, cap = line.rpartition(",")
        cap = cap.strip()
        if not re.fullmatch(r"\d+\.\d+", cap):
            notes.append(f"nvidia-smi: cannot read a compute capability in {line.strip()!r}")
            continue
        major, minor = cap.split(".")
        key = (model.strip(), major + minor)
        counts[key] = counts.get(key, 0) + 1
    return [Gpu("nvidia", arch, model, n, "nvidia-smi") for (model, arch), n in counts.items()]


def _amd(notes):
    # gfx000 is the CPU agent that ROCm lists alongside the GPUs.
    for tool, argv in (("rocm_agent_enumerator", ["rocm_agent_enumerator"]), ("rocminfo", ["rocminfo"])):
        if not shutil.which(tool):
            continue
        out = _run(argv, notes)
        if out is None:
            continue
        counts = {}
        for name in re.findall(r"\bgfx[0-9a-f]+\b", out):
            if name != "gfx000":
                counts[name] = counts.get(name, 0) + 1
        if tool == "rocminfo":  # rocminfo names each agent twice (Name: and ISA name)
            counts = {k: max(1, v // 2) for k, v in counts.items()}
        return [Gpu("amd", gfx, "", n, tool) for gfx, n in counts.items()]
    return []


def _intel(notes):
    if not shutil.which("sycl-ls"):
        return []
    out = _run(["sycl-ls"], notes)
    models = []
    for line in (out or "").splitlines():
        # e.g. "[level_zero:gpu:0] Intel(R) Level-Zero, Intel(R) Data Center GPU Max 1550 1.3 [1.3.26241]"
        match = re.match(r"\s*\[(level_zero|opencl|ext_oneapi_level_zero):gpu:\d+\]\s*([^,]*),\s*(.*)", line)
        if match and "Intel" in line:
            model = re.sub(r"\s+(OpenCL\s+)?\d+(\.\d+)*\s*\[.*\]\s*$", "", match.group(3)).strip()
            if model not in models:
                models.append(model)
    return [Gpu("intel", "", model, 1, "sycl-ls") for model in models]


_GPU_TOOLS = ("nvidia-smi", "rocm_agent_enumerator", "rocminfo", "sycl-ls")
_GPUS = {}


def _gpu_tools_key():
    """What the GPU probes' answers depend on: the environment and each probe tool's file (its
    path, and its bytes or, for a file over 1 MiB, its inode, size and time)."""
    key = [tuple(sorted(os.environ.items()))]
    for tool in _GPU_TOOLS:
        path = shutil.which(tool)
        try:
            stat = os.stat(path) if path else None
            if stat is not None and stat.st_size <= 1 << 20:
                with open(path, "rb") as fh:
                    stat = hashlib.sha256(fh.read()).hexdigest()
            elif stat is not None:
                stat = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        except OSError:
            stat = None
        key.append((tool, path, stat))
    return tuple(key)


def detect_gpus(notes=None):
    """The GPUs found by nvidia-smi, rocm_agent_enumerator (or rocminfo), and sycl-ls.

    Probed once per process while the environment and the probe tools stay the same (every
    generate resolves a profile, and rocm_agent_enumerator alone costs 0.2 s of CPU); the notes of
    that probe are added to ``notes`` each time.
    """
    notes = [] if notes is None else notes
    key = _gpu_tools_key()
    if key not in _GPUS:
        found = []
        gpus = tuple(_nvidia(found) + _amd(found) + _intel(found))
        _GPUS[key] = (gpus, tuple(found))
    gpus, found = _GPUS[key]
    notes.extend(found)
    return gpus


def archspec_version(version):
    """Trim a banner version ("12.2.0-14", "24.1-0", "2024.0.0") to the dotted numbers archspec compares."""
    match = re.match(r"\d+(\.\d+){0,2}", version)
    return match.group(0) if match else ""


def host_flags(target, family, version):
    """archspec's optimisation flags for ``target`` with this compiler, and a note when there are none."""
    if family not in ARCHSPEC_COMPILERS:
        return "", f"archspec has no CPU flags for {family or 'this compiler'}"
    trimmed = archspec_version(version)
    if not trimmed:
        return "", "no version to ask archspec with"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            flags = target.optimization_flags(family, trimmed)
        except archspec.cpu.UnsupportedMicroarchitecture as exc:
            return "", f"archspec: {exc}"
    note = "; ".join(str(w.message) for w in caught)
    return flags, note


def probe_compiler(command, target, notes):
    """Version and archspec host flags of one compiler command, or None when not on PATH."""
    argv0 = shlex.split(command)[0] if command.strip() else ""
    path = shutil.which(argv0) if argv0 else None
    if not path:
        return None
    out = _run(shlex.split(command) + ["--version"], notes) or ""
    family = ""
    for pattern, name in _FAMILIES:
        if pattern.search(out):
            family = name
            break
    version = ""
    special = {"nvcc": _NVCC_VERSION, "hipcc": _HIP_VERSION}.get(family)
    for regex in ([special] if special else []) + [_VERSION]:
        found = regex.search(out)
        if found:
            version = found.group(1)
            break
    banner = next((line.strip() for line in out.splitlines() if line.strip()), "")
    flags, note = "", ""
    if family in ("nvcc", "hipcc"):
        note = "device compiler: no CPU flags"
    elif target is not None:
        flags, note = host_flags(target, family, version)
    return Compiler(command, path, version, family, banner, flags, note)


def detect(commands=()):
    """Detect the host CPU, GPUs, and compilers.

    Args:
        commands: compiler commands to look for besides :data:`KNOWN_COMPILERS` (those the
            profiles name, after ``${...}`` expansion).

    Returns:
        A :class:`Detection`.
    """
    notes = []
    target = archspec.cpu.host()
    cpu = detect_cpu()
    gpus = detect_gpus(notes)
    compilers = []
    for command in dict.fromkeys(list(KNOWN_COMPILERS) + [c for c in commands if c]):
        found = probe_compiler(command, target, notes)
        if found:
            compilers.append(found)
    if not gpus:
        notes.append("no GPU found (looked with nvidia-smi, rocm_agent_enumerator/rocminfo, sycl-ls)")
    return Detection(cpu=cpu, gpus=gpus, compilers=tuple(compilers), notes=tuple(notes))


def which(command, environ=None):
    """The full path of a compiler command's executable, or None."""
    argv = shlex.split(command) if command and command.strip() else []
    path = (environ or os.environ).get("PATH")
    return shutil.which(argv[0], path=path) if argv else None
