"""The CLI: bad input gives a clear error, exit status 2, no traceback, nothing written."""

import os
import subprocess
import sys

import pytest

from rosenna import outdir
from rosenna.cli import main


def run_cli(args, capsys):
    rc = main(args)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def assert_refused(rc, err, *needles):
    assert rc == 2, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_missing_file(tmp_path, capsys):
    rc, _, err = run_cli(["generate", str(tmp_path / "nope.onnx"), "--out", str(tmp_path / "o")], capsys)
    assert_refused(rc, err, "no such file")
    assert not (tmp_path / "o").exists() or not os.listdir(tmp_path / "o")


def test_directory_is_not_a_file(tmp_path, capsys):
    rc, _, err = run_cli(["generate", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert_refused(rc, err, "not a file")


def test_not_onnx(tmp_path, capsys):
    bad = tmp_path / "junk.onnx"
    bad.write_bytes(b"\x00\xffthis is not protobuf\x12\x34" * 10)
    out = tmp_path / "o"
    rc, _, err = run_cli(["generate", str(bad), "--out", str(out)], capsys)
    assert_refused(rc, err, "not an ONNX model")
    assert not out.exists() or not os.listdir(out)


def test_checker_failure(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    # A node reads a value nobody defines: the checker refuses it.
    graph = helper.make_graph([helper.make_node("Relu", ["ghost"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    rc, _, err = run_cli(["generate", str(path), "--out", str(tmp_path / "o")], capsys)
    assert_refused(rc, err, "ONNX checker rejects")


def test_unsupported_ops_listed_together(model, tmp_path, capsys):
    rc, _, err = run_cli(["generate", model("unsupported_ops"), "--out", str(tmp_path / "o")], capsys)
    assert_refused(rc, err, "'the_coin' (Bernoulli)", "'the_noise' (RandomUniformLike)", "docs/reference/operators.md")
    assert not (tmp_path / "o").exists() or not os.listdir(tmp_path / "o")


def test_gemm_broadcast_bias_is_spelled_out(model, tmp_path, capsys):
    """A bias of shape (1,) broadcast over the outputs (once refused) becomes MatMul + Add
    (rosenna.passes.runtime_gemm); tests/test_ops_science.py checks its numbers."""
    rc, out, err = run_cli(["generate", model("gemm_bias_broadcast"), "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    assert "MatMul" in (tmp_path / "o" / "gemm_bias_broadcast.c").read_text()


def test_non_float_input(model, tmp_path, capsys):
    """int64 inputs are held in the working float type (ir.HELD_DTYPES); a string input is refused."""
    import onnx
    from onnx import TensorProto, helper

    rc, _, err = run_cli(["info", model("int_input")], capsys)
    assert rc == 0, err
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "s",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, [1, 2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, str(tmp_path / "s.onnx"))
    rc, _, err = run_cli(["info", str(tmp_path / "s.onnx")], capsys)
    assert_refused(rc, err, "input 'x' has element type", "float32 or float64")


def test_symbolic_inner_dimension(model, tmp_path, capsys):
    rc, _, err = run_cli(["info", model("symbolic_inner")], capsys)
    assert_refused(rc, err, "input 'x'", "'F'", "--dim F=VALUE")
    rc, out, err = run_cli(["info", model("symbolic_inner"), "--dim", "F=5"], capsys)
    assert rc == 0, err
    assert "x[0:5]" in out
    rc, _, err = run_cli(["info", model("symbolic_inner"), "--dim", "F=5", "--dim", "G=5"], capsys)
    assert_refused(rc, err, "--dim G")
    rc, _, err = run_cli(["info", model("symbolic_inner"), "--dim", "F=x"], capsys)
    assert_refused(rc, err, "NAME=VALUE")


@pytest.mark.parametrize("name", ["9lives", "has-dash", "", "x" * 42, "ünï"])
def test_bad_names(model, tmp_path, capsys, name):
    rc, _, err = run_cli(["generate", model("gemm_small"), "--name", name, "--out", str(tmp_path / "o")], capsys)
    assert_refused(rc, err, "--name")
    assert not (tmp_path / "o").exists() or not os.listdir(tmp_path / "o")


def test_unwritable_out(model, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = run_cli(["generate", model("gemm_small"), "--out", str(blocker / "sub")], capsys)
    assert_refused(rc, err, "--out")


def test_generate_prints_every_file(model, tmp_path, capsys):
    rc, out, err = run_cli(["generate", model("gemm_big"), "--no-embed", "--name", "gb", "--out", str(tmp_path)], capsys)
    assert rc == 0, err
    listed = sorted(os.path.basename(p) for p in out.split())
    assert listed == sorted(["gb.c", "gb.h", "gb.mk", "gb.rwt", "gb_fortran.mk", "gb_kernel.cu", "gb_model.F90",
                             "rosenna_rt.h", "gbConfig.cmake", "gb.pc", "gb_fortran.pc", "fpm.toml"])
    # no staging directory left behind: beside the set only its manifest and the directory's lock
    assert sorted(os.listdir(tmp_path)) == sorted(listed + [".rosenna-gb.json", ".rosenna.lock"])


def test_lang_selects_files(model, tmp_path, capsys):
    rc, out, _ = run_cli(["generate", model("gemm_small"), "--lang", "fortran", "--out", str(tmp_path)], capsys)
    assert rc == 0
    visible = [f for f in os.listdir(tmp_path) if not f.startswith(".")]
    assert sorted(visible) == ["fpm.toml", "gemm_smallConfig.cmake", "gemm_small_fortran.mk", "gemm_small_fortran.pc",
                               "gemm_small_model.F90"]


def test_regeneration_is_byte_identical(model, tmp_path, capsys):
    for sub in ("a", "b"):
        assert main(["generate", model("gemm_big"), "--no-embed", "--out", str(tmp_path / sub)]) == 0
    capsys.readouterr()
    for fname in os.listdir(tmp_path / "a"):
        assert (tmp_path / "a" / fname).read_bytes() == (tmp_path / "b" / fname).read_bytes(), fname


def test_provenance_header(model, tmp_path):
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path)]) == 0
    for fname in os.listdir(tmp_path):
        if fname.startswith("."):  # the set's manifest and the directory's lock
            continue
        first = (tmp_path / fname).read_text().splitlines()[0]
        # files shared by the models of a folder (rosenna_rt.h, fpm.toml) belong to no one model
        assert "rosenna" in first and "sha256" in first or fname in outdir.SHARED_FILES, (fname, first)


def test_info_shows_slices_and_sizes(model, capsys):
    rc, out, _ = run_cli(["info", model("two_in_two_out")], capsys)
    assert rc == 0
    assert "x: a[0:3] b[3:5]" in out
    assert "y: p[0:4] q[4:6]" in out
    assert "parameters: 28" in out  # w1 12 + w2 8 + c 4 + w3 4
    assert "per-point scratch:" in out and "embedded" in out


def test_info_ops_list(capsys):
    rc, out, _ = run_cli(["info", "--ops"], capsys)
    assert rc == 0 and "Gemm" in out and "Shape" in out


@pytest.mark.parametrize("command", ["generate", "verify", "info", "zoo"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert command in capsys.readouterr().out


def test_python_dash_m(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rosenna", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("rosenna ")


def test_no_command_is_usage_error(capsys):
    assert main([]) == 2


def test_zoo_writes_a_checked_model_and_refuses_a_bad_path(tmp_path, capsys):
    import onnx

    assert main(["zoo", "mlp128", "-o", str(tmp_path / "m.onnx")]) == 0
    onnx.checker.check_model(onnx.load(str(tmp_path / "m.onnx")))
    (tmp_path / "file").write_text("x")
    rc, _, err = run_cli(["zoo", "gemm_small", "-o", str(tmp_path / "file" / "m.onnx")], capsys)
    assert_refused(rc, err, "cannot write")


def test_model_without_weights_is_embedded_even_with_no_embed(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "noweights.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    rc = main(["verify", str(path), "--no-embed", "--cases", "4", "--keep", str(tmp_path / "v")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "weights embedded" in out and not (tmp_path / "v" / "noweights.rwt").exists()


@pytest.mark.parametrize("argv,needle", [
    (["generate"], "the following arguments are required: MODEL.onnx"),
    (["generate", "m.onnx", "--bogus"], "unrecognized arguments: --bogus"),
    (["frob"], "invalid choice: 'frob'"),
    (["verify", "m.onnx", "--cases", "many"], "argument --cases: invalid int value: 'many'"),
    ([], "give a command: generate, verify"),
])
def test_argparse_errors_are_one_line_and_a_hint(argv, needle, capsys):
    """argparse printed its usage block, several lines, before the error."""
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 2, err
    assert needle in lines[0] and lines[0].startswith("rosenna") and "usage:" not in err
    assert lines[1].startswith("hint: rosenna") and lines[1].endswith("--help")
