"""A property sweep of the strategy stage and the emitters: generated MLP shapes (1 to 6 layers,
widths 1 to 1,100, every activation the kernels take, float32 and float64, embedded and
file-loaded), conv and RNN shapes, and drawn conv nets through the whole-field strategy under
tunings that reach its branches. For each: every implementation's ``fits`` answers (reasons,
never an exception), the strategy decides, and every file renders. A sample of each kind is
compiled on the host and verified against onnxruntime, the one-layer 1,100-wide Gemm among them.
The shapes are drawn from a fixed seed: the same sweep every run."""

import concurrent.futures
import os
import shutil

import numpy as np
import pytest
from mlp_reference import ALL_ACTIVATIONS, activation_mlp

import op_models
from rosenna import emit, strategy
from rosenna.emit.cuda import tc_chain, tc_wide, tiled
from rosenna.generate import Options, build_plan
from rosenna.strategy import Subject, field, mlp, point
from rosenna.verify import verify

#: Widths the draw picks from: 1, the kernels' tile and limit edges, and up to 1,100.
WIDTHS = (1, 2, 3, 5, 8, 9, 16, 17, 31, 48, 49, 63, 64, 65, 95, 96, 97, 127, 128, 129, 255, 256, 257, 511, 512,
          513, 700, 1024, 1100)
TABLES = (field.BATCHED + mlp.BATCHED + point.BATCHED, mlp.TENSOR, mlp.ROUTINE, mlp.OFFLOAD)
#: Parameters above which a drawn MLP is file-loaded whatever was drawn (rendering a few million
#: literals is the generator's own benchmark's business, not this sweep's).
EMBED_LIMIT = 300_000


def _mlp_shapes(count=36, seed=25):
    """``[(name, sizes, activations, dtype, embed)]``: one-layer chains of the edge widths first
    (1,100 included), then random draws."""
    rng = np.random.default_rng(seed)
    shapes = [(f"one{w}", [w, w], [None], np.float32, w < 512) for w in (1, 64, 129, 1100)]
    shapes.append(("one1100_f64", [1100, 3], [ALL_ACTIVATIONS[6]], np.float64, False))
    shapes.append(("staged", [16, 120, 128, 5], [ALL_ACTIVATIONS[10], ALL_ACTIVATIONS[13], None], np.float32, True))
    for i in range(count - len(shapes)):
        depth = int(rng.integers(1, 7))
        sizes = [int(rng.choice(WIDTHS)) for _ in range(depth + 1)]
        if sum(k * n for k, n in zip(sizes, sizes[1:])) > 2_000_000:  # keep the sweep's time bounded
            sizes = [min(s, 256) for s in sizes]
        acts = [ALL_ACTIVATIONS[int(rng.integers(len(ALL_ACTIVATIONS)))] if rng.random() < 0.85 else None
                for _ in range(depth)]
        dtype = np.float64 if rng.random() < 0.3 else np.float32
        params = sum(k * n + n for k, n in zip(sizes, sizes[1:]))
        shapes.append((f"mlp{i}", sizes, acts, dtype, bool(rng.random() < 0.5) and params <= EMBED_LIMIT))
    return shapes


def _other_models(tmp):
    """Conv and RNN shapes: ``[(name, path)]``."""
    rng = np.random.default_rng(26)
    out = [("convnet", op_models.convnet(tmp / "convnet.onnx", 40, 48, 5)), ("unet", op_models.unet(tmp / "unet.onnx")),
           ("lstm_cell", op_models.lstm_cell(tmp / "lstm_cell.onnx", 4, 7)),
           ("lstm_seq", op_models.lstm_sequence(tmp / "lstm_seq.onnx", 6, 2, 9))]
    for i in range(8):
        c = int(rng.choice((1, 2, 3, 4, 8)))
        group = c if rng.random() < 0.3 else 1
        cout = c if group > 1 else int(rng.choice((1, 4, 8, 9)))
        k = tuple(int(v) for v in rng.choice((1, 3, 5), 2))
        strides = tuple(int(v) for v in rng.choice((1, 2), 2))
        dil = tuple(int(v) for v in rng.choice((1, 2), 2))
        act = [None, "Relu", "Tanh", "Sigmoid"][int(rng.integers(4))]
        h, w = int(rng.integers(k[0] * dil[0], 40)), int(rng.integers(k[1] * dil[1], 40))
        pads = tuple(int(v) for v in rng.integers(0, 2, 4))
        out.append((f"conv{i}", op_models.conv(tmp / f"conv{i}.onnx", c, h, w, cout, k, strides, pads, dil, group, act,
                                               seed=i)))
    return out


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """``{name: (path, options, plan, strategy)}`` for every model of the sweep."""
    tmp = tmp_path_factory.mktemp("sweep")
    out = {}
    for name, sizes, acts, dtype, embed in _mlp_shapes():
        path = activation_mlp(str(tmp / f"{name}.onnx"), sizes, acts, seed=len(out), dtype=dtype, name=name)
        out[name] = (path, Options(lang="c", name=name, embed=embed))
    for name, path in _other_models(tmp):
        out[name] = (path, Options(lang="c", name=name))
    for name, (path, options) in list(out.items()):
        plan = build_plan(path, options)[1]
        out[name] = (path, options, plan, strategy.decide(plan))
    return out


