"""A resolved profile: extends merged, ``${...}`` expanded, placeholders filled.

The GPU architecture comes, in this order, from ``--gpu-arch``, from the profile's ``cuda_arch`` /
``amdgpu_target`` (Spack's spellings), from the GPU detected on this node, or from the defaults
below (with a note saying so). The CPU microarchitecture that ``{archspec}`` is filled for comes
from ``--target`` (archspec's names, as Spack's ``target=``) or archspec's detection of this host.

The built-in ``gcc`` profile is the one source of compiler defaults: ``resolve(None)`` is that
profile, and the optimisation flags a profile does not set (its ``optimize`` key) are the gcc
profile's.

Long on purpose: the Profile record and :func:`build`, which fills it (extends, compilers,
optimisation flags, GPU target, thresholds), change together whenever a profile key is added.
"""

import os
import re
import shlex
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import archspec.cpu

from rosenna.errors import ToolchainError, UsageError
from rosenna.toolchain import detection as detect_mod
from rosenna.toolchain import schema
from rosenna.toolchain.catalog import PROBE_PLACEHOLDERS
from rosenna.toolchain.schema import DEFAULT_CONSTANT_LIMIT_BYTES, DEFAULT_EMBED_THRESHOLD, OPTIMIZE_LANGS
from rosenna.toolchain.template import TemplateError, expand_env, fill, placeholders_in

DEFAULT_CC = "80"  # sm_80 (A100) when no GPU is detected and nothing names one
DEFAULT_GFX = "gfx90a"  # MI200
#: The profile whose ``optimize`` flags fill in for a profile that sets none.
DEFAULTS_PROFILE = "gcc"
#: Stands for ``{archspec}`` while the other placeholders of an optimisation template are filled.
CPU_SLOT = "@ROSENNA_CPU_FLAGS@"
#: Per native backend: the device compiler and architecture flag of the .mk branch that a profile
#: does not build itself (the gcc profile names nvcc; its hip branch needs hipcc all the same).
DEVICE_BACKENDS = {"cuda": ("nvcc", "-arch=sm_{cc}"), "hip": ("hipcc", "--offload-arch={gfx}")}
OFFLOAD_TRIPLES = {"nvidia": "nvptx64-nvidia-cuda", "amd": "amdgcn-amd-amdhsa", "intel": "spir64"}

# Compiler roles: profile key -> Profile field.
ROLES = {"c": "cc", "cxx": "cxx", "fortran": "fc", "device": "devcc"}


@dataclass(frozen=True)
class GpuTarget:
    """The GPU a resolved profile builds for.

    ``vendor`` is "" for a host profile. ``source`` says where the architecture came from:
    "cuda_arch" or "amdgpu_target" (the profile), "detected: <gpu> (<tool>)", or "default".
    """

    vendor: str
    cc: str
    gfx: str
    source: str

    @property
    def offload_arch(self):
        return self.gfx if self.vendor == "amd" else f"sm_{self.cc}"

    @property
    def offload_triple(self):
        return OFFLOAD_TRIPLES.get(self.vendor, OFFLOAD_TRIPLES["nvidia"])

    def placeholders(self):
        return {"cc": self.cc, "gfx": self.gfx, "offload_arch": self.offload_arch,
                "offload_triple": self.offload_triple}


def parse_gpu_arch(text):
    """``--gpu-arch``: ``("nvidia", "80")`` for 80, 8.0, sm_80, compute_80, 90a; ``("amd", "gfx90a")``.

    Raises:
        UsageError: for anything else.
    """
    value = str(text).strip().lower()
    match = re.fullmatch(r"(?:sm_|compute_)?(\d{1,2})\.?(\d[a-z]?)", value)
    if match:
        return "nvidia", match.group(1) + match.group(2)
    if re.fullmatch(r"gfx[0-9a-f]+(:[a-z]+[+-])*", value):
        return "amd", value
    raise UsageError(f"--gpu-arch {text!r}: give a CUDA compute capability (80, 8.0, sm_90) or an AMD "
                     "target (gfx90a)")


