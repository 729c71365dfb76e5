"""Verify: generate, compile and run every entry point of the generated set on the host, and
compare every output element with a reference on the same inputs.

One harness per language (one compile each) runs ``<name>_infer`` per point over two OpenMP
threads, ``<name>_infer_batch`` with 1, 31, 32, 33 and 1000 points for a host SIMD block of 32
(one point, a partial block, a full one, one over, many blocks over the threads; 1 and 3 samples
for a whole-field plan) and ``<name>_infer_one`` where the set has it, each call checked for its
status and for writes past its last point; a file-loaded build (``--no-embed``) reads its weights
through ``<name>_init``.

The reference is onnxruntime on random inputs (uniform in [-1, 1)); for a model onnxruntime no
longer runs (an opset-6 era file), onnxruntime on the model converted by onnx's version converter,
which the report says; or stored inputs and outputs (``--reference``: an ONNX ``test_data_set_*``
folder of ``input_*.pb``/``output_*.pb`` TensorProtos, or a ``.npz`` of arrays named after the
model's inputs and outputs), e.g. PyTorch's own outputs. The pass rule is
:data:`rosenna.compare.RULE`, with the tolerance of the precision built
(:func:`rosenna.compare.judging_tolerance`: never tighter than the model's dtype allows). The work
folder is removed afterwards unless ``keep`` names one (a private folder, every file in it new:
:func:`rosenna.outdir.private_folder`).
"""

import glob
import os
import re
import shlex
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from rosenna import frontend
from rosenna import generate as gen
from rosenna import outdir
from rosenna.compare import RULE, judging_tolerance, low_precision_tolerance
from rosenna.errors import ModelError, UsageError
from rosenna.ir import int_range
from rosenna.toolrun import compiler, run
from rosenna.verify_harness import (ENTRIES, THREADS, calls_for, entries_of, harness_source, judge_calls,
                                    points_needed)
from rosenna.verify_inputs import Draw, input_draws, random_inputs

#: onnxruntime's log severity while verify uses it: 4, fatal only (its errors reach the user as
#: rosenna's one-line message, not as its own log lines on stderr).
QUIET = 4

#: The opsets tried, newest first, when onnxruntime cannot run the model as written.
CONVERT_TARGETS = (21, 17, 13)


@dataclass
class Reference:
    """Inputs and expected outputs, each stacked over the cases: ``(cases,) + point shape``."""

    inputs: dict  # graph input name -> array
    outputs: list  # in graph output order
    source: str  # where the expected outputs come from, for the report
    draws: dict = field(default_factory=dict)  # input name -> Draw, for inputs not uniform in [-1, 1)

    @property
    def cases(self):
        return len(self.outputs[0]) if self.outputs else len(next(iter(self.inputs.values())))


@dataclass
class Verification:
    plan: object
    results: list
    reference: Reference
    calls: list = ()  # the Call list the harnesses ran
    tolerance: str = ""  # which tolerance judged, and why

    @property
    def passed(self):
        return all(r.passed for r in self.results)


def depth(graph):
    """The longest chain of nodes from the graph's inputs to an output (at least 1)."""
    producers = graph.producers()
    longest = {}
    for node in graph.nodes:  # in topological order
        longest[id(node)] = 1 + max((longest.get(id(producers[i]), 0) for i in node.inputs if i in producers),
                                    default=0)
    return max(longest.values(), default=1)


def dense_layers(graph):
    """The most Gemm nodes on one path from the graph's inputs to an output (at least 1): the
    roundings a value meets under ``--precision bf16`` / ``fp16``."""
    producers = graph.producers()
    longest = {}
    for node in graph.nodes:  # in topological order
        longest[id(node)] = (node.op == "Gemm") + max((longest.get(id(producers[i]), 0) for i in node.inputs
                                                       if i in producers), default=0)
    return max(max(longest.values(), default=1), 1)


#: Ops whose outputs are sums over one input axis, and that axis: ``(input index, axis)``.
_SUMMED_AXIS = {"Gemm": (0, -1), "MatMul": (0, -1), "Conv": (1, None), "ConvTranspose": (1, None)}