def test_every_fits_answers_and_every_file_renders(swept):
    profile = Options().profile()
    chosen = set()
    for name, (_, _, plan, s) in swept.items():
        for table in TABLES:  # each implementation alone, beside every batched kernel
            for batched in ("", "point", "mlp-narrow", "mlp-staged"):
                for impl in table:
                    reasons = impl.fits(Subject(plan, s.chain, plan.path, batched), s.tuning)
                    assert isinstance(reasons, tuple) and all(isinstance(r, str) and r for r in reasons), (name, impl.name)
        assert s.batched.chosen and s.routine.chosen and s.offload.chosen, name
        files = emit.render(s, "both", "stamp", profile)
        assert f"{plan.name}_kernel.cu" in files and f"{plan.name}_model.F90" in files, name
        chosen |= {s.batched.chosen, s.tensor.chosen, s.routine.chosen, s.offload.chosen}
    # the sweep reaches every implementation but the whole-field kernel's siblings it cannot draw
    assert chosen >= {"point", "mlp-narrow", "mlp-staged", "mlp-wide", "tc-chain", "tc-wide", "dmma", "whole-field",
                      "routine-mlp", "routine-point", "routine-dmma", "offload-mlp", "offload-loops"}, chosen


def test_the_strategys_footprints_are_the_layouts_the_emitters_build(swept):
    """The sizes a choice depends on, computed in rosenna/strategy/mlp, against the emitters' layouts."""
    assert mlp.WIDE_MAX_OUT == tc_wide.WIDE_MAX_OUT
    for name, (_, _, plan, s) in swept.items():
        if not s.layers:
            continue
        assert mlp.chain_bytes(s.layers) == tc_chain.chain_bytes(s.layers), name
        if s.chain.hidden:
            assert mlp.tiled_smem(s.layers, s.tuning) == tiled.smem(s.layers, s.tuning), name


#: Tunings the conv sweep decides under: the defaults, and settings that reach the field
#: strategy's other branches (every conv an implicit GEMM, the depthwise-only rule, a clustered
#: kernel for any plan, the epilogues in every form, phases computed where read, blocks too small
#: for the tiles, odd tile shapes).
FIELD_TUNINGS = (
    {}, {"igemm_min_k": 1, "igemm_min_cout": 1, "igemm_min_rows": 1}, {"smem_conv": "depthwise"},
    {"cluster_samples": 256, "cluster_min_phases": 0, "cluster_jam": True, "smem_igemm_first": False},
    {"field_epilogues": "all", "cluster_min_phases": 0}, {"field_inline_loads": 4, "field_decode": True},
    {"cluster_min_phases": 0, "cluster_threads": 32, "field_persistent_threads": 32, "smem_threads": 64},
    {"smem_channels_launched": 3, "smem_rows_launched": 3, "smem_depthwise_rows_persistent": 5,
     "smem_chunk_bytes": 64, "whole_batch_samples": 1},
)


