"""``--freeze NAME=FILE.npy``: a graph input (weights a PyTorch module takes as arguments) made a
constant from a .npy file, in ``rosenna generate`` / ``verify`` and in the library
(``Options(freeze=...)``); every bad use is one line, exit status 2, nothing written."""

import os
import warnings

import numpy as np
import pytest

from rosenna.cli import main
from rosenna.errors import UsageError
from rosenna.generate import Options, build_plan
from rosenna.verify import verify

torch = pytest.importorskip("torch", reason="torch is not installed (make test installs torch==2.13.0)")


class WeightsAsInputs(torch.nn.Module):
    """A layer whose weight and bias are arguments, as functional or hypernetwork code writes it."""

    def forward(self, x, w, b):
        return torch.tanh(torch.nn.functional.linear(x, w, b)) * 2.0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("freeze")
    path = str(root / "weights_as_inputs.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(WeightsAsInputs(), (torch.zeros(1, 3), torch.zeros(4, 3), torch.zeros(4)), path,
                          input_names=["x", "w", "b"], output_names=["y"], dynamo=False)
    rng = np.random.default_rng(5)
    files = {}
    for name, array in (("w", rng.uniform(-1, 1, (4, 3))), ("b", rng.uniform(-1, 1, 4)),
                        ("w64", rng.uniform(-1, 1, (4, 3))), ("wshape", rng.uniform(-1, 1, (3, 4)))):
        files[name] = str(root / f"{name}.npy")
        np.save(files[name], array if name == "w64" else array.astype(np.float32))
    files["garbage"] = str(root / "garbage.npy")
    with open(files["garbage"], "wb") as fh:
        fh.write(b"not numpy at all")
    files["npz"] = str(root / "two.npz")
    np.savez(files["npz"], a=np.zeros(3), b=np.zeros(3))
    return path, files


def test_library_freezes_weights_and_verifies(exported, tmp_path):
    path, files = exported
    options = Options(freeze={"w": files["w"], "b": files["b"]})
    graph, plan = build_plan(path, options)
    assert graph.inputs == ["x"] and [s.name for s in plan.inputs] == ["x"]
    _, results = verify(path, options, cases=3, keep=str(tmp_path / "v"))
    assert results and all(r.passed for r in results), [(r.lang, r.abs_err) for r in results]


def test_without_freeze_the_weights_stay_run_time_inputs(exported):
    """The same model unfrozen: w and b are per-point inputs (the run-time Gemm/MatMul operand)."""
    path, _ = exported
    _, plan = build_plan(path, Options())
    assert [s.name for s in plan.inputs] == ["x", "w", "b"]


def test_cli_generate_and_verify(exported, tmp_path, capsys):
    path, files = exported
    out = tmp_path / "gen"
    assert main(["generate", path, "--freeze", f"w={files['w']}", "--freeze", f"b={files['b']}",
                 "--out", str(out)]) == 0
    header = (out / "weights_as_inputs.h").read_text()
    assert "#define WEIGHTS_AS_INPUTS_NX 3\n" in header  # x only: w and b are constants now
    assert main(["verify", path, "--freeze", f"w={files['w']}", "--freeze", f"b={files['b']}", "--cases", "2",
                 "--lang", "c"]) == 0
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--freeze", "w=MISSING"], "--freeze w=MISSING: no such file"),
    (["--freeze", "w=GARBAGE"], "not a .npy array file"),
    (["--freeze", "w=NPZ"], "an .npz archive, not one array"),
    (["--freeze", "w=W64"], "the array has dtype float64, the input is declared float32"),
    (["--freeze", "w=WSHAPE"], "the array has shape (3, 4), the input is declared (4, 3)"),
    (["--freeze", "weight=W"], "has no run-time input named 'weight' (its inputs: 'x', 'w', 'b')"),
    (["--freeze", "w=W", "--freeze", "w=W"], "--freeze w: given twice"),
    (["--freeze", "w"], "expected NAME=FILE.npy"),
])
def test_bad_freeze_is_one_line_exit_2_nothing_written(exported, tmp_path, capsys, args, message):
    path, files = exported
    subst = {"MISSING": str(tmp_path / "absent.npy"), "GARBAGE": files["garbage"], "NPZ": files["npz"],
             "W64": files["w64"], "WSHAPE": files["wshape"], "W": files["w"]}
    args = [a.split("=")[0] + "=" + subst.get(a.split("=")[1], a.split("=")[1]) if "=" in a else a for a in args]
    out = tmp_path / "out"
    rc = main(["generate", path, "--out", str(out)] + args)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message.replace("MISSING", str(tmp_path / "absent.npy")) in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    assert not out.exists() or not os.listdir(out)


def test_library_raises_usage_error(exported):
    path, files = exported
    with pytest.raises(UsageError, match="no run-time input named 'nope'"):
        build_plan(path, Options(freeze={"nope": files["w"]}))
