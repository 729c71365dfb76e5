"""Run-time indices (issue 30, item 1) in C and Fortran, compiled in one batch: nn.Embedding and a
MeshGraphNets-style processor block (edge MLP on gathered node features, scatter-add to the nodes,
node MLP) on a fixed 2-D triangular mesh (20 nodes, 86 directed edges: more than
rosenna.ops.indexing.GATHER_NESTS_MAX, so constant edge lists are read as tables), from both
PyTorch exporters, with the edge lists as constants and as inputs, against onnxruntime; then
out-of-range indices, which onnxruntime refuses to run, against numpy: the elements they would
have filled are NaN, nothing else changes."""

import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import conformance

torch = pytest.importorskip("torch")

F, H = 3, 8


def mesh(nx=5, ny=4):
    """Sender and receiver lists of a triangulated nx x ny grid, both directions of every edge."""
    pairs = set()
    for i in range(nx - 1):
        for j in range(ny - 1):
            a, b, c, d = i * ny + j, (i + 1) * ny + j, i * ny + j + 1, (i + 1) * ny + j + 1
            for u, v in ((a, b), (a, c), (b, c), (b, d), (c, d)):
                pairs |= {(u, v), (v, u)}
    pairs = sorted(pairs)
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]), nx * ny


SENDERS, RECEIVERS, NODES = mesh()


def _mlp(i, o):
    return torch.nn.Sequential(torch.nn.Linear(i, H), torch.nn.ReLU(), torch.nn.Linear(H, o))


class Processor(torch.nn.Module):
    """One MeshGraphNets processor step: e = MLP(x_s, x_r, x_s - x_r); a = sum of e over each
    node's incoming edges; x + MLP(x, a)."""

    def __init__(self, const, scatter):
        super().__init__()
        self.edge, self.node = _mlp(3 * F, H), _mlp(F + H, F)
        self.const, self.scatter = const, scatter
        self.register_buffer("senders", torch.tensor(SENDERS))
        self.register_buffer("receivers", torch.tensor(RECEIVERS))

    def forward(self, x, send=None, recv=None):
        send, recv = (self.senders, self.receivers) if self.const else (send, recv)
        xs, xr = x[send], x[recv]
        e = self.edge(torch.cat([xs, xr, xs - xr], -1))
        zeros = torch.zeros(x.shape[0], H)
        agg = zeros.scatter_add(0, recv.unsqueeze(-1).expand(-1, H), e) if self.scatter else zeros.index_add(0, recv, e)
        return x + self.node(torch.cat([x, agg], -1))