def microarchitecture(name=None):
    """``(archspec Microarchitecture, where it came from)`` for ``--target name``, or this host.

    Raises:
        UsageError: for a name archspec does not know, with the closest ones.
    """
    if name is None:
        return archspec.cpu.host(), "archspec: this host"
    target = archspec.cpu.TARGETS.get(name)
    if target is None:
        import difflib

        close = difflib.get_close_matches(name, list(archspec.cpu.TARGETS), n=3)
        hint = f" (close: {', '.join(close)})" if close else ""
        raise UsageError(f"--target {name!r}: not a microarchitecture archspec knows{hint}; names are "
                         "archspec's, as in Spack's target= (e.g. zen3, icelake, neoverse_v2, x86_64_v3)")
    return target, "--target"


_PROBES = {}


def _probe(command, target):
    """detection.probe_compiler for ``command`` and ``target``, once per PATH."""
    key = (command, target.name, os.environ.get("PATH", ""))
    if key not in _PROBES:
        _PROBES[key] = detect_mod.probe_compiler(command, target, [])
    return _PROBES[key]


def _family(command, target):
    found = _probe(command, target) if command else None
    return found.family if found else ""


def archspec_flags(command, target, key):
    """archspec's optimisation flags for ``target`` with the compiler ``command``, and a note.

    The compiler's family and version come from its ``--version`` banner (nvc -> nvhpc, icx ->
    oneapi, amdclang -> clang, ...: :data:`rosenna.toolchain.detection._FAMILIES`). The note is ""
    when flags were found, else why ``{archspec}`` in ``key`` was left empty.
    """
    if not command:
        return "", f"{key}: {{archspec}} left empty: no compiler"
    found = _probe(command, target)
    if found is None:
        return "", f"{key}: {{archspec}} left empty: '{command}' is not on PATH to ask its version"
    if not found.host_flags:
        return "", f"{key}: {{archspec}} left empty for {target.name}: {found.host_flags_note}"
    return found.host_flags, ""