def reduction_length(graph):
    """The longest sum one output element of a Gemm, MatMul or Conv takes (at least 1): a float
    sum's rounding error grows with its length (see :func:`rosenna.compare.judging_tolerance`)."""
    longest = 1
    for node in graph.nodes:
        where = _SUMMED_AXIS.get(node.op)
        if where is None or len(node.inputs) <= where[0]:
            continue
        try:
            shape = tuple(graph.shape_of(node.inputs[where[0]]))
        except Exception:  # a value without a static shape sums nothing we can count
            continue
        if where[1] is not None:
            n = shape[where[1]] if shape else 1
        else:  # a convolution's weight (M, C/group, k...) sums C/group x prod(k) products
            n = 1
            for d in shape[1:]:
                n *= d
        if node.op == "Gemm" and shape and node.attrs.get("transA", 0):
            n = shape[0]
        longest = max(longest, int(n))
    return longest


def _ort_reason(exc):
    """onnxruntime's message without its ``[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED :`` prefix."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)


def _session(model):
    """An onnxruntime CPU session for a path or serialized model."""
    from rosenna.extras import onnxruntime  # the verify extra: a clear message when it is missing

    ort = onnxruntime()

    # Fatal messages only, from the process-wide logger too (set before the first InferenceSession makes it):
    # what onnxruntime cannot do reaches the user once, as rosenna's one-line error.
    ort.set_default_logger_severity(QUIET)
    opts = ort.SessionOptions()
    opts.log_severity_level = QUIET
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _converted_session(model_path, reason):
    """onnxruntime on the model converted to a newer opset; ``(session, note)``.

    Raises ModelError (one line, both reasons) when no conversion gives a model onnxruntime runs.
    """
    import onnx
    from onnx import version_converter

    model = onnx.load(model_path)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    tried = []
    for target in CONVERT_TARGETS:
        if target <= opset:
            continue
        try:
            converted = version_converter.convert_version(model, target)
            sess = _session(converted.SerializeToString())
        except Exception as exc:  # the converter and onnxruntime raise many types
            tried.append(f"opset {target}: {_ort_reason(exc)}")
            continue
        note = (f"onnxruntime on the model converted from opset {opset} to {target} by onnx.version_converter "
                f"(onnxruntime does not run it as written: {reason})")
        return sess, note
    why = "; ".join(tried[:1]) or f"the model's opset {opset} is not older than {CONVERT_TARGETS[0]}"
    raise ModelError(f"{model_path}: no reference: onnxruntime does not run the model ({reason}) and onnx's "
                     f"version converter gives no model it runs ({why}); give stored outputs with --reference DIR")


def ort_reference(model_path, graph, cases, seed, frozen=None, draws=None):
    """onnxruntime's outputs on random inputs drawn as ``draws`` says ({name: Draw}, default
    :func:`input_draws`), one session run per case (each case is one point); the inputs in
    ``frozen`` ({name: array}, ``--freeze``) are fed their array in every case."""
    from rosenna.extras import onnxruntime  # the verify extra: one line when it is missing

    ort = onnxruntime()

    inputs = random_inputs(graph, cases, seed, draws)
    try:
        sess, source = _session(model_path), f"onnxruntime {ort.__version__} on {cases} random inputs"
    except Exception as exc:
        sess, note = _converted_session(model_path, _ort_reason(exc))
        source = f"{note}, on {cases} random inputs"
    feed_names = [i.name for i in sess.get_inputs()]
    frozen = frozen or {}
    if sorted(feed_names) != sorted(list(graph.inputs) + list(frozen)):
        raise ModelError(f"{model_path}: onnxruntime sees inputs {feed_names}, rosenna {graph.inputs}; "
                         "give stored outputs with --reference DIR")
    outs = [[] for _ in graph.outputs]
    for i in range(cases):
        # np.asarray: a rank-0 input is a 0-d array, not the numpy scalar indexing gives
        feed = {name: np.asarray(inputs[name][i]) for name in graph.inputs} | frozen
        try:
            values = sess.run(None, feed)
        except Exception as exc:
            raise ModelError(f"{model_path}: onnxruntime cannot run the model: {_ort_reason(exc)}") from None
        for k, value in enumerate(values):
            outs[k].append(np.asarray(value))
    return Reference(inputs, [np.stack(v) for v in outs], source)


def _cases_of(array, point_shape, what):
    """Split a stored array into per-point arrays of ``point_shape``: the array is one point, a stack
    of points along a new first axis, or (where the point's first axis is a batch of 1) points
    along that axis."""
    point_shape = tuple(point_shape)
    if array.shape == point_shape:
        return [array]
    if point_shape and point_shape[0] == 1 and array.ndim == len(point_shape) and array.shape[1:] == point_shape[1:]:
        return [array[k:k + 1] for k in range(array.shape[0])]
    if array.ndim == len(point_shape) + 1 and array.shape[1:] == point_shape:
        return list(array)
    raise ModelError(f"{what}: shape {tuple(array.shape)} fits neither the model's {point_shape} per point nor a "
                     "stack of such points; store arrays of the model's shapes (or stack them along a first axis)")


def _read_tensor(path):
    import onnx
    from onnx import numpy_helper

    tensor = onnx.TensorProto()
    try:
        with open(path, "rb") as fh:
            tensor.ParseFromString(fh.read())
        return numpy_helper.to_array(tensor)
    except Exception as exc:
        raise ModelError(f"{path}: not a serialized ONNX TensorProto ({type(exc).__name__})") from None


def _numbered(folder, kind):
    files = glob.glob(os.path.join(folder, f"{kind}_*.pb"))
    number = {f: re.fullmatch(rf"{kind}_(\d+)\.pb", os.path.basename(f)) for f in files}
    return sorted((f for f in files if number[f]), key=lambda f: int(number[f].group(1)))


def _stored_sets(path, graph):
    """``[(label, inputs list, outputs list)]`` from a .npz file or a test_data_set folder."""
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    if os.path.isfile(path):
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
        except Exception as exc:
            raise UsageError(f"--reference {path}: not a .npz file of arrays ({type(exc).__name__})") from None

        def pick(names, kind):
            got = []
            for k, name in enumerate(names):
                key = name if name in arrays else f"{kind}_{k}"
                if key not in arrays:
                    raise UsageError(f"--reference {path}: no array named {name!r} (or {kind}_{k}); "
                                     f"it holds {', '.join(sorted(arrays)) or 'nothing'}")
                got.append(arrays[key])
            return got

        return [(path, pick(graph.inputs, "input"), pick(graph.outputs, "output"))]
    if not os.path.isdir(path):
        kind = frontend.file_kind(path)  # a FIFO or device is named, never opened
        raise UsageError(f"--reference {path}: {'no such file or folder' if kind == 'no such file' else kind}; give a "
                         "test_data_set folder or a .npz file")
    folders = sorted(glob.glob(os.path.join(path, "test_data_set_*")))
    folders = [f for f in folders if os.path.isdir(f)] or [path]
    sets = []
    for folder in folders:
        ins, outs = _numbered(folder, "input"), _numbered(folder, "output")
        if len(ins) != n_in or len(outs) != n_out:
            raise UsageError(f"--reference {folder}: {len(ins)} input_*.pb and {len(outs)} output_*.pb files; "
                             f"the model has {n_in} run-time inputs and {n_out} outputs")
        sets.append((folder, [_read_tensor(f) for f in ins], [_read_tensor(f) for f in outs]))
    return sets


def _check_stored_input(label, name, array, dtype):
    """Refuse stored values input ``name`` (of ``dtype``) cannot take: floats for a float input;
    integers (or booleans) within the type's range for an integer or boolean input."""
    if dtype.kind == "f":
        if array.dtype.kind != "f":
            raise ModelError(f"{label}: input {name!r} holds {array.dtype} values; the model takes {dtype}: "
                             "store floats")
        return
    if array.dtype.kind not in "iub":
        raise ModelError(f"{label}: input {name!r} holds {array.dtype} values; the model takes {dtype}: store "
                         f"{'booleans' if dtype == np.bool_ else 'integers'}")
    lowest, highest = int_range(dtype)
    if array.size and (array.min() < lowest or array.max() > highest):
        raise ModelError(f"{label}: input {name!r} holds values from {array.min()} to {array.max()}; the model's "
                         f"{dtype} takes {lowest} to {highest}")


def stored_reference(path, graph, plan):
    """Inputs and expected outputs read from ``path`` (see the module docstring)."""
    inputs = {name: [] for name in graph.inputs}
    outputs = [[] for _ in graph.outputs]
    for label, ins, outs in _stored_sets(path, graph):
        counts = set()
        for name, array in zip(graph.inputs, ins):
            _check_stored_input(label, name, np.asarray(array), np.dtype(graph.values[name].dtype))
            split = _cases_of(np.asarray(array), graph.shape_of(name), f"{label}: input {name!r}")
            inputs[name].extend(a.astype(graph.values[name].dtype) for a in split)
            counts.add(len(split))
        for k, (s, array) in enumerate(zip(plan.outputs, outs)):
            split = _cases_of(np.asarray(array, dtype=np.float64), s.shape, f"{label}: output {s.name!r}")
            outputs[k].extend(split)
            counts.add(len(split))
        if len(counts) > 1:
            raise ModelError(f"{label}: the inputs and outputs hold different numbers of points ({sorted(counts)})")
    ref = Reference({n: np.stack(v) for n, v in inputs.items()}, [np.stack(v) for v in outputs], "")
    ref.source = f"stored outputs from {path} ({ref.cases} case{'s' if ref.cases != 1 else ''})"
    return ref


def pack(plan, arrays, slices, cases, width):
    dtype = np.float64 if plan.precision == "double" else np.float32
    out = np.zeros((cases, width), dtype)
    for s in slices:
        out[:, s.offset:s.offset + s.size] = arrays[s.name].reshape(cases, s.size)
    return out


def pick_entries(plan, wanted):
    """The entries to run: ``wanted`` (names from :data:`ENTRIES`, with or without the model's
    ``<name>_`` in front), or every entry the generated set offers when None.

    Raises UsageError for an entry the set does not offer."""
    offered = entries_of(plan)
    if not wanted:
        return offered
    picked = []
    for name in wanted:
        entry = name[len(plan.name) + 1:] if name.startswith(plan.name + "_") else name
        if entry not in ENTRIES:
            raise UsageError(f"--entry {name}: not an entry point; choose from {', '.join(ENTRIES)}")
        if entry not in offered:
            raise UsageError(f"--entry {name}: {plan.name} has no {plan.name}_{entry} (a per-point plan emits it "
                             "on request: add --infer-one)")
        if entry not in picked:
            picked.append(entry)
    return tuple(e for e in ENTRIES if e in picked)


def run_verify(model_path, options, cases=16, seed=0, keep=None, cflags=None, fflags=None, reference=None,
               entries=None, input_ranges=None):
    """Run the whole check and return a :class:`Verification`.

    Args:
        reference: a ``test_data_set`` folder or ``.npz`` file of stored inputs and expected
            outputs; None for onnxruntime on ``cases`` random inputs drawn with ``seed`` (more when
            the batch entry's largest call needs more points).
        entries: names from :data:`ENTRIES` to run; None for every entry the generated set offers.
        input_ranges: ``{input name: (low, high)}`` for the random inputs (see :func:`input_draws`).

    Compilers and flags: the toolchain profile's (default: the gcc profile) host compilers, its
    optimisation flags and host OpenMP flags; $CC / $FC when set and no profile was named.
    """
    profile = options.profile()
    env = options.compilers_from_env
    cc = compiler("CC", profile.cc) if env else shlex.split(profile.cc)
    fc = None
    cflags = cflags or profile.flags_host
    fflags = fflags or profile.flags_host
    graph, plan = gen.build_plan(model_path, options)
    entries = pick_entries(plan, entries)
    draws = input_draws(graph, input_ranges)
    if reference is not None:
        if input_ranges:
            raise UsageError(f"--input-range {next(iter(input_ranges))}: the inputs come from --reference {reference}; "
                             "give one or the other")
        ref = stored_reference(reference, graph, plan)
    else:
        ref = ort_reference(model_path, graph, points_needed(plan, entries, cases), seed,
                            frontend.load_frozen(options.freeze), draws)
        ref.draws = {name: d for name, d in draws.items() if d != Draw()}
    calls = calls_for(plan, entries, ref.cases)
    if plan.low_precision:
        tolerance, why = low_precision_tolerance(plan.low_precision, dense_layers(graph), reduction_length(graph))
    else:
        tolerance, why = judging_tolerance(plan.precision, graph.dtype, depth(graph), reduction_length(graph))
    workdir = outdir.private_folder(keep) if keep else tempfile.mkdtemp(prefix="rosenna-verify-")
    try:
        results = _build_and_run(model_path, options, ref, calls, tolerance, workdir, cc, fc, cflags, fflags, profile)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return Verification(plan, results, ref, calls, f"{tolerance} ({why})")


def verify(model_path, options, **kwargs):
    """:func:`run_verify`, returning ``(plan, results)``: one :class:`Result` per output, entry and language."""
    v = run_verify(model_path, options, **kwargs)
    return v.plan, v.results


def _build_and_run(model_path, options, ref, calls, tolerance, workdir, cc, fc, cflags, fflags, profile):
    plan, _ = gen.generate(model_path, workdir, options)
    pack(plan, ref.inputs, plan.inputs, ref.cases, plan.nx).tofile(outdir.fresh(os.path.join(workdir, "x.bin")))
    weights = [] if plan.embed else [os.path.join(workdir, f"{plan.name}.rwt")]
    results = []
    threads = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    langs = ("c", "fortran") if options.lang == "both" else (options.lang,)
    builds = {}
    for lang in langs:
        exe = outdir.fresh(os.path.join(workdir, f"verify_{lang}"))  # every file in a kept folder is new
        source = outdir.fresh(os.path.join(workdir, "verify_c.c" if lang == "c" else "verify_f.f90"))
        with open(source, "x") as fh:
            fh.write(harness_source(plan, lang, calls))
        if lang == "c":
            cmd = cc + shlex.split(profile.optimize_c) + shlex.split(cflags) + [
                "-I", workdir, source, os.path.join(workdir, f"{plan.name}.c"), "-o", exe, "-lm"]
        else:
            outdir.fresh(os.path.join(workdir, f"{plan.name.lower()}_model.mod"))
            fc = fc or (compiler("FC", profile.fc) if options.compilers_from_env else shlex.split(profile.fc))
            cmd = fc + shlex.split(profile.optimize_fortran) + shlex.split(fflags) + [
                "-J", workdir, os.path.join(workdir, f"{plan.name}_model.F90"), source, "-o", exe]
        builds[lang] = (exe, cmd)
    # The two compilers at once (they write different files): a large model's verify takes the
    # slower compile's time, not the sum. A failure is reported for the first language that failed.
    with ThreadPoolExecutor(max_workers=len(langs)) as pool:
        compiles = [pool.submit(run, cmd, workdir, f"compiling the {lang} verify harness")
                    for lang, (_, cmd) in builds.items()]
        for job in compiles:
            job.result()
    for lang, (exe, _) in builds.items():
        y_path = outdir.fresh(os.path.join(workdir, f"y_{lang}.bin"))
        output = run([exe, str(ref.cases), os.path.join(workdir, "x.bin"), y_path] + weights, workdir,
                     f"running the {lang} verify harness", env=threads)
        statuses = {int(k): int(code) for k, code in re.findall(r"^status\s+(\d+)\s+(-?\d+)\s*$", output, re.M)}
        dtype = np.float64 if plan.precision == "double" else np.float32
        got = np.fromfile(y_path, dtype=dtype)
        results.extend(judge_calls(plan, lang, calls, got, statuses, ref, tolerance))
    return results


def report(results, tolerance_note=""):
    """The verify table, one line per output, entry point and language, then the rule that decided PASS."""
    lines = [f"{'output':<24} {'entry':<12} {'lang':<8} {'max abs err':>12} {'max rel err':>12} {'rtol':>7} "
             f"{'atol':>7}  result"]
    for r in results:
        lines.append(f"{r.output[:24]:<24} {r.entry:<12} {r.lang:<8} {r.abs_err:>12.3e} {r.rel_err:>12.3e} "
                     f"{r.rtol:>7.0e} {r.atol:>7.0e}  {'PASS' if r.passed else 'FAIL'}")
        if not r.passed:
            lines.append(f"    {r.message(want_label='reference')}")
    lines.append(f"rule: {RULE}")
    if tolerance_note:
        lines.append(f"tolerance: {tolerance_note}")
    return "\n".join(lines)