def _conv_shapes(tmp, count=10, seed=27):
    """Conv nets of one to three convs (any group that divides, depthwise, 1x1 to 5x5 taps, strides,
    dilations, pads, activations), drawn from a fixed seed: ``[(name, path)]``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        c, h, w = int(rng.choice((1, 2, 3, 4, 8, 12))), int(rng.integers(5, 34)), int(rng.integers(5, 34))
        shape, nodes, inits, name = [1, c, h, w], [], [], "x"
        for j in range(int(rng.integers(1, 4))):
            k = tuple(int(v) for v in rng.choice((1, 2, 3, 5), 2))
            dil = tuple(int(v) for v in rng.choice((1, 1, 2), 2))
            if any(kk * d > n for kk, d, n in zip(k, dil, (h, w))):
                k, dil = (1, 1), (1, 1)
            group = c if rng.random() < 0.3 else 1
            cout = c if group > 1 else int(rng.choice((1, 3, 8, 9, 16, 24)))
            strides = tuple(int(v) for v in rng.choice((1, 1, 2), 2))
            pads = [int(v) for v in rng.integers(0, 2, 4)]
            weights = rng.standard_normal((cout, c // group) + k).astype(np.float32) * 0.2
            inits.append(numpy_helper.from_array(weights, f"w{j}"))
            nodes.append(helper.make_node("Conv", [name, f"w{j}"], [f"c{j}"], kernel_shape=list(k), strides=list(strides),
                                          pads=pads, dilations=list(dil), group=group))
            name = f"c{j}"
            if rng.random() < 0.5:
                nodes.append(helper.make_node(str(rng.choice(("Relu", "Tanh", "Sigmoid"))), [name], [f"a{j}"]))
                name = f"a{j}"
            h = (h + pads[0] + pads[2] - (k[0] - 1) * dil[0] - 1) // strides[0] + 1
            w = (w + pads[1] + pads[3] - (k[1] - 1) * dil[1] - 1) // strides[1] + 1
            c = cout
            if min(h, w) < 3:
                break
        nodes.append(helper.make_node("Identity", [name], ["y"]))
        graph = helper.make_graph(nodes, f"field{i}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, w])], inits)
        path = tmp / f"field{i}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        out.append((f"field{i}", str(path)))
    return out


@pytest.fixture(scope="module")
def fields(tmp_path_factory):
    """``{name: plan}``: the drawn conv nets and the sweep's conv and RNN models (the small U-Net
    among them), each with ``<name>_infer_one`` (so with a whole-field strategy)."""
    tmp = tmp_path_factory.mktemp("fields")
    models = _conv_shapes(tmp) + _other_models(tmp)
    return {name: build_plan(str(path), Options(lang="c", name=name, infer_one=True))[1] for name, path in models}


def test_the_field_strategy_answers_for_conv_shapes(fields):
    """For every conv net of the sweep under every tuning of :data:`FIELD_TUNINGS`: the whole-field
    implementation's ``fits`` answers, the field strategy decides (each conv phase an implicit
    GEMM, tiles or the direct loops, with reasons), and the kernel file's whole-field part renders
    what it decided; no exception anywhere."""
    from rosenna.emit.cuda import whole_field

    seen = set()
    for settings in FIELD_TUNINGS:
        tuning = strategy.Tuning().replace(**settings)
        for name, plan in fields.items():
            s = strategy.decide(plan, tuning)
            for impl in field.BATCHED:
                reasons = impl.fits(Subject(s.plan, s.chain, plan.path), tuning)
                assert isinstance(reasons, tuple) and all(isinstance(r, str) and r for r in reasons), name
            f = s.field
            if f is None:  # an LSTM keeps the plan per point: no <name>_infer_one
                assert not plan.emits_infer_one and whole_field.infer_one(s) == "", name
                continue
            assert f.samples >= 1 and f.widest >= 1, name
            for decision in f.decisions:
                assert decision.chosen and all(isinstance(line, str) for line in decision.lines()), (name, settings)
                assert all(rej.reasons and all(rej.reasons) for rej in decision.rejected), (name, decision)
                seen.add(decision.chosen)
            assert set(f.tiles) <= {"launched", "persistent", "cluster"} and (f.cluster_samples > 0) == ("cluster" in f.tiles)
            for form, tiles in f.tiles.items():
                block = {"persistent": tuning.field_persistent_threads, "cluster": tuning.cluster_threads}.get(form)
                assert all(block is None or conv.tiling.used <= block for conv in tiles.values()), (name, form)
            text = whole_field.infer_one(s)
            assert f"{plan.name}_run(" in text and all(f"{plan.name}_igemm{k}(" in text for k in f.igemm), name
    # the sweep reaches every choice of a conv phase and of the forms
    assert seen >= {"igemm", "smem-tiles", "direct", "cluster", "persistent", "fused", "one phase per op"}, seen


def _verified(item):
    path, options = item
    plan, results = verify(path, options, cases=4)
    return plan.name, results


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_sample_compiles_and_matches_onnxruntime(swept):
    """The one-layer 1,100-wide Gemm (file-loaded), a float64 one, a deep drawn MLP, a conv and the
    LSTM sequence: the C library built by the host compiler, against onnxruntime."""
    deep = max((n for n in swept if n.startswith("mlp")), key=lambda n: len(swept[n][3].layers))
    sample = ["one1100", "one1100_f64", deep, "conv3", "lstm_seq"]
    with concurrent.futures.ThreadPoolExecutor(min(2, os.cpu_count() or 1)) as pool:
        for name, results in pool.map(_verified, [swept[n][:2] for n in sample]):
            assert results and all(r.passed for r in results), (name, [r.message() for r in results if not r.passed])
