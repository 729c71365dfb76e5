"""Every loop nest of the generated C and Fortran files has a comment right above it (past its
directives and the start of its sum): a nest of the model's ops names the node(s) it computes,
their op and the shapes (rosenna/emit/notes.py); the loops of the library around them say what
they do. Names from the model reach those comments sanitized only."""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import op_models
from rosenna import zoo
from rosenna.emit.notes import _axis_text
from rosenna.generate import Options, generate
from rosenna.quoting import comment_text

_C_LOOP = re.compile(r"^\s*for \(")
_F_LOOP = re.compile(r"^\s*do (\w+ = |concurrent)", re.I)
#: A scalar set before the loop it belongs to (``acc = 0.0f;``): the comment sits above it.
_C_START = re.compile(r"^\s*\w+(\[\d+\])? = [^;]*;$")
_F_START = re.compile(r"^\s*\w+(\(\d+\))? = [^!]*$")


def nests(text, fortran):
    """``[(line number, the comment above the nest or None)]`` for every outermost loop."""
    lines = text.split("\n")
    loop, start = (_F_LOOP, _F_START) if fortran else (_C_LOOP, _C_START)
    directive = ("!$", "#") if fortran else ("#",)
    comment = (lambda s: s.startswith("!") and not s.startswith("!$")) if fortran else \
        (lambda s: s.startswith("/*") and s.endswith("*/"))

    def indent(line):
        return len(line) - len(line.lstrip())

    out = []
    for i, line in enumerate(lines):
        if not loop.match(line):
            continue
        level, j, nested = indent(line), i - 1, False
        while j >= 0 and level > 0 and not nested:  # the lines that enclose it: is one a loop?
            s = lines[j].strip()
            if s and not s.startswith(directive) and not comment(s) and indent(lines[j]) < level:
                level, nested = indent(lines[j]), bool(loop.match(lines[j]))
            j -= 1
        if nested:
            continue
        j = i - 1
        while j >= 0 and (not lines[j].strip() or lines[j].strip().startswith(directive) or start.match(lines[j])):
            j -= 1
        above = lines[j].strip() if j >= 0 else ""
        out.append((i + 1, above if comment(above) else None))
    return out


def _evil_chain(path):
    """A Gemm and a pointwise chain whose node names end comments, open them and break lines."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "W */"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b\n! x"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("Gemm", ["x", "W */", "b\n! x"], ["h */"], name="dense */ /* \n!$omp \"x\"", transB=1),
             helper.make_node("Tanh", ["h */"], ["t\n"], name="tanh\n*/ &"),
             helper.make_node("Mul", ["t\n", "two"], ["y"], name="scale ' \\")]
    graph = helper.make_graph(nodes, "evil", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path), [n.name for n in nodes]


def _models(tmp):
    """``{name: (model path, node names)}``: a conv net, an MLP, an LSTM, hostile names."""
    def names(path):
        return [n.name for n in onnx.load(path).graph.node]
    out = {}
    path = str(tmp / "convnet.onnx")
    op_models.convnet(path, height=16, width=16)
    out["convnet"] = path
    path = str(tmp / "mlp.onnx")
    zoo.save("gemm_big", path)
    out["mlp"] = path
    path = str(tmp / "lstm.onnx")
    op_models.lstm_sequence(path, steps=4)
    out["lstm"] = path
    out = {k: (v, names(v)) for k, v in out.items()}
    out["evil"] = _evil_chain(tmp / "evil.onnx")
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Each model's C and Fortran files (both embedded; the LSTM with file-loaded weights too)."""
    tmp = tmp_path_factory.mktemp("loop_comments")
    out = {}
    for name, (path, nodes) in _models(tmp).items():
        for embed in (True, False) if name == "lstm" else (True,):
            folder = tmp / f"{name}_{embed}"
            generate(path, str(folder), Options(name="mdl", embed=embed))
            out[(name, embed)] = (nodes, (folder / "mdl.c").read_text(), (folder / "mdl_model.F90").read_text())
    return out


@pytest.mark.parametrize("lang", ["c", "fortran"])
@pytest.mark.parametrize("name", ["convnet", "mlp", "lstm", "evil"])
def test_every_loop_nest_has_a_comment(generated, name, lang):
    for (model, _), (nodes, c_text, f_text) in generated.items():
        if model != name:
            continue
        text = f_text if lang == "fortran" else c_text
        found = nests(text, lang == "fortran")
        bare = [line for line, above in found if above is None]
        assert found and not bare, f"{name} {lang}: {len(bare)} of {len(found)} loop nests have no comment, " \
                                   f"at lines {bare[:10]}"
        # each node's sanitized name is over some nest, and a nest of an op names node, op and shapes
        for node in nodes:
            assert any(comment_text(node) in above for _, above in found), f"{name} {lang}: node {node!r} named nowhere"
        ops = [above for _, above in found if " -> " in above]
        assert len(ops) >= len(nodes) - 1 and all(re.search(r"\(\w+(\+\w+)*\) [\dx, ]+ -> [\dx, ]+: ", a) for a in ops)


def test_hostile_names_reach_comments_inert(generated):
    """``*/``, ``/*``, newlines, ``!`` and quotes of node and value names never reach a comment."""
    nodes, c_text, f_text = generated[("evil", True)]
    code = re.sub(r"/\*.*?\*/", "", c_text, flags=re.S)
    assert "*/" not in code and "/*" not in code
    for line in c_text.split("\n"):
        if line.lstrip().startswith("/*") and line.rstrip().endswith("*/"):
            assert line.count("/*") == 1 and line.count("*/") == 1, line
    for line in f_text.split("\n"):
        if line.lstrip().startswith("!") and any(comment_text(node) in line for node in nodes):
            assert not {"!", "&", '"', "'", "$"} & set(line.lstrip()[1:]), line
    assert all('"x"' not in text and "!$omp \"" not in text for text in (c_text, f_text))
    assert sum(comment_text(node) in c_text for node in nodes) == len(nodes)


def test_a_conv_nest_says_which_elements_it_stores(generated):
    """A padded 3x3 conv is nine nests: corners, edges and interior, each named by its rows and
    columns of the output."""
    _, c_text, _ = generated[("convnet", True)]
    point = c_text[c_text.index("void mdl_infer("):]
    point = point[:point.index("\n}\n")]
    regions = re.findall(r"/\* conv0\+act0 \(Conv\+Relu\) 1x2x16x16 -> 1x8x16x16: a0\[(.*)\] \*/", point)
    assert sorted(regions) == sorted(f"0, 0:8, {r}, {c}" for r in ("0", "1:15", "15") for c in ("0", "1:15", "15"))


def test_axis_text():
    assert [_axis_text(s) for s in ({3}, range(1, 63), range(0, 8, 2), {0, 5, 9}, set(range(0, 40, 3)) | {1})] == \
        ["3", "1:63", "0:8:2", "{0, 5, 9}", "15 of 0..39"]
