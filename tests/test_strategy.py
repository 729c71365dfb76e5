"""The strategy stage (rosenna/strategy/): the MLP analysis read from the plan's loops, the tables'
choices and their reasons, the frozen plan, one-layer chains of every width, and the tuning."""

import dataclasses
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import op_models
from rosenna import emit, strategy, zoo
from rosenna.emit import cuda
from rosenna.generate import Options, build_plan, generate
from rosenna.strategy import MEASURED, Tuning, TuningError


def _plan(path, **opts):
    return build_plan(str(path), Options(lang="c", **opts))[1]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strategy")
    out = {}
    for name in zoo.MODELS:
        out[name] = zoo.save(name, str(tmp / f"{name}.onnx"))
    out["mlp128_f64"] = zoo.save("mlp128", str(tmp / "mlp128_f64.onnx"), np.float64)
    out["convnet"] = op_models.convnet(tmp / "convnet.onnx")
    out["lstm"] = op_models.lstm_cell(tmp / "lstm.onnx")
    return tmp, out


@pytest.mark.parametrize("name,batched,tensor,routine", [
    ("gemm_small", "mlp-narrow", "", "routine-mlp"),
    ("gemm_big", "mlp-narrow", "tc-chain", "routine-mlp"),
    ("mlp128", "mlp-staged", "tc-wide", "routine-mlp"),
    ("mlp128_f64", "point", "dmma", "routine-dmma"),
    ("convnet", "whole-field", "", "routine-point"),
    ("lstm", "point", "", "routine-point"),
])
def test_the_choice_for_each_kind_of_model_and_why(models, name, batched, tensor, routine):
    s = strategy.decide(_plan(models[1][name]))
    assert (s.batched.chosen, s.tensor.chosen, s.routine.chosen) == (batched, tensor, routine)
    # every implementation of a table is either the winner, an alternative that fits, or rejected with reasons
    for decision, size in ((s.batched, 5), (s.tensor, 4), (s.routine, 3)):
        names = [decision.chosen] * bool(decision.chosen) + list(decision.alternatives) + [r.name for r in decision.rejected]
        assert len(names) == len(set(names)) == size, decision
        assert all(r.reasons and all(isinstance(why, str) and why for why in r.reasons) for r in decision.rejected)
    assert "point" in s.batched.alternatives or batched == "point"
    text = "\n".join(s.lines())
    assert f"cuda batched kernel: {batched}" in text and "not " in text


def test_rejections_name_the_tuning_key_that_decided(models):
    s = strategy.decide(_plan(models[1]["gemm_small"]))
    chain = {r.name: r.reasons for r in s.tensor.rejected}["tc-chain"]
    assert any("chain_min_macs 512" in why for why in chain)
    s = strategy.decide(_plan(models[1]["gemm_small"]), Tuning().replace(chain_min_macs=0))
    assert s.tensor.chosen == "tc-chain"


