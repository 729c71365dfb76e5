"""Every activation rosenna lists, in every fast batched MLP kernel (issue #17 item 1), without a
GPU: the kernels' one activation table; which kernel a model with each activation gets (never the
generic one-point-per-thread kernel); numpy emulations of the 3xTF32 chain, the staged FP32 and the
wide 3xTF32 kernels' data flow on models that put a different activation on every layer, against
the model in float64; nvcc (ptxas: no spills) and hipcc compiles of those kernels; and the GELU
pattern pass that brings exporters' erf form to the kernels."""

import os
import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest

import devflags
from mlp_reference import ALL_ACTIVATIONS, act_of, activation, activation_mlp, evaluate
from onnx import TensorProto, helper, numpy_helper
from test_tensor_core import _emulate as emulate_chain
from test_tensor_core import _emulate_wide as emulate_wide
from test_wide_kernel import _emulate as emulate_staged
from test_wide_kernel import _ptxas_entry

from rosenna import ops
from rosenna.emit import cuda, fixed
from rosenna.emit.cuda import mlp, tc_chain, tc_wide
from rosenna.generate import Options, build_plan, generate
from rosenna import strategy
from rosenna.strategy import analyse
from rosenna.strategy.mlp import ACTIVATIONS as ACTIVATION_TABLE

#: The exporters' patterns that need the gated-activation pass (rosenna.passes.fuse), and the op it makes.
PATTERN_OPS = {"SiLU": "Swish", "Mish": "Mish", "HardSwish": "HardSwish", "HardSwishPattern": "HardSwish"}


def _available(kind):
    return ops.get(PATTERN_OPS.get(kind, kind)) is not None or kind == "GeluErf"


ACTIVATIONS = [a for a in ALL_ACTIVATIONS if _available(a[0])]
MISSING = [a[0] for a in ALL_ACTIVATIONS if not _available(a[0])]


def _ids(acts):
    return [f"{k}{'-' + '-'.join(f'{a}={v}' for a, v in sorted(attrs.items())) if attrs else ''}" for k, attrs in acts]


def test_the_table_is_every_listed_activation_and_each_is_finite_at_zero():
    """One table serves every kernel; its entries are registered activation ops (or will be, with
    the gated-activation pass), and each is finite at 0 (the kernels' padded columns hold act(0))."""
    listed = {"Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "Softplus", "Softsign", "Gelu",
              "Clip", "Swish", "Mish", "HardSwish"}
    assert set(ACTIVATION_TABLE) == listed
    for name in listed:
        value = activation(name if name != "Swish" else "SiLU")(np.zeros(1))
        assert np.isfinite(value).all(), name


@pytest.mark.parametrize("act", ACTIVATIONS, ids=_ids(ACTIVATIONS))
def test_a_5_64_64_3_mlp_takes_the_fp32_mlp_kernel_and_the_chain_with_every_activation(tmp_path, act):
    """Before, a SiLU or GELU MLP fell back to the generic kernel (one point per thread calling
    the per-point routine: 166-201 registers and a 256-512 byte stack frame on sm_90); then to the
    FP32 narrow kernel only (the chain stopped at 48 columns: 0.84 ns/point on the H200)."""
    path = activation_mlp(tmp_path / "m.onnx", [5, 64, 64, 3], [act, act, None])
    _, plan = build_plan(path, Options(lang="c"))
    layers = analyse(plan).layers
    assert layers, plan.ops
    assert [layer.act for layer in layers][:2] == [PATTERN_OPS.get(act[0], "Gelu" if act[0] == "GeluErf" else act[0])] * 2
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert choice.kind == "mlp-narrow" and choice.tensor_chain


def _chain(tmp_path, name, width, acts, last=None):
    """An MLP whose layer i has activation acts[i], widths alternating around ``width``."""
    sizes = [5] + [width - 3 * (i % 3) for i in range(len(acts))] + [3]
    path = activation_mlp(tmp_path / f"{name}.onnx", sizes, list(acts) + [last], seed=11, name=name)
    return build_plan(path, Options(lang="c"))[1]


def _check(got, want, layers):
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=5e-7, err_msg=str([layer.act for layer in layers]))


def test_emulated_tensor_core_chain_with_every_activation(tmp_path):
    """The 3xTF32 chain (layers up to 48 wide): one model, a different activation on every layer."""
    plan = _chain(tmp_path, "chain", 16, ACTIVATIONS)
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert choice.tensor_chain, [layer.n for layer in choice.layers]
    layers = choice.layers
    x = np.random.default_rng(3).uniform(-2, 2, size=(29, plan.nx))
    got = emulate_chain(layers, [act_of(layer) for layer in layers], tc_chain.chain_packed(layers), x)
    _check(got, evaluate(layers, x), layers)
    # The emulation sees the activations: one layer's swapped for the identity breaks it.
    wrong = [act_of(layer) for layer in layers]
    wrong[1] = lambda v: v
    assert not np.allclose(emulate_chain(layers, wrong, tc_chain.chain_packed(layers), x), evaluate(layers, x),
                           atol=1e-3)


