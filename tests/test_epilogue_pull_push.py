"""The two switches of the CUDA/HIP whole-field epilogues, each alone (Tuning epilogue_pull,
epilogue_push; rosenna/emit/cuda/field_epilogue.py): what each fuses on a net that has both kinds,
where a value with a second consumer stays stored, an element map pushed through to the model's
output, and the fused phases, run on the host thread by thread, against onnxruntime. A pull that
took a window the producer does not hold, or a push that dropped a store a later phase reads,
fails here."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import generate as gen
from rosenna.strategy.field import fusion
from rosenna.loopir import Assign, Loop, Ref
from rosenna.strategy import Tuning
from test_field_epilogue import odd_net
from test_infer_one import assert_close, emulate_launches, reference


def _tuning(pull, push):
    return Tuning().replace(field_epilogues="all", epilogue_pull=pull, epilogue_push=push)


def _stored(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            yield from _stored(s.body)
        elif isinstance(s, Assign) and isinstance(s.target, Ref):
            yield s.target.buf


def _phases(path, pull, push):
    """``[(ops of each phase, values it stores)]`` of the persistent schedule."""
    _, plan = gen.build_plan(path, gen.Options(lang="c", tuning=_tuning(pull, push)))
    sched = fusion.schedule(plan, epilogues=True)
    return [([note.split(":")[0] for note in launch.notes], sorted({b for m in launch.members for b in _stored(m.body)}))
            for launch in sched.phases]


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    return odd_net(tmp_path_factory.mktemp("pullpush") / "odd.onnx")


def test_each_switch_fuses_its_own_kind(odd):
    """odd net: a = Conv, p = MaxPool(a), b = Conv(p), s = upsample(b) + a, c = Conv(s),
    q = MaxPool(c), t = q + b (b's second consumer), out = Conv(t)."""
    pull = _phases(odd, True, False)
    push = _phases(odd, False, True)
    neither = _phases(odd, False, False)
    assert len(neither) == 10 and all(len(stored) == 1 for _, stored in neither)
    # pulled: each MaxPool computed by its conv's threads; c read by its pool alone is not stored
    assert (["Conv", "MaxPool"], ["a", "p"]) in pull and (["Conv", "MaxPool"], ["q"]) in pull
    assert not any(op[0] == "Conv" and len(op) > 2 for op, _ in pull)
    # pushed: b's upsampling and the skip Add written by b's conv threads; b, read again by t, stays
    assert (["Conv", "Concat", "Concat", "Add"], ["b", "s"]) in push
    assert not any(ops[:2] == ["Conv", "MaxPool"] for ops, _ in push)
    assert _phases(odd, True, True) == [(["Conv", "MaxPool"], ["a", "p"]), (["Conv", "Concat", "Concat", "Add"], ["b", "s"]),
                                        (["Conv", "MaxPool"], ["q"]), (["Add"], ["t"]), (["Conv"], ["out"])]


def _to_output(path, size=8, channels=2):
    """field -> a = Conv; p = AveragePool 2x2; b = Conv; nearest upsampling by Reshape/Concat;
    + a: the model's output (a pushed chain that ends at y)."""
    rng = np.random.default_rng(9)
    h = size // 2
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal(s)).astype(np.float32), n) for n, s in
             (("a.w", (channels, 1, 3, 3)), ("a.b", (channels,)), ("b.w", (channels, channels, 3, 3)),
              ("b.b", (channels,)))]
    nodes = [helper.make_node("Conv", ["field", "a.w", "a.b"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "b.w", "b.b"], ["b"], pads=[1, 1, 1, 1])]
    prev = "b"
    for j, dims in enumerate([[1, channels, h * h, 1], [1, channels, h, 2 * h], [1, channels, 2 * h, 2 * h]]):
        inits.append(numpy_helper.from_array(np.array(dims, np.int64), f"r{j}.shape"))
        nodes.append(helper.make_node("Reshape", [prev, f"r{j}.shape"], [f"r{j}"]))
        prev = f"r{j}"
        if j < 2:
            nodes.append(helper.make_node("Concat", [prev, prev], [f"u{j}"], axis=3))
            prev = f"u{j}"
    nodes.append(helper.make_node("Add", [prev, "a"], ["out"]))
    graph = helper.make_graph(nodes, "toout", [helper.make_tensor_value_info("field", TensorProto.FLOAT,
                                                                             [1, 1, size, size])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, channels, size, size])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def test_a_push_that_ends_at_the_output(tmp_path):
    path = _to_output(tmp_path / "toout.onnx")
    phases = _phases(path, False, True)
    assert phases[-1][0] == ["Conv", "Concat", "Concat", "Add"] and "out" in phases[-1][1]
    assert _phases(path, True, False)[0] == (["Conv", "AveragePool"], ["a", "p"])
    _check(path, tmp_path, True, True)


def _check(path, tmp_path, pull, push):
    plan, x, forwards, backwards = emulate_launches(path, tmp_path / f"gen{pull}{push}", persistent=True,
                                                    tuning=_tuning(pull, push))
    want = reference(path, plan, x)
    assert_close(forwards, want, what=f"pull {pull} push {push}, threads in order")
    assert_close(backwards, want, what=f"pull {pull} push {push}, threads in reverse")


def test_push_alone_emulated(odd, tmp_path):
    """Push alone on the odd net: b's conv threads write the upsampled skip Add, and b, which t
    reads again, stays stored. (A pull alone fuses the pools as both switches on do, which
    tests/test_field_epilogue.py emulates.)"""
    _check(odd, tmp_path, False, True)
