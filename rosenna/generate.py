"""The generator as a library: ONNX model -> plan -> files, written atomically."""

import os
import re
from dataclasses import dataclass, field

from rosenna import __version__, abi, emit, frontend, ir, limits, outdir, passes, plan as planner, quoting
from rosenna import strategy as strategies
from rosenna.passes import low_precision
from rosenna.strategy import Tuning
from rosenna.errors import RosennaError, UsageError

LANGS = ("c", "fortran", "both")
PRECISIONS = ("single", "double", "bf16", "fp16")
#: The 16-bit precisions: float32 code whose dense layers round to the type (rosenna.passes.low_precision).
LOW_PRECISIONS = ("bf16", "fp16")
#: Longest model name: every derived identifier (e.g. ``<name>_infer_batch_dev``,
#: ``<name>_status_unknown_tensor``) must stay within Fortran's 63 characters.
MAX_NAME = 63 - len("_status_unknown_tensor")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

@dataclass
class Options:
    """What to generate, and the toolchain profile whose compilers and flags the build files carry.

    Build them from a profile with :meth:`from_profile` (the one place a profile's thresholds
    become options); ``Options()`` alone means the built-in gcc profile, resolved for this host
    when the build files are written.
    """

    lang: str = "both"
    precision: str = None  # None: the model's own dtype
    name: str = None  # None: the model file's stem, sanitized
    embed: bool = None  # None: by EMBED_THRESHOLD
    dims: dict = field(default_factory=dict)
    #: Graph inputs made constants: {input name: path of a .npy file holding its value}.
    freeze: dict = field(default_factory=dict)
    embed_threshold: int = limits.EMBED_THRESHOLD
    #: Embedded weights up to this many bytes go to CUDA/HIP __constant__ memory.
    constant_limit: int = limits.CONSTANT_LIMIT
    #: The resolved toolchain profile (rosenna.toolchain.Profile); None: the gcc profile.
    toolchain: object = None
    #: The tuning (rosenna.strategy.Tuning); None: the defaults.
    tuning: object = None
    #: Emit ``<name>_infer_one`` for a per-point plan too (whole-field plans always have it).
    infer_one: bool = False
    #: verify compiles with $CC / $FC when set (no profile was named on the command line).
    compilers_from_env: bool = True
    #: Budgets (docs/security.md): elements of one folded constant, loop nests of one op's code.
    max_fold_elements: int = limits.MAX_FOLD_ELEMENTS
    max_op_nests: int = limits.MAX_OP_NESTS

    @classmethod
    def from_profile(cls, profile, tune=(), **fields):
        """Options for ``profile`` (a resolved :class:`rosenna.toolchain.Profile`): its thresholds,
        and its ``tuning:`` sections for its GPU (``default``, then e.g. ``sm_90``), then ``tune``
        (``["KEY=VALUE", ...]``, the command line's ``--tune``) over them."""
        tuning = Tuning.for_target(getattr(profile, "tuning", None), target_arch(profile),
                                   where=f"toolchain profile {profile.name}: tuning")
        if profile.constant_limit_bytes != limits.CONSTANT_LIMIT:  # thresholds.constant_limit_bytes
            tuning = tuning.replace(constant_limit=profile.constant_limit_bytes)
        tuning = tuning.parse_overrides(tune)
        return cls(toolchain=profile, embed_threshold=profile.embed_threshold,
                   constant_limit=tuning.constant_limit, tuning=tuning, **fields)

    def tuned(self):
        """The tuning: :attr:`tuning` (default :class:`~rosenna.strategy.Tuning`'s defaults) with
        :attr:`constant_limit` in it."""
        tuning = self.tuning or Tuning()
        if self.constant_limit != tuning.constant_limit:
            tuning = tuning.replace(constant_limit=self.constant_limit)
        return tuning

    def profile(self):
        """The toolchain profile: the one given, else the built-in gcc profile resolved for this host."""
        if self.toolchain is None:
            from rosenna import toolchain

            self.toolchain = toolchain.resolve(None)
        return self.toolchain


def target_arch(profile):
    """The GPU architecture a profile's ``tuning:`` section is looked up by (``sm_90``, ``gfx90a``):
    the profile's GPU (its ``cuda_arch`` / ``amdgpu_target``, else the one detected), or None for a
    host profile on a node without one."""
    gpu = getattr(profile, "gpu", None)
    if gpu is None or (not gpu.vendor and gpu.source == "default"):
        return None
    return gpu.gfx if gpu.vendor == "amd" or gpu.source == "amdgpu_target" else f"sm_{gpu.cc}"