@dataclass(frozen=True)
class Profile:
    """A toolchain profile resolved for this machine. Get one with :func:`rosenna.toolchain.resolve`."""

    name: str
    source: Path  # the file that defines it
    kind: str  # "path", "user", "site" or "builtin"
    chain: tuple  # the files merged through extends, this one first
    description: str
    aliases: tuple
    gpu_vendor: tuple  # the GPU vendors it targets; () for a host profile
    priority: int
    cc: str
    cxx: str
    fc: str
    devcc: str
    backend: str  # "cuda", "hip" or "omp"
    flags_omp_offload: str
    flags_acc: str
    flags_host: str
    optimize_c: str  # the C compiler's optimisation flags, {archspec} filled
    optimize_fortran: str
    optimize_device: str
    devflags: str  # the device compiler's architecture flags (with optimize_device: device_flags())
    device_link_flags: str
    constant_limit_bytes: int
    embed_threshold: int
    modules: tuple
    job: tuple  # the job: section as (key, value) pairs: what `gpu-gate --print-job` asks the batch system for
    gpu: GpuTarget
    probe: dict  # {"command", "expect", "source"} with placeholders filled, or {}
    reason: str = ""  # why `auto` chose it; "" when asked for by name
    target: str = ""  # the CPU microarchitecture {archspec} was filled for (archspec's name)
    target_source: str = ""  # "--target" or "archspec: this host"
    notes: tuple = ()  # what was assumed: no GPU detected, {archspec} left empty, ...
    families: tuple = ("", "")  # (C, Fortran) compiler family from the banner (archspec's names), "" unknown
    tuning: dict = None  # the ``tuning:`` section ({"default": {...}, "sm_90": {...}}), or None
    #: (C, Fortran) optimisation flags with ``{archspec}`` left unfilled: the generated build files
    #: put the CPU flags resolved when they build there (rosenna.emit.cpu_flags).
    optimize_templates: tuple = ("", "")

    @property
    def device_backend(self):
        """The native backend the profile's device compiler builds: "cuda", "hip" or ""."""
        if self.backend in ("cuda", "hip"):
            return self.backend
        if not self.devcc:
            return ""
        return "hip" if "hipcc" in os.path.basename(shlex.split(self.devcc)[0]) else "cuda"

    def device_flags(self, backend=None):
        """Optimisation and architecture flags of the device compiler of ``backend`` (default: its own)."""
        backend = backend or self.device_backend
        if backend == self.device_backend:
            return " ".join(f for f in (self.optimize_device, self.devflags) if f)
        arch = fill(DEVICE_BACKENDS[backend][1], self.gpu.placeholders())
        return " ".join(f for f in (self.optimize_device, arch) if f)

    def device_compiler(self, backend=None):
        """The device compiler of ``backend`` (default: its own): the profile's, or nvcc / hipcc."""
        backend = backend or self.device_backend
        if backend == self.device_backend and self.devcc:
            return self.devcc
        return DEVICE_BACKENDS[backend][0] if backend in DEVICE_BACKENDS else ""

    @property
    def offload_flags(self):
        """The .mk's ROSENNA_OFFLOAD_FLAGS: OpenMP target flags, else the host OpenMP flags."""
        return self.flags_omp_offload or self.flags_host

    def make_defaults(self):
        """The values the generated .mk recipes default to (and ``toolchain show`` prints).

        ROSENNA_OFFLOAD_FLAGS is the OpenMP target flags, or the host fallback flags for a
        profile that cannot offload OpenMP. DEVCC and DEVFLAGS are those of the profile's own
        device backend (:meth:`device_flags` gives the other's). Every key is present; a value may
        be "" (e.g. DEVCC of a profile with no device compiler).
        """
        return {
            "CC": self.cc,
            "FC": self.fc,
            "CFLAGS": self.optimize_c,
            "FFLAGS": self.optimize_fortran,
            "DEVCC": self.devcc,
            "DEVFLAGS": self.device_flags() if self.devcc else "",
            "ROSENNA_OFFLOAD_FLAGS": self.offload_flags,
            "ROSENNA_BACKEND": self.backend,
        }

    def describe(self):
        """One line for provenance: profile, CPU target, GPU architecture. Without ``--target`` the
        build files choose the CPU when they build (``native``: the building machine's)."""
        target = (self.target or "?") if self.target_source == "--target" else "native"
        return f"toolchain={self.name} target={target} gpu={self.gpu.offload_arch}"

    def compiler(self, role):
        """The command for a role: "c", "cxx", "fortran" or "device"."""
        return getattr(self, ROLES[role])

    def required_roles(self):
        """The compiler roles this profile needs on PATH: c and fortran, and device for cuda/hip."""
        return ("c", "fortran", "device") if self.backend in ("cuda", "hip") else ("c", "fortran")

    def missing_compilers(self, roles=None, environ=None):
        """[(role, command)] of the compilers not found on PATH."""
        roles = self.required_roles() if roles is None else roles
        missing = []
        for role in roles:
            command = self.compiler(role)
            if not command or not detect_mod.which(command, environ):
                missing.append((role, command))
        return missing

    def check_compilers(self, roles=None, environ=None):
        """Raise ToolchainError unless the compilers of ``roles`` are on PATH.

        Raises:
            ToolchainError: naming the profile's file, the key and the command not found.
        """
        missing = self.missing_compilers(roles, environ)
        if missing:
            what = "; ".join(
                f"key 'compilers.{role}': " + (f"'{cmd}' not found on PATH" if cmd else "not set")
                for role, cmd in missing
            )
            raise ToolchainError(f"{self.source}: profile '{self.name}': {what}")

    def to_dict(self):
        out = asdict(self)
        out["source"] = str(self.source)
        out["chain"] = [str(p) for p in self.chain]
        for key in ("aliases", "gpu_vendor", "modules"):
            out[key] = list(out[key])
        out["gpu"]["offload_arch"] = self.gpu.offload_arch
        out["gpu"]["offload_triple"] = self.gpu.offload_triple
        out["make_defaults"] = self.make_defaults()
        out["notes"] = list(self.notes)
        out["job"] = dict(self.job)
        out["families"] = list(self.families)
        return out


def _expand(data, source, environ, prefix=()):
    """``data`` with ``${...}`` expanded in every string."""
    if isinstance(data, dict):
        return {k: _expand(v, source, environ, prefix + (k,)) for k, v in data.items()}
    if isinstance(data, list):
        return [_expand(v, source, environ, prefix + (str(i),)) for i, v in enumerate(data)]
    if isinstance(data, str):
        try:
            return expand_env(data, environ)
        except TemplateError as exc:
            raise ToolchainError(f"{source}: key '{'.'.join(prefix)}': {exc}") from None
    return data


