"""Host tier: generated code built with gcc/gfortran and compared with onnxruntime."""

import os
import tempfile

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper

from rosenna.cli import main
from rosenna.compare import TOLERANCE, Tolerance, compare
from rosenna.generate import Options
from rosenna.verify import verify

ONNX_DATA = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")

CASES = [
    ("gemm_small", "single", None), ("gemm_small", "double", False),
    ("gemm_big", "single", False), ("gemm_big", "double", True),
    ("gemm_big_f64", "double", False), ("gemm_big_f64", "single", True),
    ("two_in_two_out", "single", True), ("two_in_two_out", "double", False),
    ("matmul_const", "single", False), ("matmul_const", "double", True),
    ("evil_names", "single", False), ("dynamic_reshape", "single", True),
    ("output_aliases", "single", True), ("output_aliases", "double", False),
]


@pytest.mark.parametrize("name,precision,embed", CASES)
def test_verify_passes(model, tmp_path, name, precision, embed):
    path = model(name)
    plan, results = verify(path, Options(precision=precision, embed=embed), cases=8, keep=str(tmp_path))
    assert {(r.lang, r.entry) for r in results} == {(lang, e) for lang in ("c", "fortran")
                                                     for e in ("infer", "infer_batch")}
    if name == "gemm_big_f64" and precision == "single":
        # float64 model computed in single precision: judged at float32's tolerance.
        assert {(r.rtol, r.atol) for r in results} == {(1e-5, 1e-6)}
    assert all(r.passed for r in results), [(r.output, r.lang, r.abs_err, r.got, r.want) for r in results]
    assert plan.embed == (embed if embed is not None else True)
    assert (tmp_path / f"{plan.name}.rwt").exists() == (not plan.embed)


