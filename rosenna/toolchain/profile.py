"""A resolved profile: extends merged, ``${...}`` expanded, GPU placeholders filled.

The GPU architecture comes, in this order, from the profile's ``cuda_arch`` / ``amdgpu_target``
(Spack's spellings), from the GPU detected on this node, or from the defaults below (the
architectures the generated .mk recipes assume when nothing says otherwise).
"""

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from rosenna.errors import ToolchainError
from rosenna.toolchain import detection as detect_mod
from rosenna.toolchain.catalog import PROBE_PLACEHOLDERS, Catalog
from rosenna.toolchain.schema import DEFAULT_CONSTANT_LIMIT_BYTES, DEFAULT_EMBED_THRESHOLD
from rosenna.toolchain.template import TemplateError, expand_env, fill, placeholders_in

DEFAULT_CC = "80"  # sm_80, the .mk recipes' default DEVFLAGS
DEFAULT_GFX = "gfx90a"
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


@dataclass(frozen=True)
class Profile:
    """A toolchain profile resolved for this machine. Build one with :func:`resolve`."""

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
    devflags: str
    device_link_flags: str
    constant_limit_bytes: int
    embed_threshold: int
    modules: tuple
    gpu: GpuTarget
    probe: dict  # {"command", "expect", "source"} with placeholders filled, or {}
    reason: str = ""  # why `auto` chose it; "" when asked for by name

    def make_defaults(self):
        """The values ``generate --toolchain`` writes as defaults into the .mk recipes.

        ROSENNA_OFFLOAD_FLAGS is the OpenMP target flags, or the host fallback flags for a
        profile that cannot offload OpenMP. Every key is present; a value may be "" (e.g. DEVCC
        of a profile with no device compiler).
        """
        return {
            "CC": self.cc,
            "FC": self.fc,
            "DEVCC": self.devcc,
            "DEVFLAGS": self.devflags,
            "ROSENNA_OFFLOAD_FLAGS": self.flags_omp_offload or self.flags_host,
            "ROSENNA_BACKEND": self.backend,
        }

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
    names = set()
    for text in texts:
        names |= placeholders_in(text, PROBE_PLACEHOLDERS)
    return names & {"cc", "gfx", "offload_arch", "offload_triple"}


def build(catalog, profile_file, *, gpus=None, environ=None, detect_gpus=True, reason=""):
    """Resolve one profile file of ``catalog`` into a :class:`Profile`.

    Args:
        gpus: the detected GPUs; when None and the profile has placeholders its own keys do not
            fix, the GPUs are detected now (unless ``detect_gpus`` is false).
    """
    environ = os.environ if environ is None else environ
    data, chain = catalog.merged(profile_file)
    data = _expand(data, profile_file.path, environ)
    names = _placeholder_names(data)
    fixed = not names or ("cuda_arch" in data and "amdgpu_target" in data) or (
        names <= {"cc"} and "cuda_arch" in data) or (names <= {"gfx"} and "amdgpu_target" in data)
    if gpus is None and detect_gpus and not fixed:
        gpus = detect_mod.detect_gpus()
    vendors = tuple(data.get("gpu_vendor", ()))
    gpu = _gpu_target(data, vendors, gpus, names)
    values = gpu.placeholders()
    flags = {k: fill(v, values) for k, v in data.get("flags", {}).items()}
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
        devflags=fill(data.get("devflags", ""), values),
        device_link_flags=fill(data.get("device_link_flags", ""), values),
        constant_limit_bytes=thresholds.get("constant_limit_bytes", DEFAULT_CONSTANT_LIMIT_BYTES),
        embed_threshold=thresholds.get("embed_threshold", DEFAULT_EMBED_THRESHOLD),
        modules=tuple(data.get("modules", ())),
        gpu=gpu,
        probe=probe,
        reason=reason,
    )


def resolve(name, *, detection=None, catalog=None, environ=None):
    """The profile ``name`` resolved for this machine.

    Args:
        name: a profile name or alias, optionally with a version as Spack or EasyBuild spell it
            (``gcc@13.2.0``, ``GCC/13.2.0``, ``foss/2023a``: :mod:`rosenna.toolchain.request`); "auto" to detect this node and choose (see
            :func:`rosenna.toolchain.select.select`); None for today's defaults, the ``gcc`` profile.
        detection: a :class:`rosenna.toolchain.detection.Detection` to use instead of detecting.
        catalog: the profiles to choose from (default: those on the search path).
        environ: the environment for ``${...}`` and PATH (default: ``os.environ``).

    Raises:
        ToolchainError: for an unknown name and for any broken profile involved.
    """
    from rosenna.toolchain import request  # request and select build profiles with this module
    from rosenna.toolchain.select import select

    catalog = Catalog() if catalog is None else catalog
    environ = os.environ if environ is None else environ
    if name is None:
        name = "gcc"
    if name == "auto":
        if detection is None:
            detection = detect_mod.detect(compiler_commands(catalog, environ))
        selection = select(catalog, detection, environ=environ)
        return selection.profile
    gpus = detection.gpus if detection is not None else None
    asked = request.parse(name)  # gcc@13.2.0, GCC/13.2.0, foss/2023a: the version is checked
    profile = build(catalog, catalog.lookup(asked.name), gpus=gpus, environ=environ)
    return request.check(profile, asked, environ)


def compiler_commands(catalog, environ=None):
    """Every compiler command the winning profiles name, ``${...}`` expanded, for detection."""
    environ = os.environ if environ is None else environ
    commands = []
    for f in catalog.winners():
        for command in f.data.get("compilers", {}).values():
            try:
                commands.append(expand_env(command, environ))
            except TemplateError:
                pass  # reported when that profile is resolved
    return list(dict.fromkeys(commands))