@pytest.fixture(scope="module")
def wide_plan(tmp_path_factory):
    """A staged-kernel MLP (hidden up to 128 wide, output <= 8) with every activation, one per layer."""
    return _chain(tmp_path_factory.mktemp("wide"), "wide", 100, ACTIVATIONS, last=("Tanh", {}))


def test_emulated_staged_kernel_with_every_activation(wide_plan):
    choice = cuda.choose(wide_plan, cuda.CONSTANT_LIMIT)
    assert choice.staged
    layers = choice.layers
    x = np.random.default_rng(5).uniform(-2, 2, size=(37, wide_plan.nx))
    got = emulate_staged(layers, [act_of(layer) for layer in layers], choice.packed(), x)
    _check(got, evaluate(layers, x), layers)


def test_emulated_wide_tensor_core_kernel_with_every_activation(wide_plan):
    layers = analyse(wide_plan).layers
    assert strategy.decide(wide_plan).batched.chosen == "mlp-staged"
    x = np.random.default_rng(6).uniform(-2, 2, size=(37, wide_plan.nx))
    got = emulate_wide(layers, [act_of(layer) for layer in layers], tc_wide.wide_packed(layers), x)
    _check(got, evaluate(layers, x), layers)


#: For the compile of the wide kernels (one epilogue per layer: compile time grows with depth), the
#: activations with the most arithmetic; the narrow compile has every activation.
HEAVY = [("Gelu", {"approximate": "tanh"}), ("Softplus", {}), ("Selu", {}), ("Gelu", {})]


def _generate(tmp_path, width, name):
    acts = ACTIVATIONS if width <= strategy.mlp.CHAIN_MAX_WIDTH else HEAVY
    path = activation_mlp(tmp_path / f"{name}.onnx", [5] + [width - 3 * (i % 3) for i in range(len(acts))] + [3],
                          [*acts, None], seed=11, name=name)
    generate(path, str(tmp_path), Options(lang="c", name=name))
    return f"{name}_kernel.cu"


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("width,kernels", [(16, ("acts_batch_kernel", "acts_tc_kernel")),
                                           (100, ("acts_batch_kernel", "acts_tc_kernel"))],
                         ids=["narrow+chain", "staged+wide"])
def test_every_activation_compiles_without_spills(tmp_path, width, kernels):
    src = _generate(tmp_path, width, "acts")
    proc = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-Xptxas", "-v", "-c", src, "-o", "k.o"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for kernel in kernels:
        spills, registers = _ptxas_entry(proc.stdout + proc.stderr, kernel)
        assert "0 bytes spill stores, 0 bytes spill loads" in spills, (kernel, spills)
        assert registers <= 255


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_every_activation_compiles_with_hipcc(tmp_path):
    src = _generate(tmp_path, 16, "acts")
    proc = subprocess.run(["hipcc", devflags.HIPCC, "--offload-arch=gfx90a", "-c", src, "-o", "k.o"], cwd=tmp_path,
                          capture_output=True, text=True, env=dict(os.environ, HIP_PLATFORM="amd"))
    assert proc.returncode == 0, proc.stderr[-3000:]


# -- activations with a device form (rosenna/data/rosenna_act.cuh) -------------------------------

def _device_forms(tmp_path, x, ctype):
    """Each function of rosenna_act.cuh compiled for the host (g++: ``__fdividef`` as a division)
    and applied to ``x`` in ``ctype``: {op name: values}."""
    dtype = np.float32 if ctype == "float" else np.float64
    calls = "\n".join(f"    for (long i = 0; i < n; ++i) {{ {ctype} v = {fn}(x[i]); fwrite(&v, sizeof v, 1, stdout); }}"
                       for fn in mlp.DEVICE_FORMS.values())
    src = tmp_path / "forms.cpp"
    src.write_text("#include <math.h>\n#include <stdio.h>\n#define __device__\n#define __forceinline__ inline\n"
                   "static inline float __fdividef(float a, float b) { return a / b; }\n"
                   f'#include "{fixed.path("rosenna_act.cuh")}"\n'
                   f"int main(void)\n{{\n    static {ctype} x[{x.size}];\n    const long n = {x.size};\n"
                   f"    if (fread(x, sizeof x[0], n, stdin) != (size_t)n)\n        return 1;\n{calls}\n    return 0;\n}}\n")
    exe = tmp_path / "forms"
    subprocess.run(["g++", "-O2", "-Wall", "-Werror", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], input=x.astype(dtype).tobytes(), capture_output=True, check=True).stdout
    values = np.frombuffer(out, dtype).reshape(len(mlp.DEVICE_FORMS), x.size)
    return dict(zip(mlp.DEVICE_FORMS, values))