def _gpu_target(data, vendors, gpus, names):
    """Choose the GPU the profile builds for: its own cuda_arch/amdgpu_target, a detected GPU, or defaults.

    ``names`` are the placeholders the profile's strings use; ``source`` speaks only of the
    architectures they need.
    """
    cc = str(data["cuda_arch"]) if "cuda_arch" in data else ""
    gfx = data.get("amdgpu_target", "")
    detected = {}
    for gpu in gpus or ():
        detected.setdefault(gpu.vendor, gpu)
    vendor = next((v for v in vendors if v in detected), "")
    if not vendor:
        if gfx and not cc and "amd" in vendors:
            vendor = "amd"
        else:
            vendor = vendors[0] if vendors else ""
    derived = bool(names & {"offload_arch", "offload_triple"})
    uses = [arch for arch, needed in (("cc", "cc" in names or (derived and vendor != "amd")),
                                      ("gfx", "gfx" in names or (derived and vendor == "amd"))) if needed]
    sources = []
    if cc:
        sources.append("cuda_arch")
    elif "nvidia" in detected:
        g = detected["nvidia"]
        cc = g.arch
        if "cc" in uses:
            sources.append(f"detected: {g.model or 'NVIDIA GPU'} ({g.tool})")
    if gfx:
        sources.append("amdgpu_target")
    elif "amd" in detected:
        g = detected["amd"]
        gfx = g.arch
        if "gfx" in uses:
            sources.append(f"detected: {g.arch} ({g.tool})")
    if ("cc" in uses and not cc) or ("gfx" in uses and not gfx):
        sources.append("default")
    source = "; ".join(sources) if uses else "not used by this profile"
    return GpuTarget(vendor=vendor, cc=cc or DEFAULT_CC, gfx=gfx or DEFAULT_GFX, source=source)


def _placeholder_names(data):
    """The placeholders the profile's templated strings use."""
    texts = [data.get("devflags", ""), data.get("device_link_flags", "")]
    texts += list(data.get("flags", {}).values()) + [data.get("probe", {}).get("command", "")]
    texts += list(data.get("optimize", {}).values())
    names = set()
    for text in texts:
        names |= placeholders_in(text, PROBE_PLACEHOLDERS)
    return names & {"cc", "gfx", "offload_arch", "offload_triple"}


def _defaults_optimize(catalog, environ):
    """The ``optimize`` flags of the defaults profile (gcc), for a profile that sets none."""
    try:
        data, _ = catalog.merged(catalog.lookup(DEFAULTS_PROFILE))
    except ToolchainError:
        return {}
    return _expand(data, DEFAULTS_PROFILE, environ).get("optimize", {})


def _check_archspec_use(data, source):
    for key, text in [("devflags", data.get("devflags", "")), ("device_link_flags", data.get("device_link_flags", "")),
                      ("optimize.device", data.get("optimize", {}).get("device", ""))] + [
            (f"flags.{k}", v) for k, v in data.get("flags", {}).items()]:
        if "{archspec}" in text:
            raise ToolchainError(f"{source}: key '{key}': {{archspec}} is filled only in optimize.c and "
                                 "optimize.fortran (it depends on that language's compiler)")


def _check_plain(source, values, modules):
    """Refuse a resolved value that is not plain arguments (``${VAR}`` expanded from the environment
    can bring what the schema refused in the file), or a module name that is not one."""
    for key, text in values.items():
        problem = schema.plain_arguments_problem(text)
        if problem:
            raise ToolchainError(f"{source}: key '{key}' (as resolved, ${{...}} expanded): {problem}")
    for i, module in enumerate(modules):
        if not re.fullmatch(schema.MODULE, module):
            raise ToolchainError(f"{source}: key 'modules[{i}]' (as resolved): {ascii(module)[:80]} is not a module "
                                 "name (letters, digits and . _ + / @ : = , -)")