def test_verify_cli_reports_per_output(model, tmp_path, capsys):
    rc = main(["verify", model("two_in_two_out"), "--cases", "4", "--lang", "c", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("PASS") == 5  # p and q by infer and infer_batch, and the verdict
    assert "max abs err" in out and "1e-05" in out


def test_verify_detects_wrong_code(model, tmp_path, monkeypatch, capsys):
    """A deliberately broken lowering must make verify FAIL, with exit status 1."""
    from rosenna.ops import activation

    monkeypatch.setattr(activation.Tanh, "expr", lambda self, attrs, x: activation.Fn("exp", (x,)))
    rc = main(["verify", model("gemm_big"), "--cases", "4", "--lang", "c", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL" in out and "worst at [" in out and "tolerance" in out


def test_compare_is_elementwise():
    """Each element against its own tolerance: a large error where |want| is large is allowed even
    when a tiny-valued element sets the 'worst' index (verify once compared max |err| against the
    tolerance of a different element and reported FAIL)."""
    want = np.array([1000.0, 0.0, -3.0])
    got = want + np.array([5e-3, 5e-7, 0.0])
    cmp = compare(got, want, "float32", output="y")
    assert cmp.passed and cmp.mismatches == 0, cmp.message()
    rtol, atol = TOLERANCE["float32"].rtol, TOLERANCE["float32"].atol
    assert all(abs(g - w) <= atol + rtol * abs(w) for g, w in zip(got, want))
    bad = compare(want + np.array([2e-2, 0.0, 0.0]), want, "float32", output="y")
    assert not bad.passed and bad.mismatches == 1 and bad.worst_index == (0,)
    assert "output 'y'" in bad.message() and "1e+03" not in bad.message() and "1000.02" in bad.message()


def test_onnx_conv_verifies_elementwise(capsys):
    """onnx's pytorch-operator/test_operator_conv over 16 cases: max |err| 1.07e-6 sits where |want|
    allows it, yet the old rule compared it with the tolerance of another element and said FAIL."""
    path = os.path.join(ONNX_DATA, "pytorch-operator", "test_operator_conv", "model.onnx")
    rc, out, err = _run(["verify", path, "--lang", "c"], capsys)
    assert rc == 0 and "FAIL" not in out, out + err


def test_compare_special_values():
    nan, inf = float("nan"), float("inf")
    want = np.array([[nan, inf], [-inf, 1.0]])
    assert compare(want.copy(), want, "float64").passed
    for got in ([[0.0, inf], [-inf, 1.0]], [[nan, -inf], [-inf, 1.0]], [[nan, inf], [-inf, nan]],
                [[nan, inf], [inf, 1.0]], [[nan, 1e308], [-inf, 1.0]]):
        cmp = compare(np.array(got), want, "float64", output="z")
        assert not cmp.passed and cmp.mismatches == 1, got
    worst = compare(np.array([[nan, inf], [-inf, 2.0]]), want, "float64")
    assert worst.worst_index == (1, 1) and worst.got == 2.0 and worst.want == 1.0
    # scalars and an explicit tolerance
    assert compare(np.float32(1.5), np.array(1.5), "float32").passed
    assert compare([1.0], [1.1], tolerance=Tolerance(rtol=0.2, atol=0.0)).passed
    assert not compare([1.0, 2.0], [1.0], "float32").passed


# -- group 3: verify answers for every model generate accepts, never a traceback ------------------


def _save(tmp_path, name, nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    m.ir_version = 8
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(m, path)
    return path


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """verify's temp folders go here, so a test can see what is left behind."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_scalar_nan_and_duplicate_outputs(tmp_path, capsys, private_tmp):
    """Rank-0 input and output, Log/Sqrt of negative inputs (NaN on both sides), and one tensor
    listed twice as a graph output; the temp folder is gone afterwards."""
    f = TensorProto.FLOAT
    path = _save(tmp_path, "scalar_nan", [
        helper.make_node("Log", ["s"], ["l"]), helper.make_node("Sqrt", ["v"], ["r"]),
        helper.make_node("Add", ["l", "s"], ["t"])],
        [helper.make_tensor_value_info("s", f, []), helper.make_tensor_value_info("v", f, [1, 3])],
        [helper.make_tensor_value_info("t", f, []), helper.make_tensor_value_info("r", f, [1, 3]),
         helper.make_tensor_value_info("r", f, [1, 3])])
    rc, out, err = _run(["verify", path, "--cases", "6"], capsys)
    assert rc == 0, out + err
    assert out.count("PASS") == 13 and "nan" not in err.lower()  # 3 outputs x 2 entries x 2 languages
    assert list(private_tmp.iterdir()) == []


def test_temp_folder_removed_on_failure(model, capsys, private_tmp, monkeypatch):
    monkeypatch.setenv("CC", "false")
    rc, out, err = _run(["verify", model("gemm_small"), "--lang", "c", "--cases", "2"], capsys)
    assert rc == 2 and "compiling the c verify harness failed" in err
    assert list(private_tmp.iterdir()) == []


OLD_LINEAR = os.path.join(ONNX_DATA, "pytorch-converted", "test_Linear")


def test_old_opset_reference_by_version_converter(capsys, private_tmp):
    """onnx's own opset-6 file: onnxruntime no longer runs it (NOT_IMPLEMENTED)."""
    rc, out, err = _run(["verify", os.path.join(OLD_LINEAR, "model.onnx"), "--cases", "3", "--lang", "c"], capsys)
    assert rc == 0, out + err
    assert "converted from opset 6" in out and "onnx.version_converter" in out


def test_no_reference_is_a_one_line_refusal(capsys, monkeypatch):
    from onnx import version_converter

    def refuse(model, target):
        raise RuntimeError("no adapter\nsecond line")

    monkeypatch.setattr(version_converter, "convert_version", refuse)
    rc, out, err = _run(["verify", os.path.join(OLD_LINEAR, "model.onnx"), "--lang", "c"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "onnxruntime does not run the model" in err and "--reference" in err


def test_onnxruntime_run_failure_is_a_one_line_error(model, capsys, monkeypatch):
    import onnxruntime

    def broken(self, *args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions\nmore")

    monkeypatch.setattr(onnxruntime.InferenceSession, "run", broken)
    rc, out, err = _run(["verify", model("gemm_small"), "--lang", "c"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "onnxruntime cannot run the model: Got invalid dimensions" in err


def test_reference_test_data_set(capsys, private_tmp):
    """onnx's stored inputs and outputs (TensorProto .pb files), for the model onnxruntime won't run."""
    rc, out, err = _run(["verify", os.path.join(OLD_LINEAR, "model.onnx"), "--lang", "c",
                         "--reference", OLD_LINEAR], capsys)
    assert rc == 0, out + err
    assert f"stored outputs from {OLD_LINEAR}" in out
    rc, out, err = _run(["verify", os.path.join(OLD_LINEAR, "model.onnx"), "--lang", "c",
                         "--reference", os.path.join(OLD_LINEAR, "test_data_set_0")], capsys)
    assert rc == 0, out + err
    assert list(private_tmp.iterdir()) == []


def test_reference_npz_detects_wrong_outputs(model, tmp_path, capsys):
    """A .npz of inputs and outputs by name; a changed output must FAIL (the reference is used)."""
    path = model("two_in_two_out")
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (5, 1, 3)).astype(np.float32), rng.uniform(-1, 1, (5, 1, 2)).astype(np.float32)
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    p, q = zip(*(sess.run(None, {"a": a[i], "b": b[i]}) for i in range(5)))
    np.savez(tmp_path / "good.npz", a=a, b=b, p=np.stack(p), q=np.stack(q))
    rc, out, err = _run(["verify", path, "--lang", "c", "--reference", str(tmp_path / "good.npz")], capsys)
    assert rc == 0 and "(5 cases)" in out, out + err
    bad_q = np.stack(q).copy()
    bad_q[3, 0, 1] += 0.5
    np.savez(tmp_path / "bad.npz", input_0=a, input_1=b, output_0=np.stack(p), output_1=bad_q)
    rc, out, err = _run(["verify", path, "--lang", "c", "--reference", str(tmp_path / "bad.npz")], capsys)
    assert rc == 1 and "worst at [3, 0, 1]" in out, out
    np.savez(tmp_path / "short.npz", a=a, b=b, p=np.stack(p))
    rc, out, err = _run(["verify", path, "--lang", "c", "--reference", str(tmp_path / "short.npz")], capsys)
    assert rc == 2 and "no array named 'q'" in err and len(err.strip().splitlines()) == 1
    np.savez(tmp_path / "shape.npz", a=a[:, :, :2], b=b, p=np.stack(p), q=np.stack(q))
    rc, out, err = _run(["verify", path, "--lang", "c", "--reference", str(tmp_path / "shape.npz")], capsys)
    assert rc == 2 and "shape (5, 1, 2) fits neither" in err


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_reference_npz_from_pytorch(tmp_path, capsys, dynamo):
    """Verify against PyTorch's own outputs, for both of torch's exporters."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).eval()
    path = str(tmp_path / "net.onnx")
    kwargs = {"dynamo": dynamo, "input_names": ["x"], "output_names": ["y"]}
    if not dynamo:
        kwargs["dynamic_axes"] = {"x": {0: "n"}}
    torch.onnx.export(net, (torch.zeros(1, 4),), path, **kwargs)
    x = torch.rand(7, 4) * 2 - 1
    with torch.no_grad():
        y = net(x)
    np.savez(tmp_path / "torch.npz", x=x.numpy(), y=y.numpy())
    rc, out, err = _run(["verify", path, "--reference", str(tmp_path / "torch.npz")], capsys)
    assert rc == 0 and "(7 cases)" in out, out + err


def test_cast_between_float_types_rounds(tmp_path, capsys):
    """A run-time float64 -> float32 Cast in double-precision code was an alias that skipped the
    rounding; now it rounds (ops/layout.py). A widening Cast is exact. Both verify."""
    d, f = TensorProto.DOUBLE, TensorProto.FLOAT

    def cast_model(name, src, dst):
        nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Cast", ["t"], ["y"], to=dst)]
        return _save(tmp_path, name, nodes, [helper.make_tensor_value_info("x", src, [1, 3])],
                     [helper.make_tensor_value_info("y", dst, [1, 3])])

    rc, out, err = _run(["verify", cast_model("narrow", d, f), "--lang", "c", "--cases", "4"], capsys)
    assert rc == 0, out + err
    rc, out, err = _run(["verify", cast_model("widen", f, d), "--lang", "c", "--cases", "4"], capsys)
    assert rc == 0, out + err


def test_killed_verify_removes_its_folder(model, tmp_path):
    """SIGTERM (a batch system's kill, a killed test run) unwinds like Ctrl-C: the folder goes."""
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "rosenna", "verify", model("gemm_big"), "--cases", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not list(tmp_path.glob("rosenna-verify-*/*.c")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "verify ended before it could be killed"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err, err
    assert not list(tmp_path.glob("rosenna-verify-*")), err


def test_verify_foreign_target_builds_for_this_host(model, capsys):
    """verify runs what it builds: --target for a CPU this host cannot run (another family) is
    built for this host with a note (it was compiled with -mcpu=neoverse-v2 by an x86 gcc, which
    failed; a same-family newer target would have run foreign instructions here); a target the
    host descends from keeps its flags, without the note."""
    import archspec.cpu

    from rosenna.cli import main

    host = archspec.cpu.host()
    if host.family.name != "x86_64":
        pytest.skip("the foreign target below is chosen for an x86_64 host")
    rc = main(["verify", model("gemm_small"), "--lang", "c", "--cases", "2", "--target", "neoverse_v2"])
    out, err = capsys.readouterr()
    assert rc == 0 and "PASS" in out, (out, err)
    assert f"--target neoverse_v2: this host ({host.name}) cannot run code built for it" in err
    rc = main(["verify", model("gemm_small"), "--lang", "c", "--cases", "2", "--target", "x86_64_v2"])
    out, err = capsys.readouterr()
    assert rc == 0 and "cannot run" not in err, err