def test_the_plan_is_frozen_and_rendering_leaves_it_as_it_was(models):
    plan = _plan(models[1]["mlp128"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.host_vector = 64
    before = (plan.hash, plan.host_vector, plan.infer_one, [w.array.copy() for w in plan.weights])
    s = strategy.decide(plan, vector=64)
    emit.render(s, "both", "stamp", Options().profile())
    assert s.plan.host_vector == 64 and s.plan is not plan
    assert (plan.hash, plan.host_vector, plan.infer_one) == before[:3]
    assert all(np.array_equal(a, w.array) for a, w in zip(before[3], plan.weights))


def _shared_weight_mlp(path):
    """x[4] -> Gemm(W, b0) Tanh -> Gemm(W2, b1) Relu -> Gemm(W, b2): the first and last layers share W
    (4 x 4), so the plan's weights are W, b0, W2, b1, b2: not two per layer in order."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W2")]
    inits += [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), f"b{i}") for i in range(3)]
    nodes = [helper.make_node("Gemm", ["x", "W", "b0"], ["h0"], transB=1), helper.make_node("Tanh", ["h0"], ["a0"]),
             helper.make_node("Gemm", ["a0", "W2", "b1"], ["h1"], transB=1), helper.make_node("Relu", ["h1"], ["a1"]),
             helper.make_node("Gemm", ["a1", "W", "b2"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def test_the_chain_is_read_from_the_loops_not_from_weight_positions(tmp_path):
    """A weight shared by two layers: the analysis finds each layer's W and bias by what its loops
    load, and the C++ packing at init reads them by those indices (compiled and compared)."""
    plan = _plan(_shared_weight_mlp(tmp_path / "shared.onnx"), embed=False)
    layers = strategy.analyse(plan).layers
    assert [(layer.w_index, layer.b_index) for layer in layers] == [(0, 1), (2, 3), (0, 4)]
    assert [layer.act for layer in layers] == ["Tanh", "Relu", None]
    choice = cuda.choose(strategy.decide(plan))
    assert choice.kind == "mlp-narrow"
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    decls = [f"static const float w{i}[] = {{{', '.join(repr(float(v)) + 'f' for v in w.array)}}};"
             for i, w in enumerate(plan.weights)]
    src = tmp_path / "pack.cpp"
    src.write_text("#include <stdio.h>\n#include <stdlib.h>\n" + "\n".join(decls) + f"""
int main(void)
{{
    const float *host[] = {{{", ".join(f"w{i}" for i in range(len(plan.weights)))}}};
    float *packed = (float *)calloc({choice.packed_size}, sizeof(float));
{choice.layout.host_packing()}
    fwrite(packed, sizeof(float), {choice.packed_size}, stdout);
    return 0;
}}
""")
    subprocess.run(["g++", "-O1", "-Wall", "-Werror", str(src), "-o", str(tmp_path / "pack")], check=True)
    got = np.frombuffer(subprocess.run([str(tmp_path / "pack")], capture_output=True, check=True).stdout, np.float32)
    assert np.array_equal(got, choice.packed())


@pytest.mark.parametrize("width", [1, 7, 64, 65, 300, 1024])
def test_one_layer_chains_of_every_width_generate(tmp_path, width):
    """A single Linear(width, width) (TorchFort's example shape at 1024) used to raise from the
    one-thread routine (no hidden layer to size its buffers by)."""
    path = str(tmp_path / "lin.onnx")
    onnx.save(zoo.mlp("lin", [width, width], [None]), path)
    plan, files = generate(path, str(tmp_path / "out"), Options(lang="both", embed=False))
    s = strategy.decide(plan)
    assert len(s.layers) == 1
    assert s.routine.chosen == ("routine-mlp" if width <= Tuning().routine_max_width else "routine-point")
    kernel = (tmp_path / "out" / "lin_kernel.cu").read_text()
    assert "lin_infer_warp" in kernel and ("float a[" not in kernel.split("lin_point_thread")[-1].split("}")[0])


def test_tuning_from_a_profile_section_and_overrides():
    t = Tuning.for_target({"default": {"cluster_min_phases": 4}, "sm_90": {"cluster_min_phases": 8, "smem_conv": ""},
                           "gfx90a": {"constant_limit": 0}}, "sm_90")
    assert (t.cluster_min_phases, t.smem_conv, t.constant_limit) == (8, "", Tuning().constant_limit)
    assert Tuning.for_target(None, "sm_80") == Tuning()
    t = Tuning().parse_overrides(["warp_compact=true", "igemm-min-rows=4096", "smem_conv=depthwise"])
    assert (t.warp_compact, t.igemm_min_rows, t.smem_conv) == (True, 4096, "depthwise")
    assert t.describe() == "tuning=igemm_min_rows=4096,smem_conv=depthwise,warp_compact=true"
    assert Tuning().describe() == "tuning=default" and Tuning().as_dict()["constant_limit"] == 6144
    for bad, words in ((["nope=1"], "unknown tuning key 'nope'"), (["constant_limit=big"], "must be an integer"),
                       (["smem_conv=some"], "must be one of"), (["warp_compact=maybe"], "true or false"),
                       (["constant_limit"], "expected KEY=VALUE"), (["constant_limit=-1"], "at least 0")):
        with pytest.raises(TuningError, match=words) as err:
            Tuning().parse_overrides(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(TuningError, match=r"tuning.sm_90: constant_limit must be an integer"):
        Tuning.for_target({"sm_90": {"constant_limit": "6k"}}, "sm_90")
    for name, candidates in MEASURED:
        assert candidates[0] == getattr(Tuning(), name)
        for value in candidates:
            Tuning().replace(**{name: value})
    assert all(Tuning.doc(name) for name in Tuning.names())


def _pointwise_mlp(path, epilogue):
    """5 -> 64 -> 64 -> 3, each hidden Gemm followed by ``epilogue`` (one of "gelu_tanh", "softsign",
    "swish_scaled", "nan_at_0") spelled as separate elementwise nodes, as exporters write them."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             (("three", 3.0), ("k", 0.044715), ("r", np.sqrt(2 / np.pi)), ("one", 1.0), ("half", 0.5), ("two", 2.0))]
    nodes, prev = [], "x"
    for i, (k, n) in enumerate(((5, 64), (64, 64), (64, 3))):
        inits += [numpy_helper.from_array((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32), f"W{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), f"B{i}")]
        h = f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"B{i}"], [h], transB=1))
        prev = h
        if i == 2:
            break
        t = f"e{i}_"
        chains = {
            "gelu_tanh": [("Pow", [h, "three"], "p"), ("Mul", ["p", "k"], "pk"), ("Add", [h, "pk"], "s"),
                          ("Mul", ["s", "r"], "sr"), ("Tanh", ["sr"], "t"), ("Add", ["t", "one"], "a"),
                          ("Mul", [h, "a"], "m"), ("Mul", ["m", "half"], "out")],
            "softsign": [("Abs", [h], "ab"), ("Add", ["ab", "one"], "d"), ("Div", [h, "d"], "out")],
            "swish_scaled": [("Sigmoid", [h], "sg"), ("Mul", [h, "sg"], "sw"), ("Tanh", ["sw"], "t"),
                             ("Mul", ["t", "two"], "out")],
            "nan_at_0": [("Div", [h, h], "out")],
        }[epilogue]
        for op, ins, out in chains:
            nodes.append(helper.make_node(op, [x if x in (h, "three", "k", "r", "one", "half", "two") else t + x
                                               for x in ins], [t + out]))
        prev = t + "out"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "pw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


REFERENCE = {"gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))),
             "softsign": lambda v: v / (1 + np.abs(v)),
             "swish_scaled": lambda v: 2 * np.tanh(v / (1 + np.exp(-v)))}


@pytest.mark.parametrize("epilogue", sorted(REFERENCE))
def test_pointwise_epilogues_take_the_fast_kernels_as_relu_does(tmp_path, epilogue):
    """GELU's tanh form (Pow/Mul/Add/Tanh nodes), Softsign (Abs/Add/Div) and a scaled x*sigmoid(x)
    become one expression per layer: the same FP32 kernel and 3xTF32 chain as a Relu MLP, the
    expression equal to the formula."""
    path = _pointwise_mlp(tmp_path / f"{epilogue}.onnx", epilogue)
    plan, _ = generate(path, str(tmp_path / "out"), Options(lang="c", name="pw"))
    s = strategy.decide(plan)
    assert (s.batched.chosen, s.tensor.chosen, s.routine.chosen, s.offload.chosen) == (
        "mlp-narrow", "tc-chain", "routine-mlp", "offload-mlp"), "\n".join(s.lines())
    assert [layer.epilogue for layer in s.layers] == [True, True, False]
    v = np.linspace(-5, 5, 41)
    got = [strategy.mlp.analysis.value_at(s.layers[0].expr, float(x)) for x in v]
    np.testing.assert_allclose(got, REFERENCE[epilogue](v), rtol=1e-6, atol=1e-7)
    kernel = (tmp_path / "out" / "pw_kernel.cu").read_text()
    assert " * Batched kernel: mlp-narrow (" in kernel and "__device__ __forceinline__ float act0(float v)" in kernel


def test_an_epilogue_not_finite_at_zero_keeps_the_generic_kernel(tmp_path):
    """The kernels' padded columns hold f(0): x / x would put NaN into every padded column."""
    plan = _plan(_pointwise_mlp(tmp_path / "nan.onnx", "nan_at_0"))
    s = strategy.decide(plan)
    assert not s.chain and "not finite at 0" in s.chain.reason and s.batched.chosen == "point"


def _site_profile(tmp_path, monkeypatch, text):
    """A user profile ``site`` (extends gcc, GPU sm_90) on the search path."""
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / "site.yaml").write_text("extends: gcc\ncuda_arch: 90\n" + text)
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(folder))


