"""DFT (issue 30, item 2) against onnxruntime, in C and Fortran, compiled in one batch: opsets 17
and 20, real and complex input, forward and inverse, one-sided both ways, every signal axis,
dft_length padding and truncating, sizes that take each radix (4, 2, 3, 5, 7) and the direct
fallback (11, 13); then a Fourier neural operator layer as the dynamo exporter writes it
(rfft2, truncated modes times complex weights, irfft2, plus a pointwise linear path)."""

import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import conformance
from rosenna.compare import Tolerance, compare
from rosenna.ops.dft import factorize

from test_families_graph import write_case

RNG = np.random.default_rng(2)


def dft_model(shape, opset, axis=None, inverse=0, onesided=0, length=None):
    """One DFT node over an input of ``shape`` (last axis 1 real, 2 complex)."""
    inputs, consts = ["x", ""], {}
    if length is not None:
        consts["n"] = np.array(length, np.int64)
        inputs[1] = "n"
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        if axis is not None:
            consts["axis"] = np.array(axis, np.int64)
            inputs.append("axis")
    elif axis is not None:
        attrs["axis"] = axis
    while inputs[-1] == "":  # the optional inputs left out, as exporters write them
        inputs.pop()
    node = helper.make_node("DFT", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "dft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    return model, [RNG.normal(size=shape).astype(np.float32)]


def spectral_model(channels=3, height=16, width=16, modes=3, rows=4):
    """An FNO's spectral path written with onnx.helper (opset 20): rfft along W, a full DFT along H,
    the two corner blocks of low modes cut by Slices (rows 0..rows-1 and the last ``rows``, columns
    0..modes-1), the blocks scaled and put back between zero rows by a Concat, a zero Pad of the
    columns, the inverse DFT along H and the inverse one-sided DFT along W at the field's width, a
    Slice that keeps all of it. rosenna.passes.dft_truncate turns every cutting Slice and the Pad
    into DFTs that compute less; the last Slice is an alias."""
    def const(name, value, dtype=np.int64):
        return numpy_helper.from_array(np.asarray(value, dtype), name)

    node = helper.make_node
    half = width // 2 + 1
    nodes = [
        node("DFT", ["x", "", "w_axis"], ["fw"], onesided=1),
        node("DFT", ["fw", "", "h_axis"], ["fhw"]),
        node("Slice", ["fhw", "zero", "rows", "h_axes"], ["top"]),
        node("Slice", ["top", "zero", "modes", "w_axes"], ["top_modes"]),
        node("Slice", ["fhw", "minus_rows", "end", "h_axes"], ["bottom"]),
        node("Slice", ["bottom", "zero", "modes", "w_axes"], ["bottom_modes"]),
        node("Mul", ["bottom_modes", "gain"], ["bottom_scaled"]),
        node("Concat", ["top_modes", "middle", "bottom_scaled"], ["blocks"], axis=2),
        node("Pad", ["blocks", "pads"], ["padded"], mode="constant"),
        node("DFT", ["padded", "", "h_axis"], ["gh"], inverse=1),
        node("DFT", ["gh", "width", "w_axis"], ["real"], inverse=1, onesided=1),
        node("Slice", ["real", "zero", "one", "last"], ["y"]),  # [0:1] of the axis of 1, as torch writes it
    ]
    pads = [0] * 10
    pads[5 + 3] = half - modes
    inits = [const("w_axis", 3), const("h_axis", 2), const("w_axes", [3]), const("h_axes", [2]), const("zero", [0]), const("rows", [rows]),
             const("modes", [modes]), const("one", [1]), const("last", [4]), const("minus_rows", [-rows]), const("end", [height]), const("pads", pads),
             const("width", width), const("gain", RNG.normal(size=(1, channels, rows, modes, 2)), np.float32),
             const("middle", np.zeros((1, channels, height - 2 * rows, modes, 2)), np.float32)]
    graph = helper.make_graph(nodes, "spectral", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                [1, channels, height, width, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, height, width, 1]),
                               helper.make_tensor_value_info("top_modes", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    model.graph.output[1].CopyFrom(inferred.graph.output[1])
    return model, [RNG.normal(size=(1, channels, height, width, 1)).astype(np.float32)]


CASES = {
    "opset17_real_forward_axis1": lambda: dft_model((2, 12, 1), 17),
    "opset17_complex_inverse_axis2": lambda: dft_model((2, 3, 10, 2), 17, axis=2, inverse=1),
    "opset17_rfft": lambda: dft_model((1, 16, 1), 17, onesided=1),
    "opset17_padded": lambda: dft_model((1, 7, 2), 17, length=9),
    "opset20_default_axis_complex": lambda: dft_model((3, 8, 2), 20),
    "opset20_axis0_truncated": lambda: dft_model((13, 2, 2), 20, axis=0, length=11),
    "opset20_negative_axis_rfft": lambda: dft_model((2, 15, 3, 1), 20, axis=-3, onesided=1),
    "opset20_irfft_even": lambda: dft_model((2, 6, 2), 20, axis=1, inverse=1, onesided=1),
    "opset20_irfft_odd_length": lambda: dft_model((1, 5, 2), 20, axis=1, inverse=1, onesided=1, length=9),
    "opset20_inverse_real_input": lambda: dft_model((1, 14, 1), 20, axis=1, inverse=1),
    "spectral_path_truncated": spectral_model,
}

#: Sizes whose onnxruntime result is off by up to 7e-5 (its kernel for sizes other than powers of
#: two, Bluestein's, rounds in float32 through a longer transform): compared with numpy's FFT in
#: float64 instead, which rosenna's stages meet within 3e-7.
EXACT = {
    "opset20_size_49_radix_7": (lambda: dft_model((1, 49, 2), 20), lambda x: np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=1)),
    "opset20_size_26_fallback": (lambda: dft_model((1, 26, 1), 20, onesided=1), lambda x: np.fft.rfft(x[..., 0], axis=1)),
    "opset20_size_35_inverse": (lambda: dft_model((2, 35, 2), 20, inverse=1),
                                lambda x: np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=1)),
}