class Embedded(torch.nn.Module):
    """A land-surface category through nn.Embedding, joined to continuous inputs."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(7, 4), torch.nn.Linear(4 + 3, 2)

    def forward(self, category, x):
        return self.head(torch.cat([self.embed(category), x], -1))


def _export(module, args, names, dynamo, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, path, dynamo=dynamo, input_names=names)
    return onnx.load(path)


def _torch_cases(tmp):
    torch.manual_seed(30)
    x = torch.randn(NODES, F)
    edges = (torch.tensor(SENDERS), torch.tensor(RECEIVERS))
    category = torch.tensor([[3, 0, 6, 3]])
    cont = torch.randn(1, 4, 3)
    out = {}
    for dynamo in (False, True):
        tag = "dynamo" if dynamo else "legacy"
        out[f"embedding_{tag}"] = (_export(Embedded(), (category, cont), ["category", "x"], dynamo,
                                           os.path.join(tmp, f"e{tag}.onnx")), [category.numpy(), cont.numpy()])
        for const in (True, False):
            kind = "constant_edges" if const else "input_edges"
            args = (x,) if const else (x, *edges)
            names = ["x"] + ([] if const else ["send", "recv"])
            feeds = [a.numpy() for a in args]
            out[f"processor_{kind}_scatter_add_{tag}"] = (
                _export(Processor(const, True), args, names, dynamo, os.path.join(tmp, f"p{kind}{tag}.onnx")), feeds)
            if dynamo:  # the legacy exporter refuses index_add with repeated indices
                out[f"processor_{kind}_index_add_{tag}"] = (
                    _export(Processor(const, False), args, names, dynamo, os.path.join(tmp, f"q{kind}{tag}.onnx")),
                    feeds)
    return out


TORCH_CASES = [f"embedding_{t}" for t in ("legacy", "dynamo")] + [
    f"processor_{k}_scatter_add_{t}" for k in ("constant_edges", "input_edges") for t in ("legacy", "dynamo")] + [
    f"processor_{k}_index_add_dynamo" for k in ("constant_edges", "input_edges")]


def _graph(nodes, inputs, outputs, consts):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


DATA = np.arange(15, dtype=np.float32).reshape(5, 3) / 4 - 1
I64 = TensorProto.INT64


def _out_of_range():
    """Gather, GatherElements, GatherND, ScatterElements (add) and ScatterND (max) fed indices of
    which some are outside their axis, with the outputs rosenna promises (numpy, NaN marked)."""
    model = _graph(
        [helper.make_node("Gather", ["data", "rows"], ["g"], axis=0),
         helper.make_node("GatherElements", ["data", "cols"], ["ge"], axis=1),
         helper.make_node("GatherND", ["data", "pairs"], ["gn"]),
         helper.make_node("ScatterElements", ["zeros", "targets", "upd"], ["se"], axis=0, reduction="add"),
         helper.make_node("ScatterND", ["data", "slots", "rowupd"], ["sn"], reduction="max"),
         helper.make_node("Gather", ["data", "grid"], ["g1"], axis=1)],
        [("rows", I64, [4]), ("cols", I64, [5, 2]), ("pairs", I64, [3, 2]), ("targets", I64, [4, 3]),
         ("upd", TensorProto.FLOAT, [4, 3]), ("slots", I64, [2, 1]), ("rowupd", TensorProto.FLOAT, [2, 3]),
         ("grid", I64, [2, 2])],
        [("g", [4, 3]), ("ge", [5, 2]), ("gn", [3]), ("se", [5, 3]), ("sn", [5, 3]), ("g1", [5, 2, 2])],
        {"data": DATA, "zeros": np.zeros((5, 3), np.float32)})
    rows = np.array([1, -1, 5, 2])
    cols = np.array([[0, 2], [-3, 3], [1, 1], [2, -4], [0, 0]])
    pairs = np.array([[4, 2], [0, 3], [-5, -1]])
    targets_ok = np.array([[0, 4, 4], [1, 0, 2], [0, 0, 0], [3, 3, 3]])
    upd = np.arange(12, dtype=np.float32).reshape(4, 3) + 0.5
    slots = np.array([[-2], [7]])  # the second is out of range: every element of sn is NaN
    rowupd = np.full((2, 3), 100.0, np.float32)
    g = np.full((4, 3), np.nan, np.float32)
    g[[0, 1, 3]] = DATA[[1, 4, 2]]
    ge = np.full((5, 2), np.nan, np.float32)
    for i in range(5):
        for j in range(2):
            if -3 <= cols[i, j] < 3:
                ge[i, j] = DATA[i, cols[i, j]]
    gn = np.array([DATA[4, 2], np.nan, DATA[0, 2]], np.float32)
    se = np.zeros((5, 3), np.float32)
    for i in range(4):
        for j in range(3):
            se[targets_ok[i, j], j] += upd[i, j]
    sn = np.full((5, 3), np.nan, np.float32)
    grid = np.array([[2, -1], [3, -3]])  # axis 1 of extent 3: the 3 is out of range
    g1 = np.take(DATA, np.where(grid == 3, 0, grid), axis=1)
    g1[:, 1, 0] = np.nan
    feeds = [rows, cols, pairs, targets_ok, upd, slots, rowupd, grid]
    cases = {"out_of_range": (model, feeds, [g, ge, gn, se, sn, g1])}
    targets_bad = targets_ok.copy()
    targets_bad[2, 1] = -6
    cases["scatter_add_out_of_range"] = (model, [rows, cols, pairs, targets_bad, upd, slots, rowupd, grid],
                                         [g, ge, gn, np.full((5, 3), np.nan, np.float32), sn, g1])
    return cases


def write_case(root, name, proto, feeds, outputs=None):
    path = os.path.join(root, name)
    data = os.path.join(path, "test_data_set_0")
    os.makedirs(data)
    onnx.save(proto, os.path.join(path, "model.onnx"))
    names = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    if outputs is None:
        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        outputs = sess.run(None, dict(zip(names, feeds)))
    for j, (input_name, array) in enumerate(zip(names, feeds)):
        with open(os.path.join(data, f"input_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(np.asarray(array), input_name).SerializeToString())
    for j, value in enumerate(outputs):
        with open(os.path.join(data, f"output_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(np.asarray(value), f"out{j}").SerializeToString())
    return conformance.Case(name, name, path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _torch_cases(str(tmp_path_factory.mktemp("exported")))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, exported):
    root = tmp_path_factory.mktemp("graph")
    cases = [write_case(str(root / "cases"), name, proto, feeds) for name, (proto, feeds) in exported.items()]
    cases += [write_case(str(root / "cases"), name, proto, feeds, outputs)
              for name, (proto, feeds, outputs) in _out_of_range().items()]
    return {o.case.name: o for o in conformance.run(cases, str(root / "work"), rtol=1e-5, atol=1e-5)}


@pytest.mark.parametrize("name", TORCH_CASES + ["out_of_range", "scatter_add_out_of_range"])
def test_run_time_indices(outcomes, name):
    o = outcomes[name]
    assert (o.status, o.variant) == ("passed", "as given"), f"{name}: {o.status}: {o.detail}"


def test_a_long_constant_edge_list_is_one_table_not_one_nest_per_edge(tmp_path, exported):
    from rosenna import generate as gen
    from rosenna.loopir import Comment, walk
    from rosenna.ops.indexing import GATHER_NESTS_MAX

    assert len(SENDERS) > GATHER_NESTS_MAX
    path = str(tmp_path / "p.onnx")
    onnx.save(exported["processor_constant_edges_scatter_add_legacy"][0], path)
    plan = gen.build_plan(path, gen.Options())[1]
    gathers = [s for s in walk(plan.body) if isinstance(s, Comment) and s.text.startswith("Gather")]
    assert len(gathers) == 2 and len(list(walk(plan.body))) < 200


def test_exporters_emit_the_index_ops_under_test(exported):
    """The cases above meet the ops they claim: Gather and ScatterElements from the legacy
    exporter, GatherND and ScatterND from the dynamo one."""
    ops = {name: {n.op_type for n in proto.graph.node} for name, (proto, _) in exported.items()}
    assert {"Gather", "ScatterElements"} <= ops["processor_input_edges_scatter_add_legacy"]
    assert {"GatherND", "ScatterND"} <= ops["processor_input_edges_index_add_dynamo"]
    assert "Gather" in ops["embedding_legacy"] | ops["embedding_dynamo"]


C_BATCH = r"""#include <stdio.h>
#include <stdlib.h>
#include "idx.h"