def test_a_profiles_tuning_section_reaches_generate_info_and_the_provenance(tmp_path, monkeypatch, capsys):
    from rosenna.cli import main

    _site_profile(tmp_path, monkeypatch, "tuning:\n  default: {chain_min_macs: 100000}\n  sm_90: {chain_min_macs: 0}\n"
                                         "  sm_80: {chain_min_macs: 7}\n")
    model = zoo.save("gemm_small", str(tmp_path / "gemm_small.onnx"))
    assert main(["info", model, "--toolchain", "site"]) == 0
    out = capsys.readouterr().out
    assert "strategy (tuning=chain_min_macs=0):" in out and "cuda tensor-core kernel: tc-chain" in out
    assert main(["info", model, "--toolchain", "site", "--tune", "chain_min_macs=600"]) == 0
    out = capsys.readouterr().out
    assert "strategy (tuning=chain_min_macs=600):" in out and "under chain_min_macs 600" in out
    assert main(["generate", model, "--toolchain", "site", "--lang", "c", "--out", str(tmp_path / "g")]) == 0
    head = (tmp_path / "g" / "gemm_small.c").read_text().splitlines()[0]
    assert "gpu=sm_90 tuning=chain_min_macs=0. Do not edit." in head
    assert main(["generate", model, "--lang", "c", "--out", str(tmp_path / "d")]) == 0  # the defaults: not recorded
    assert "tuning=" not in (tmp_path / "d" / "gemm_small.c").read_text().splitlines()[0]
    assert main(["info", "--tuning", "--toolchain", "site"]) == 0
    out = capsys.readouterr().out
    assert "chain_min_macs = 0  (set)" in out and "cluster_min_phases = 6\n" in out


