"""Verify: generate, compile and run the per-point ``<name>_infer`` on the host, and compare every
output element with a reference on the same inputs.

The reference is onnxruntime on random inputs (uniform in [-1, 1)); for a model onnxruntime no
longer runs (an opset-6 era file), onnxruntime on the model converted by onnx's version converter,
which the report says; or stored inputs and outputs (``--reference``: an ONNX ``test_data_set_*``
folder of ``input_*.pb``/``output_*.pb`` TensorProtos, or a ``.npz`` of arrays named after the
model's inputs and outputs), e.g. PyTorch's own outputs. The pass rule is
:data:`rosenna.compare.RULE`, with the tolerance of the ONNX model's dtype (not of the generated
precision). The work folder is removed afterwards unless ``keep`` names one.
"""

import glob
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from rosenna import frontend
from rosenna import generate as gen
from rosenna import outdir
from rosenna.compare import RULE, Comparison, compare
from rosenna.errors import ModelError, UsageError
from rosenna.toolrun import compiler, run

#: The opsets tried, newest first, when onnxruntime cannot run the model as written.
CONVERT_TARGETS = (21, 17, 13)


@dataclass
class Result(Comparison):
    """One output's :class:`~rosenna.compare.Comparison` in one generated language."""

    lang: str = ""


@dataclass
class Reference:
    """Inputs and expected outputs, each stacked over the cases: ``(cases,) + point shape``."""

    inputs: dict  # graph input name -> array
    outputs: list  # in graph output order
    source: str  # where the expected outputs come from, for the report

    @property
    def cases(self):
        return len(self.outputs[0]) if self.outputs else len(next(iter(self.inputs.values())))


@dataclass
class Verification:
    plan: object
    results: list
    reference: Reference

    @property
    def passed(self):
        return all(r.passed for r in self.results)


C_HARNESS = """#include <stdio.h>
#include <stdlib.h>
#include "{name}.h"

/* verify harness: argv[1]=cases argv[2]=x.bin argv[3]=y.bin [argv[4]=weights] */
int main(int argc, char **argv)
{{
    int n = atoi(argv[1]);
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX});
    {t} *y = malloc(sizeof({t}) * (size_t)n * {NY});
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
{init}    for (int i = 0; i < n; ++i)
        {name}_infer(x + (size_t)i * {NX}, y + (size_t)i * {NY});
    f = fopen(argv[3], "wb");
    if (!f || fwrite(y, sizeof({t}), (size_t)n * {NY}, f) != (size_t)n * {NY}) return 3;
    fclose(f);
    free(x);
    free(y);
    (void)argc;
    return 0;
}}
"""

F_HARNESS = """program verify_{name}
  use {name}_model
  implicit none
  integer :: n, i, unit, status
  character(len=4096) :: arg
  real({name}_rk), allocatable :: x(:, :), y(:, :)

  call get_command_argument(1, arg)
  read (arg, *) n
  allocate (x({name}_nx, n), y({name}_ny, n))
  call get_command_argument(2, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='old', action='read')
  read (unit) x
  close (unit)
{init}  do i = 1, n
    call {name}_infer(x(:, i), y(:, i))
  end do
  call get_command_argument(3, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='replace', action='write')
  write (unit) y
  close (unit)
end program verify_{name}
"""


def random_inputs(graph, cases, seed):
    """``cases`` random samples per graph input, uniform in [-1, 1), in the model's dtype."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1.0, 1.0, (cases,) + tuple(graph.shape_of(name))).astype(graph.values[name].dtype)
            for name in graph.inputs}


def _ort_reason(exc):
    """onnxruntime's message without its ``[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED :`` prefix."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)


def _session(model):
    """An onnxruntime CPU session for a path or serialized model."""
    from rosenna.extras import onnxruntime  # the verify extra: a clear message when it is missing

    ort = onnxruntime()

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
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


def ort_reference(model_path, graph, cases, seed, frozen=None):
    """onnxruntime's outputs on random inputs, one session run per case (each case is one point);
    the inputs in ``frozen`` ({name: array}, ``--freeze``) are fed their array in every case."""
    from rosenna.extras import onnxruntime  # the verify extra: one line when it is missing

    ort = onnxruntime()

    inputs = random_inputs(graph, cases, seed)
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


def stored_reference(path, graph, plan):
    """Inputs and expected outputs read from ``path`` (see the module docstring)."""
    inputs = {name: [] for name in graph.inputs}
    outputs = [[] for _ in graph.outputs]
    for label, ins, outs in _stored_sets(path, graph):
        counts = set()
        for name, array in zip(graph.inputs, ins):
            if np.asarray(array).dtype.kind != "f":
                raise ModelError(f"{label}: input {name!r} holds {np.asarray(array).dtype} values; the model takes "
                                 f"{graph.values[name].dtype}")
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


