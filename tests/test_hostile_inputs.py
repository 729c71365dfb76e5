"""Small hostile inputs (issue 29, item 4): names that would drive a terminal, a negative dimension,
FIFOs and devices where a file is expected. (A FIFO or device as the .rwt path, and a path with a
trailing blank, are cases of tests/fuzz_rwt.py run by tests/test_weights_file.py in C and Fortran.)"""

import os
import signal

import onnx
import pytest
from onnx import TensorProto, helper

from rosenna.cli import main

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\u202e"


def _cli(argv, capsys):
    """Run ``argv`` in-process, failing (not hanging) if it takes more than 20 s: a FIFO opened for
    reading would block forever."""
    def timeout(signum, frame):
        raise TimeoutError(f"{argv} blocked")
    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    try:
        rc = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    return rc, out, err


def _relu(path, name="x", shape=(1, 3)):
    nodes = [helper.make_node("Relu", [name], ["y"], name="relu" + ESCAPES)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _no_controls(text):
    return not any(ord(c) < 32 and c != "\n" or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e for c in text)


def test_info_and_errors_print_no_control_characters(tmp_path, capsys):
    path = _relu(tmp_path / "m.onnx", name="in" + ESCAPES)
    rc, out, err = _cli(["info", path], capsys)
    assert rc == 0 and _no_controls(out) and "\\x1b]0;pwned\\x07" in out, ascii(out)
    bad = _relu(tmp_path / "neg.onnx", name="in" + ESCAPES, shape=(1, -3))
    rc, out, err = _cli(["generate", bad, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and _no_controls(err) and len(err.strip().splitlines()) == 1, ascii(err)
    assert "negative dimension -3 at axis 1" in err, err


def test_fifos_and_devices_are_named_not_opened(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    model = _relu(tmp_path / "m.onnx")
    for argv, words in (
            (["generate", str(fifo), "--out", str(tmp_path / "o")], "a FIFO (named pipe)"),
            (["generate", os.devnull, "--out", str(tmp_path / "o")], "a character device"),
            (["generate", model, "--freeze", f"x={fifo}", "--out", str(tmp_path / "o")], "a FIFO (named pipe)"),
            (["generate", model, "--freeze", "x=/dev/zero", "--out", str(tmp_path / "o")], "a character device"),
            (["verify", model, "--lang", "c", "--reference", str(fifo)], "a FIFO (named pipe)"),
            (["verify", model, "--lang", "c", "--reference", "/dev/zero"], "a character device")):
        rc, _, err = _cli(argv, capsys)
        assert rc == 2 and words in err and "no such file" not in err and len(err.strip().splitlines()) == 1, \
            (argv, err)
    assert _cli(["generate", model, "--out", str(tmp_path / "o")], capsys)[0] == 0