@pytest.mark.parametrize("text,words", [
    ("tuning:\n  sm_90: {no_such_knob: 1}\n", "tuning.sm_90"),
    ("tuning:\n  sm_90: {smem_conv: some}\n", "tuning.sm_90.smem_conv"),
    ("tuning:\n  volta: {constant_limit: 1}\n", "tuning"),
    ("tuning:\n  sm_90: {dmma_smem_limit: 100000}\n", "tuning.sm_90.dmma_smem_limit"),
])
def test_a_broken_tuning_section_is_refused_in_one_line(tmp_path, monkeypatch, capsys, text, words):
    from rosenna.cli import main

    _site_profile(tmp_path, monkeypatch, text)
    model = zoo.save("gemm_small", str(tmp_path / "gemm_small.onnx"))
    assert main(["generate", model, "--toolchain", "site", "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "g").exists() or not list((tmp_path / "g").iterdir())


def test_the_architectures_shared_memory_limits_are_built_in(tmp_path, monkeypatch, capsys):
    """sm_86 lets a block opt in to 99 KB of shared memory, not the default's 100: the built-in
    section lowers tiled_smem_limit there (and a profile's own section still wins); sm_90 keeps
    the defaults."""
    from rosenna.cli import main
    from rosenna.strategy import Tuning

    assert Tuning.for_target(None, "sm_86").tiled_smem_limit == 99 * 1024 < Tuning().tiled_smem_limit
    assert Tuning.for_target({"sm_86": {"tiled_smem_limit": 50000}}, "sm_86").tiled_smem_limit == 50000
    assert Tuning.for_target(None, "sm_90") == Tuning()
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "ampere.yaml").write_text("extends: gcc\ncuda_arch: 86\n")
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(folder))
    assert main(["info", "--tuning", "--toolchain", "ampere"]) == 0
    assert "tiled_smem_limit = 101376  (set)" in capsys.readouterr().out