def build(catalog, profile_file, *, gpus=None, environ=None, detect_gpus=True, reason="", target=None,
          gpu_arch=None):
    """Resolve one profile file of ``catalog`` into a :class:`Profile`.

    Args:
        gpus: the detected GPUs; when None and neither the profile nor ``gpu_arch`` fixes the GPU
            architecture, the GPUs are detected now (unless ``detect_gpus`` is false).
        target: archspec's name of the CPU microarchitecture to build for (``--target``); None:
            this host as archspec detects it.
        gpu_arch: ``--gpu-arch`` (see :func:`parse_gpu_arch`), overriding profile and detection.
    """
    environ = os.environ if environ is None else environ
    data, chain = catalog.merged(profile_file)
    data = _expand(data, profile_file.path, environ)
    _check_archspec_use(data, profile_file.path)
    names = _placeholder_names(data)
    override = parse_gpu_arch(gpu_arch) if gpu_arch else None
    if override:
        data = dict(data, **({"cuda_arch": override[1]} if override[0] == "nvidia" else {"amdgpu_target": override[1]}))
    # Every .mk has a cuda and a hip branch, so both architectures are wanted whatever the profile uses.
    fixed = "cuda_arch" in data and "amdgpu_target" in data
    if gpus is None and detect_gpus and not fixed:
        gpus = detect_mod.detect_gpus()
    vendors = tuple(data.get("gpu_vendor", ()))
    gpu = _gpu_target(data, vendors, gpus, names)
    if override:
        gpu = replace(gpu, source=gpu.source.replace("cuda_arch" if override[0] == "nvidia" else "amdgpu_target",
                                                     "--gpu-arch"))
    notes = []
    if "default" in gpu.source:
        notes.append(f"no GPU detected (nvidia-smi, rocm_agent_enumerator): building for {gpu.offload_arch}; "
                     "name the GPU with --gpu-arch")
    values = gpu.placeholders()
    flags = {k: fill(v, values) for k, v in data.get("flags", {}).items()}
    cpu, target_source = microarchitecture(target)
    optimize = dict(_defaults_optimize(catalog, environ), **data.get("optimize", {}))
    compilers_by_lang = {"c": data["compilers"]["c"], "fortran": data["compilers"]["fortran"]}
    resolved_optimize, templates = {}, {}
    for lang in OPTIMIZE_LANGS:
        text = optimize.get(lang, "")
        templates[lang] = " ".join(fill(fill(text, {"archspec": CPU_SLOT}), values).split()).replace(CPU_SLOT, "{archspec}")
        if "{archspec}" in text:
            found, note = archspec_flags(compilers_by_lang[lang], cpu, f"optimize.{lang}")
            if note:
                notes.append(note)
            text = fill(text, {"archspec": found})
        resolved_optimize[lang] = " ".join(fill(text, values).split())
    compilers = data["compilers"]
    probe = dict(data.get("probe", {}))
    if probe:
        probe["command"] = fill(
            probe["command"],
            dict(values, c=compilers.get("c", ""), cxx=compilers.get("cxx", ""),
                 fortran=compilers.get("fortran", ""), device=compilers.get("device", ""),
                 omp_offload=flags.get("omp_offload", ""), acc=flags.get("acc", ""),
                 host=flags.get("host", "")),
        )
    thresholds = data.get("thresholds", {})
    _check_plain(profile_file.path, dict(
        {f"compilers.{role}": compilers.get(role, "") for role in ROLES},
        **{f"flags.{k}": v for k, v in flags.items()},
        **{f"optimize.{k}": v for k, v in resolved_optimize.items()},
        devflags=fill(data.get("devflags", ""), values), device_link_flags=fill(data.get("device_link_flags", ""), values)),
        data.get("modules", ()))
    return Profile(
        name=profile_file.name,
        source=profile_file.path,
        kind=profile_file.kind,
        chain=tuple(f.path for f in chain),
        description=data.get("description", ""),
        aliases=tuple(profile_file.data.get("aliases", ())),
        gpu_vendor=vendors,
        priority=data.get("priority", 0),
        cc=compilers["c"],
        cxx=compilers.get("cxx", ""),
        fc=compilers["fortran"],
        devcc=compilers.get("device", ""),
        backend=data["backend"],
        flags_omp_offload=flags.get("omp_offload", ""),
        flags_acc=flags.get("acc", ""),
        flags_host=flags["host"],
        optimize_c=resolved_optimize["c"],
        optimize_fortran=resolved_optimize["fortran"],
        optimize_device=resolved_optimize["device"],
        devflags=fill(data.get("devflags", ""), values),
        device_link_flags=fill(data.get("device_link_flags", ""), values),
        constant_limit_bytes=thresholds.get("constant_limit_bytes", DEFAULT_CONSTANT_LIMIT_BYTES),
        embed_threshold=thresholds.get("embed_threshold", DEFAULT_EMBED_THRESHOLD),
        modules=tuple(data.get("modules", ())),
        job=tuple(sorted(data.get("job", {}).items())),
        gpu=gpu,
        probe=probe,
        reason=reason,
        target=cpu.name,
        target_source=target_source,
        notes=tuple(notes),
        families=tuple(_family(compilers_by_lang[lang], cpu) for lang in ("c", "fortran")),
        tuning=data.get("tuning"),
        optimize_templates=(templates["c"], templates["fortran"]),
    )