def mangled(text):
    """``text`` as a model name: runs of other characters and of ``_`` become one ``_``; ``m_`` in
    front of a name that does not start with a letter or that :func:`outdir.reserved` refuses (no
    ``m_*`` name is in its table: tested)."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", text)).strip("_") or "model"
    if not name[0].isalpha() or outdir.reserved(name):
        name = "m_" + name
    return name[:MAX_NAME].rstrip("_")


def default_name(path):
    return mangled(os.path.splitext(os.path.basename(path))[0])


def check_name(name):
    if not _NAME.match(name or ""):
        raise UsageError(
            f"--name {name!r}: not a valid C and Fortran identifier; use a letter followed by letters, "
            "digits and underscores"
        )
    if len(name) > MAX_NAME:
        raise UsageError(f"--name {name!r}: {len(name)} characters; at most {MAX_NAME} keep every derived "
                         "Fortran identifier within 63 characters")
    why = outdir.reserved(name)
    if why:
        raise UsageError(f"--name {name!r}: {why}; choose another name, e.g. --name {mangled(name)}")


def build_plan(model_path, options):
    """Import, run the passes and plan; returns ``(graph, plan)``."""
    if options.lang not in LANGS:
        raise UsageError(f"--lang {options.lang!r}: choose one of {', '.join(LANGS)}")
    if options.precision not in (None,) + PRECISIONS:
        raise UsageError(f"--precision {options.precision!r}: choose single, double, bf16 or fp16")
    name = options.name if options.name is not None else default_name(model_path)
    check_name(name)
    graph = frontend.import_model(model_path, options.dims, options.freeze)
    low = options.precision if options.precision in LOW_PRECISIONS else None
    precision = "single" if low else options.precision or ("double" if graph.dtype == "float64" else "single")
    for option, value in (("--max-fold-elements", options.max_fold_elements), ("--max-op-nests", options.max_op_nests)):
        if value < 1:
            raise UsageError(f"{option} {value}: give a positive count")
    graph.max_fold_elements, graph.max_op_nests = options.max_fold_elements, options.max_op_nests
    graph.dft_direct_percent = options.tuned().dft_direct_percent
    passes.run(graph)
    if low:
        low_precision.apply(graph, low)
    plan = planner.build(graph, name, precision, options.embed, options.embed_threshold, options.infer_one,
                         options.tuned(), low_precision=low)
    for count, what in ((plan.nx, "x (one point's inputs)"), (plan.ny, "y (one point's outputs)"),
                        (sum(plan.scratch), "the per-point scratch"), (plan.parameters, "the weights")):
        ir.check_size(count, what)
    return graph, plan


def stamp(model_path, plan, options):
    """The provenance line every generated file starts with: version, options, toolchain, model hash."""
    embed = "embedded" if plan.embed else "file-loaded"
    tuned = "" if not options.tuned().changed() else " " + options.tuned().describe()
    producer = planner.comment_text(plan.producer or "unknown", 40)
    model = planner.comment_text(os.path.basename(model_path), 40)
    return (f"Generated by rosenna {__version__} from {model} (sha256 {frontend.model_digest(model_path)}, "
            f"producer {producer}); name={plan.name} precision={plan.low_precision or plan.precision} weights={embed} "
            f"plan={plan.hash} {options.profile().describe()}{tuned}. Do not edit.")


def decide(plan, options):
    """The strategy stage for ``plan`` under the options' tuning and the profile's host target."""
    return strategies.decide(plan, options.tuned(), strategies.point.vector_bytes(options.profile()))


def generate(model_path, out_dir, options):
    """Generate the files into ``out_dir``; return ``(plan, [paths written])``.

    The set replaces the model's previous one as a unit (``rosenna.outdir.write_set``): killed at
    any instant, the next run into ``out_dir`` finds the complete old or the complete new set.
    """
    why = quoting.build_path_problem(os.path.abspath(out_dir))
    if why:
        raise UsageError(f"--out {ascii(out_dir)[1:-1]}: {why}; choose a folder whose path has only letters, digits "
                         "and / . _ - + , @ ~")
    graph, plan = build_plan(model_path, options)
    files = emit.render(decide(plan, options), options.lang, stamp(model_path, plan, options), options.profile())
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot create the directory ({exc.strerror})") from None
    if not os.access(out_dir, os.W_OK):
        raise UsageError(f"--out {out_dir}: the directory is not writable")
    data = {fname: text.encode("ascii") for fname, text in files.items()}
    for fname, text in data.items():
        if len(text) > limits.MAX_SOURCE_BYTES:
            raise RosennaError(f"{model_path}: the generated {fname} would be {len(text)} bytes, over the budget of "
                               f"{limits.MAX_SOURCE_BYTES} bytes of one source file; nothing was written")
    if not plan.embed:
        data[f"{plan.name}.rwt"] = abi.rwt_bytes(plan)
    if options.lang in ("fortran", "both"):  # the folder as an fpm package (shared by its models)
        data["fpm.toml"] = emit.fpm.manifest().encode("ascii")
    return plan, write_set(out_dir, plan.name, data)


def write_set(out_dir, name, data):
    """Replace model ``name``'s set in ``out_dir`` by ``data`` ({file name: bytes}), under the
    directory's lock, after finishing what an interrupted run left and refusing a name that clashes
    with another set there. Returns the paths written."""
    try:
        with outdir.Lock(out_dir):
            entries = outdir.recover(out_dir)
            for other in outdir.other_sets(out_dir, name, entries):
                why = outdir.conflict(name, other)
                if why:
                    raise UsageError(f"--out {out_dir}: {why}; choose another --name or another --out")
            return outdir.write_set(out_dir, name, data)
    except OSError as exc:
        raise RosennaError(f"--out {out_dir}: writing failed ({exc.strerror}); the previous files are kept") from None