def test_info_shows_the_whole_field_choices(capsys):
    """`rosenna info` on the poisson_guess U-Net: the schedule, the forms of <name>_run with the
    ones that also fit, and per conv its kernel, the alternatives and why the others do not fit;
    a tuning that refuses the clustered kernel says why."""
    from rosenna.cli import main

    model = os.path.join(os.path.dirname(__file__), "..", "examples", "surrogates", "poisson_guess", "pguess.onnx")
    assert main(["info", model]) == 0
    out = capsys.readouterr().out
    assert "whole-field schedule: one phase per op (" in out and "phases_per_op = 26" in out
    assert "whole-field forms: cluster (" in out and "also fits: persistent\n      also fits: launched" in out
    assert "whole-field conv, phase 0 (Conv: _down.0_Conv): smem-tiles" in out and "not igemm: K = 9 under igemm_min_k 32" in out
    assert "whole-field conv, phase 2 (Conv: _down.1_Conv): igemm (3xTF32 implicit GEMM in the launched phases from 16 " in out
    assert main(["info", model, "--tune", "cluster_min_phases=30", "--tune", "field_epilogues=all", "--tune", "smem_conv="]) == 0
    out = capsys.readouterr().out
    assert "whole-field forms: persistent (" in out and "not cluster: 10 phases, under cluster_min_phases 30" in out
    assert "whole-field schedule: fused (producer-side epilogues in cluster, launches, persistent" in out
    assert "not smem-tiles: smem_conv is ''" in out


def test_tune_on_the_command_line_is_checked(tmp_path, capsys):
    from rosenna.cli import main

    model = zoo.save("gemm_small", str(tmp_path / "gemm_small.onnx"))
    for bad in ("bogus=1", "constant_limit=lots", "warp_compact"):
        assert main(["generate", model, "--tune", bad, "--out", str(tmp_path / "g")]) == 2
        err = capsys.readouterr().err.strip()
        assert "--tune" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "g").exists()


def test_the_plans_loops_and_weights_only_where_a_compile_reads_them(models, tmp_path):
    """The kernel file's <name>_point and the plan's weight arrays: gone where neither the batched
    kernel nor the routine reads them (mlp128: the staged kernel and the MLP routine read their own
    copies), in the batched compile alone where only the point kernel calls them."""
    plan, _ = generate(models[1]["mlp128"], str(tmp_path / "m"), Options(lang="c", embed=False))
    text = (tmp_path / "m" / "mlp128_kernel.cu").read_text()
    assert "mlp128_point(" not in text and "mlp128_w0_" not in text and "mlp128_routine_upload" in text
    path = str(tmp_path / "lin.onnx")
    onnx.save(zoo.mlp("lin", [300, 300], [None]), path)
    generate(path, str(tmp_path / "l"), Options(lang="c"))
    text = (tmp_path / "l" / "lin_kernel.cu").read_text()
    assert "#if !defined(ROSENNA_DEVICE_ROUTINE)\n/* One point: the same loops" in text
    assert "#if !defined(ROSENNA_DEVICE_ROUTINE)\n/* The weights as the per-point routine reads them" in text