@pytest.mark.parametrize("ctype,rtol,atol,top", [("float", 4e-7, 1e-37, 200.0), ("double", 1e-15, 1e-300, 1000.0)])
def test_device_forms_agree_with_the_op_everywhere(tmp_path, ctype, rtol, atol, top):
    """The kernels' Mish (one exp: x n / (n + 2), n = e^x (e^x + 2)) against the op's formula in
    float64 from -top to top, over the threshold (x > 20: n overflows in float from 44.4, in
    double from 355), far below zero (e^x underflows) and at NaN and the infinities: a few ulp
    everywhere, NaN where the op gives NaN (NaN, -inf)."""
    dtype = np.float32 if ctype == "float" else np.float64
    mag = np.geomspace(1e-6, top, 4001)
    x = np.concatenate([-mag, [0.0], mag, np.linspace(19.5, 20.5, 101), [np.nan, np.inf, -np.inf]]).astype(dtype)
    got = _device_forms(tmp_path, x, ctype)
    assert set(got) == {"Mish"}
    for name, values in got.items():
        with np.errstate(all="ignore"):
            want = ops.get(name).numpy({}, x.astype(np.float64))
        np.testing.assert_allclose(values.astype(np.float64), want, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)


def test_a_device_form_is_called_and_defined_once(tmp_path):
    """A Mish MLP's kernel file defines rosenna_mish once and every activation function of a
    Mish layer calls it; no exp, log or tanh of the op's formula is left in them."""
    path = activation_mlp(tmp_path / "mish.onnx", [5, 64, 64, 3], [("Mish", {}), ("Mish", {}), None])
    generate(path, str(tmp_path), Options(lang="c", name="mish"))
    text = (tmp_path / "mish_kernel.cu").read_text()
    assert text.count("__device__ __forceinline__ float rosenna_mish(float x)") == 1
    bodies = re.findall(r"float (?:rt_)?act[01]\(float v\)\n\{\n    return (.*);", text)
    assert len(bodies) >= 4 and set(bodies) == {"rosenna_mish(v)"}, bodies
    assert text.index("rosenna_mish(float x)") < text.index("rosenna_mish(v)")


# -- the GELU pattern ------------------------------------------------------------------------------

def _gelu_graph(tmp_path, form, half=0.5):
    """Gemm then GELU written out as exporters do; ``form`` picks the spelling."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(1.4142135381698608, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(0.7071067690849304, np.float32), "rsqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(half, np.float32), "half")]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1)]
    if form == "torch":  # (x * (erf(x / sqrt2) + 1)) * 0.5
        nodes += [helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["h", "a"], ["m"]),
                  helper.make_node("Mul", ["m", "half"], ["y"])]
    else:  # (0.5 * x) * (1 + erf(x * 1/sqrt2))
        nodes += [helper.make_node("Mul", ["rsqrt2", "h"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                  helper.make_node("Add", ["one", "e"], ["a"]), helper.make_node("Mul", ["half", "h"], ["m"]),
                  helper.make_node("Mul", ["a", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = str(tmp_path / f"{form}.onnx")
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("form", ["torch", "commuted"])
def test_gelu_erf_pattern_becomes_one_fused_gelu(tmp_path, form):
    _, plan = build_plan(_gelu_graph(tmp_path, form), Options(lang="c"))
    assert [op.label for op in plan.ops] == ["Gemm+Gelu"]
    assert plan.ops[0].activation_attrs == {"approximate": "none"}


def test_gelu_pattern_with_another_constant_is_left_alone(tmp_path):
    _, plan = build_plan(_gelu_graph(tmp_path, "torch", half=0.25), Options(lang="c"))
    assert "Gemm+Gelu" not in [op.label for op in plan.ops]
    assert "Erf" in [op.label for op in plan.ops]


def test_torch_gelu_export_fuses(tmp_path):
    """torch's legacy exporter at opset 17 writes nn.GELU() as the erf pattern."""
    import warnings

    import torch

    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    path = str(tmp_path / "t.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(1, 5),), path, dynamo=False, opset_version=17)
    _, plan = build_plan(path, Options(lang="c"))
    assert [op.label for op in plan.ops] == ["Gemm+Gelu", "Gemm"]