def compare_outputs(plan, lang, got, want, model_dtype):
    """One :class:`Result` per output: the generated ``got`` (cases x ny) against ``want`` (a list
    in output order; one tensor may be listed twice)."""
    results = []
    for s, expected in zip(plan.outputs, want):
        cmp = compare(got[:, s.offset:s.offset + s.size], expected, model_dtype, output=s.name)
        results.append(Result(lang=lang, **vars(cmp)))
    return results


def run_verify(model_path, options, cases=16, seed=0, keep=None, cflags=None, fflags=None, reference=None):
    """Run the whole check and return a :class:`Verification`.

    Args:
        reference: a ``test_data_set`` folder or ``.npz`` file of stored inputs and expected
            outputs; None for onnxruntime on ``cases`` random inputs drawn with ``seed``.

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
    if reference is not None:
        ref = stored_reference(reference, graph, plan)
    else:
        ref = ort_reference(model_path, graph, cases, seed, frontend.load_frozen(options.freeze))
    cases = ref.cases
    workdir = outdir.private_folder(keep) if keep else tempfile.mkdtemp(prefix="rosenna-verify-")
    try:
        results = _build_and_run(model_path, options, graph, ref, cases, workdir, cc, fc, cflags, fflags, profile)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return Verification(plan, results, ref)


def verify(model_path, options, **kwargs):
    """:func:`run_verify`, returning ``(plan, results)``: one :class:`Result` per output and language."""
    v = run_verify(model_path, options, **kwargs)
    return v.plan, v.results


def _build_and_run(model_path, options, graph, ref, cases, workdir, cc, fc, cflags, fflags, profile):
    plan, _ = gen.generate(model_path, workdir, options)
    pack(plan, ref.inputs, plan.inputs, cases, plan.nx).tofile(outdir.fresh(os.path.join(workdir, "x.bin")))
    weights = [] if plan.embed else [os.path.join(workdir, f"{plan.name}.rwt")]
    fmt = {"name": plan.name, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
    results = []
    model_dtype = "float64" if graph.dtype == np.float64 else "float32"
    langs = ("c", "fortran") if options.lang == "both" else (options.lang,)
    for lang in langs:
        exe = outdir.fresh(os.path.join(workdir, f"verify_{lang}"))  # every file in a kept folder is new
        if lang == "c":
            init = "" if plan.embed else (
                f"    if ({plan.name}_init(argv[4]) != 0) {{ fprintf(stderr, \"init failed\\n\"); return 4; }}\n")
            with open(outdir.fresh(os.path.join(workdir, "verify_c.c")), "x") as fh:
                fh.write(C_HARNESS.format(init=init, **fmt))
            cmd = cc + shlex.split(profile.optimize_c) + shlex.split(cflags) + [
                "-I", workdir, os.path.join(workdir, "verify_c.c"), os.path.join(workdir, f"{plan.name}.c"),
                "-o", exe, "-lm"]
        else:
            init = "" if plan.embed else (
                "  call get_command_argument(4, arg)\n"
                f"  call {plan.name}_init(trim(arg), status)\n  if (status /= 0) error stop 4\n")
            with open(outdir.fresh(os.path.join(workdir, "verify_f.f90")), "x") as fh:
                fh.write(F_HARNESS.format(init=init, **fmt))
            outdir.fresh(os.path.join(workdir, f"{plan.name.lower()}_model.mod"))
            fc = fc or (compiler("FC", profile.fc) if options.compilers_from_env else shlex.split(profile.fc))
            cmd = fc + shlex.split(profile.optimize_fortran) + shlex.split(fflags) + [
                "-J", workdir, os.path.join(workdir, f"{plan.name}_model.F90"),
                os.path.join(workdir, "verify_f.f90"), "-o", exe]
        run(cmd, workdir, f"compiling the {lang} verify harness")
        y_path = outdir.fresh(os.path.join(workdir, f"y_{lang}.bin"))
        run([exe, str(cases), os.path.join(workdir, "x.bin"), y_path] + weights, workdir,
            f"running the {lang} verify harness")
        dtype = np.float64 if plan.precision == "double" else np.float32
        got = np.fromfile(y_path, dtype=dtype).reshape(cases, plan.ny)
        results.extend(compare_outputs(plan, lang, got, ref.outputs, model_dtype))
    return results


def report(results):
    """The verify table, one line per output and language, then the rule that decided PASS."""
    lines = [f"{'output':<24} {'lang':<8} {'max abs err':>12} {'max rel err':>12} {'rtol':>7} {'atol':>7}  result"]
    for r in results:
        lines.append(f"{r.output[:24]:<24} {r.lang:<8} {r.abs_err:>12.3e} {r.rel_err:>12.3e} {r.rtol:>7.0e} "
                     f"{r.atol:>7.0e}  {'PASS' if r.passed else 'FAIL'}")
        if not r.passed:
            lines.append(f"    {r.message(want_label='reference')}")
    lines.append(f"rule: {RULE}")
    return "\n".join(lines)