int main(int argc, char **argv)
{
    int n = atoi(argv[1]);
    float *x = malloc(sizeof(float) * (size_t)n * IDX_NX), *y = malloc(sizeof(float) * (size_t)n * IDX_NY);
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof(float), (size_t)n * IDX_NX, f) != (size_t)n * IDX_NX) return 3;
    fclose(f);
    int status = idx_infer_batch(n, x, y, NULL);
    fwrite(&status, sizeof(int), 1, stdout);
    fwrite(y, sizeof(float), (size_t)n * IDX_NY, stdout);
    (void)argc;
    return 0;
}
"""

F_BATCH = """program main
  use, intrinsic :: iso_fortran_env, only: output_unit
  use idx_model
  implicit none
  integer :: n, unit, status
  character(len=4096) :: arg
  real(idx_rk), allocatable :: x(:, :), y(:, :)
  call get_command_argument(1, arg)
  read (arg, *) n
  allocate (x(idx_nx, n), y(idx_ny, n))
  call get_command_argument(2, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='old', action='read')
  read (unit) x
  close (unit)
  call idx_infer_batch(n, x, y, status)
  open (newunit=unit, file='/dev/stdout', access='stream', form='unformatted', action='write')
  write (unit) status, y
  close (unit)
end program main
"""


@pytest.fixture(scope="module")
def batch_programs(tmp_path_factory):
    """The host batch of a Gather + ScatterElements(add) model with run-time indices, built in C
    and Fortran: {lang: executable}."""
    import subprocess

    from rosenna.generate import Options, generate

    work = tmp_path_factory.mktemp("batch")
    model = _graph([helper.make_node("Gather", ["data", "rows"], ["g"], axis=0),
                    helper.make_node("ScatterElements", ["zeros", "targets", "upd"], ["se"], axis=0, reduction="add")],
                   [("rows", I64, [2]), ("targets", I64, [2, 3]), ("upd", TensorProto.FLOAT, [2, 3])],
                   [("g", [2, 3]), ("se", [5, 3])], {"data": DATA, "zeros": np.zeros((5, 3), np.float32)})
    onnx.save(model, str(work / "idx.onnx"))
    generate(str(work / "idx.onnx"), str(work), Options(lang="both", name="idx", embed=True))
    (work / "main.c").write_text(C_BATCH)
    (work / "main.f90").write_text(F_BATCH)
    subprocess.run(["gcc", "-O2", "-fopenmp", "main.c", "idx.c", "-lm", "-o", "c_batch"], cwd=work, check=True)
    subprocess.run(["gfortran", "-O2", "-fopenmp", "idx_model.F90", "main.f90", "-o", "f_batch"], cwd=work, check=True)
    return work, {"c": work / "c_batch", "fortran": work / "f_batch"}


def _points(bad=None, count=40):
    """``count`` points of (rows, targets, upd); point ``bad`` gets a row index past the data."""
    rng = np.random.default_rng(7)
    rows = rng.integers(-5, 5, (count, 2))
    targets = rng.integers(-5, 5, (count, 2, 3))
    upd = rng.normal(size=(count, 2, 3))
    if bad is not None:
        rows[bad, 1] = 5
    x = np.concatenate([rows, targets.reshape(count, -1), upd.reshape(count, -1)], axis=1).astype(np.float32)
    g = DATA[rows % 5]
    se = np.zeros((count, 5, 3), np.float32)
    for p in range(count):
        for i in range(2):
            for j in range(3):
                se[p, targets[p, i, j] % 5, j] += upd[p, i, j]
    if bad is not None:
        g[bad, 1] = np.nan
    return x, np.concatenate([g.reshape(count, -1), se.reshape(count, -1)], axis=1)


@pytest.mark.parametrize("lang", ["c", "fortran"])
@pytest.mark.parametrize("bad", [None, 37])
def test_batch_returns_the_index_status(batch_programs, lang, bad):
    """40 points (a partial block): with every index in range the status is OK and the outputs
    exact; with one point's index past its axis the status is INDEX (rosenna.abi), that point's
    gathered row NaN, every other output exact."""
    import subprocess

    from rosenna import abi

    work, programs = batch_programs
    x, want = _points(bad)
    x.tofile(work / f"x{bad}.bin")
    out = subprocess.run([str(programs[lang]), "40", str(work / f"x{bad}.bin")], capture_output=True, check=True).stdout
    status = int(np.frombuffer(out[:4], np.int32)[0])
    got = np.frombuffer(out[4:], np.float32).reshape(40, -1)
    assert status == (abi.STATUS["OK"] if bad is None else abi.STATUS["INDEX"])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