def exact(build, reference):
    model, feeds = build()
    spectrum = reference(feeds[0].astype(np.float64))
    return model, feeds, [np.stack([spectrum.real, spectrum.imag], -1).astype(np.float32)]


def fno_layer(height=12, width=10, channels=4, modes=3):
    """A Fourier layer as PyTorch writes one (rfft2, the low modes times complex weights, irfft2,
    plus a 1x1 convolution), exported by the dynamo exporter."""
    torch = pytest.importorskip("torch")

    class Spectral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wr = torch.nn.Parameter(torch.randn(channels, channels, modes, modes) * 0.1)
            self.wi = torch.nn.Parameter(torch.randn(channels, channels, modes, modes) * 0.1)
            self.lin = torch.nn.Conv2d(channels, channels, 1)

        def forward(self, x):
            xf = torch.view_as_real(torch.fft.rfft2(x, norm="ortho"))
            xr, xi = xf[:, :, :modes, :modes, 0], xf[:, :, :modes, :modes, 1]
            yr = torch.einsum("bixy,ioxy->boxy", xr, self.wr) - torch.einsum("bixy,ioxy->boxy", xi, self.wi)
            yi = torch.einsum("bixy,ioxy->boxy", xr, self.wi) + torch.einsum("bixy,ioxy->boxy", xi, self.wr)
            y = torch.nn.functional.pad(torch.stack([yr, yi], -1), (0, 0, 0, width // 2 + 1 - modes, 0, height - modes))
            spectral = torch.fft.irfft2(torch.view_as_complex(y), s=(height, width), norm="ortho")
            return torch.nn.functional.gelu(spectral + self.lin(x))

    torch.manual_seed(0)
    x = torch.randn(1, channels, height, width)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(Spectral().eval(), (x,), dynamo=True)
    return program.model_proto, [x.numpy()]


@pytest.fixture(scope="module")
def fno():
    return fno_layer()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, fno):
    root = tmp_path_factory.mktemp("dft")
    cases = [write_case(str(root / "cases"), name, *build()) for name, build in CASES.items()]
    cases += [write_case(str(root / "cases"), name, *exact(*spec)) for name, spec in EXACT.items()]
    cases.append(write_case(str(root / "cases"), "fno_layer", *fno))
    return {o.case.name: o for o in conformance.run(cases, str(root / "work"), rtol=1e-4, atol=1e-5)}


@pytest.mark.parametrize("name", list(CASES) + list(EXACT) + ["fno_layer"])
def test_against_onnxruntime(outcomes, name):
    o = outcomes[name]
    assert (o.status, o.variant) == ("passed", "as given"), f"{name}: {o.status}: {o.detail}"


def test_the_fno_layer_exports_four_dfts(fno):
    proto, _ = fno
    assert sum(n.op_type == "DFT" for n in proto.graph.node) == 4


@pytest.mark.parametrize("n, radices", [(64, [4, 4, 4]), (12, [4, 3]), (10, [2, 5]), (98, [2, 7, 7]), (26, [2, 13]),
                                        (1, [])])
def test_sizes_factor_into_generated_stages(n, radices):
    assert factorize(n) == radices


@pytest.mark.parametrize("lang", ["c", "fortran"])
def test_the_fno_layer_runs_whole_field(tmp_path, fno, lang):
    """The DFT's loops are affine, so the FNO layer keeps the whole-field form: the host branch of
    <name>_infer_one (one OpenMP team, 2 threads), C and Fortran, against onnxruntime."""
    import subprocess

    import onnxruntime as ort

    from rosenna import generate as gen
    from rosenna.compare import Tolerance, compare
    from test_host_whole import C_MAIN, F_MAIN

    proto, feeds = fno
    path = str(tmp_path / "fno.onnx")
    onnx.save(proto, path)
    plan, _ = gen.generate(path, str(tmp_path), gen.Options(lang=lang, embed=True, infer_one=True))
    assert plan.has_infer_one
    feeds[0].tofile(tmp_path / "x.bin")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: feeds[0]})[0].reshape(-1)
    n = plan.name
    fmt = {"n": n, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
    if lang == "c":
        (tmp_path / "main.c").write_text(C_MAIN.format(**fmt))
        cmd = ["gcc", "-O1", "-fopenmp", "-I", str(tmp_path), "main.c", f"{n}.c", "-o", "main_c", "-lm"]
    else:
        (tmp_path / "main.f90").write_text(F_MAIN.format(**fmt))
        cmd = ["gfortran", "-O1", "-fopenmp", "-J", str(tmp_path), f"{n}_model.F90", "main.f90", "-o", "main_fortran"]
    subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([str(tmp_path / f"main_{lang}")], cwd=tmp_path, check=True, timeout=60,
                   env=dict(os.environ, OMP_NUM_THREADS="2"))
    for i, y in enumerate(np.fromfile(tmp_path / "y.bin", np.float32).reshape(-1, plan.ny)):
        result = compare(y, want, output=f"{lang} call {i}")
        assert result.passed, result.message()


def test_the_spectral_path_keeps_no_slice_or_pad():
    """The low modes cut where they are computed: after the passes the spectral path is DFTs and the
    pointwise ops between them, each a direct sum over its few outputs or few non-zero inputs."""
    from rosenna import frontend, passes

    model, _ = spectral_model()
    graph = frontend.import_model(_saved(model))
    graph.dft_direct_percent = 200
    passes.run(graph)
    kinds = [n.op for n in graph.nodes]
    assert "Slice" not in kinds and "Pad" not in kinds, kinds
    dfts = [n for n in graph.nodes if n.op == "DFT"]
    assert [graph.shape_of(n.outputs[0]) for n in dfts] == [(1, 3, 16, 3, 2), (1, 3, 4, 3, 2), (1, 3, 4, 3, 2),
                                                            (1, 3, 16, 3, 2), (1, 3, 16, 16, 1)]
    assert all("_matrix" in n.attrs for n in dfts)
    assert [n.attrs.get("_bins") for n in dfts] == [(0, 3), (0, 4), (12, 4), None, None]
    assert dfts[3].attrs["_support"] == ((0, 4), (12, 4))  # the zero rows between the blocks skipped


def _saved(model):
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    onnx.save(model, path)
    return path


#: Both forms of every DFT of these models, against numpy in float64: each model generated with the
#: direct form never taken and always taken (the tuning's dft_direct_percent 0 and 10**6).
FORMS = {"rfft16": lambda: dft_model((2, 16, 1), 20, axis=1, onesided=1),
         "complex_inverse_axis0": lambda: dft_model((10, 3, 2), 20, axis=0, inverse=1),
         "irfft_odd_padded": lambda: dft_model((2, 4, 2), 20, axis=1, inverse=1, onesided=1, length=9),
         "truncating_length": lambda: dft_model((3, 13, 2), 17, axis=1, length=11),
         "spectral_path": spectral_model}


def test_the_direct_and_fft_forms_agree(tmp_path):
    """Each model's per-point routine in C, once with every DFT by its FFT stages and once with
    every DFT as a direct sum: both within the DFT tests' tolerance of onnxruntime, and within 2e-6
    of the largest value of each other (-O0: the arithmetic as written)."""
    import subprocess

    import onnxruntime as ort

    from rosenna import generate as gen
    from rosenna.strategy import Tuning

    builds = []
    for name, build in FORMS.items():
        model, feeds = build()
        path = str(tmp_path / f"{name}.onnx")
        onnx.save(model, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(None, {sess.get_inputs()[0].name: feeds[0]})
        for percent in (0, 10 ** 6):
            tag = f"{name}_{'direct' if percent else 'fft'}"
            out = tmp_path / tag
            plan, _ = gen.generate(path, str(out), gen.Options(lang="c", embed=True, name="spec",
                                                               tuning=Tuning().replace(dft_direct_percent=percent)))
            feeds[0].tofile(out / "x.bin")
            (out / "main.c").write_text(FORM_MAIN.format(nx=plan.nx, ny=plan.ny))
            builds.append((tag, out, np.concatenate([w.reshape(-1) for w in want]),
                           subprocess.Popen(["gcc", "-O0", "main.c", "spec.c", "-o", "main", "-lm"], cwd=out,
                                            stderr=subprocess.PIPE)))
    results = {}
    for tag, out, want, job in builds:
        assert job.wait() == 0, job.stderr.read().decode()[-2000:]
        subprocess.run(["./main"], cwd=out, check=True, timeout=60)
        got = results[tag] = np.fromfile(out / "y.bin", np.float32)
        result = compare(got, want, output=tag, tolerance=Tolerance(1e-4, 1e-5))
        assert result.passed, result.message()
    for name in FORMS:  # onnxruntime's sizes other than powers of two round to 7e-5: the forms agree closer
        fft, direct = results[f"{name}_fft"], results[f"{name}_direct"]
        err = np.abs(fft - direct).max() / max(1.0, np.abs(fft).max())
        assert err < 2e-6, f"{name}: the FFT and direct forms differ by {err:.1e} of the largest value"


FORM_MAIN = """#include <stdio.h>
#include "spec.h"
int main(void)
{{
    static float x[{nx}], y[{ny}];
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof(float), {nx}, f) != {nx}) return 3;
    fclose(f);
    spec_infer(x, y);
    f = fopen("y.bin", "wb");
    fwrite(y, sizeof(float), {ny}, f);
    fclose(f);
    return 0;
}}
"""


def small_fno():
    """bench/families_h200.py's FNO (both corner blocks of modes, a Concat with zero rows between
    them, 1x1 convolutions, GELU) at a small size: 8 channels, 2 layers, 5 modes, 24 x 24; the
    dynamo exporter's file."""
    torch = pytest.importorskip("torch")
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    from families_h200 import torch_fno

    torch.manual_seed(0)
    model = torch_fno(channels=8, modes=5, layers=2, size=24, inputs=3).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(model, (torch.rand(1, 3, 24, 24),), dynamo=True).model_proto


@pytest.mark.parametrize("which", ["spectral_path", "small_fno"])
def test_the_cuda_whole_field_kernels_emulated(tmp_path, which):
    """The CUDA/HIP whole-field kernel's phases (what each thread of each launch runs), emulated on
    the host for 3 samples in one batch, threads in order and in reverse, against onnxruntime: every
    DFT a parallel region (none serial, where one thread per sample would do all the work)."""
    import onnxruntime as ort

    from rosenna import parallel
    from test_infer_one import emulate_launches

    model = spectral_model()[0] if which == "spectral_path" else small_fno()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    plan, x, forwards, backwards = emulate_launches(str(path), tmp_path / "gen")
    assert all(m.kind == "parallel" for launch in parallel.launch_groups(plan) for m in launch.members)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    shape = sess.get_inputs()[0].shape
    for order, got in (("in order", forwards), ("in reverse", backwards)):
        for s in range(x.shape[0]):
            want = np.concatenate([w.reshape(-1) for w in sess.run(None, {name: x[s].reshape(shape)})])
            result = compare(got[s], want, output=f"{which}, sample {s}, threads {order}",
                             tolerance=Tolerance(1e-4, 1e-5))
            assert result.passed, result.message()


def test_info_names_each_dfts_form(tmp_path, capsys):
    """`rosenna info` shows how each DFT node is computed, and --tune dft_direct_percent moves it."""
    from rosenna.cli import main

    path = _saved(spectral_model()[0])
    for percent, forms in ((None, ["direct"] * 5), ("0", ["FFT 4x4"] * 5)):
        assert main(["info", path] + (["--tune", f"dft_direct_percent={percent}"] if percent else [])) == 0
        out = capsys.readouterr().out
        assert [line.split("(")[1].split(")")[0] for line in out.splitlines() if line.startswith("  DFT")] == forms
