"""Run-time indices (issue 30, item 1) in C and Fortran, compiled in one batch: nn.Embedding and a
MeshGraphNets-style processor block (edge MLP on gathered node features, scatter-add to the nodes,
node MLP) on a fixed 2-D triangular mesh (20 nodes, 86 directed edges: more than
rosenna.ops.indexing.GATHER_NESTS_MAX, so constant edge lists are read as tables), from both
PyTorch exporters, with the edge lists as constants and as inputs, against onnxruntime; then
out-of-range indices, which onnxruntime refuses to run, against numpy: the elements they would
have filled are NaN, nothing else changes."""

import os
import shutil
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


#: The C batch with its OpenMP-offload branch taken: libgomp runs the target region on the host.
C_OFFLOAD = """#include "rosenna_rt.h"
#undef ROSENNA_OMP_DEVICE
#define ROSENNA_OMP_DEVICE() 1
#include "idx.c"
""" + C_BATCH

#: What the CUDA/HIP kernel file needs to run on the host, compiled as C++: its launches become
#: loops over blocks and threads (in order), its symbol copies memcpy, each counted.
CUDA_HOST = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct rosenna_index { unsigned x; };
static rosenna_index blockIdx, threadIdx;
static int transfers, waits;
#define __global__
#define __device__
#define __launch_bounds__(threads)
#define ROSENNA_CONSTANT_MEMORY const
#define ROSENNA_GLOBAL_MEMORY const
typedef void *rosennaStream_t;
enum { rosennaSuccess, rosennaMemcpyHostToDevice, rosennaMemcpyDeviceToHost };
static int rosennaGetLastError(void) { return rosennaSuccess; }
static int rosennaStreamSynchronize(rosennaStream_t) { ++waits; return rosennaSuccess; }
template <class T> static int rosennaMemcpyFromSymbolAsync(void *to, const T &symbol, size_t size, size_t at, int, rosennaStream_t)
{ memcpy(to, (const char *)&symbol + at, size); ++transfers; return rosennaSuccess; }
template <class T> static int rosennaMemcpyToSymbolAsync(T &symbol, const void *from, size_t size, size_t at, int, rosennaStream_t)
{ memcpy((char *)&symbol + at, from, size); ++transfers; return rosennaSuccess; }
#define ROSENNA_LAUNCH(kernel, blocks, threads, ...) \
    for (blockIdx.x = 0; blockIdx.x < (blocks); ++blockIdx.x) \
        for (threadIdx.x = 0; threadIdx.x < (threads); ++threadIdx.x) kernel(__VA_ARGS__)
#include "idx_kernel_host.cu"
#include "idx.h"

int main(int argc, char **argv)
{
    int n = atoi(argv[1]);
    float *x = (float *)malloc(sizeof(float) * (size_t)n * IDX_NX), *y = (float *)malloc(sizeof(float) * (size_t)n * IDX_NY);
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof(float), (size_t)n * IDX_NX, f) != (size_t)n * IDX_NX) return 3;
    fclose(f);
    int status = idx_infer_batch(n, x, y, NULL);
    fwrite(&status, sizeof(int), 1, stdout);
    fwrite(y, sizeof(float), (size_t)n * IDX_NY, stdout);
    int counts[4] = {transfers, waits, 0, 0};
    counts[2] = idx_infer_batch(1, x, y, NULL); /* point 0 alone, a good one: the flag was cleared */
    counts[3] = transfers - counts[0];
    fwrite(counts, sizeof(int), 4, stdout);
    (void)argc;
    return 0;
}
"""


def _host_kernel(text):
    """The kernel file with each ``kernel<<<blocks, threads, 0, stream>>>(args)`` as ROSENNA_LAUNCH."""
    import re

    launch = re.compile(r"(\w+)<<<(.+?), (\d+), 0, \(rosennaStream_t\)stream>>>\((.*?)\);")
    assert launch.search(text), "no launch in the kernel file"
    return launch.sub(r"ROSENNA_LAUNCH(\1, \2, \3, \4);", text)


@pytest.fixture(scope="module")
def batch_programs(tmp_path_factory):
    """A Gather + ScatterElements(add) model with run-time indices, built as the host batch in C
    and Fortran, with the OpenMP-offload branch taken (GCC's host fallback runs the target
    region), and as the CUDA/HIP kernel file run on the host: {form: executable}."""
    import re
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
    (work / "offload.c").write_text(C_OFFLOAD)
    (work / "cuda.cpp").write_text(CUDA_HOST)
    (work / "idx_kernel_host.cu").write_text(_host_kernel((work / "idx_kernel.cu").read_text()))
    (work / "offload").mkdir()
    module = (work / "idx_model.F90").read_text()
    forced, taken = re.subn(r"!\$ on_device = .*", "on_device = .true.", module)
    assert taken == 1
    (work / "offload" / "idx_model.F90").write_text(forced)
    builds = [["gcc", "-O2", "-fopenmp", "main.c", "idx.c", "-lm", "-o", "c_batch"],
              ["gfortran", "-O2", "-fopenmp", "idx_model.F90", "main.f90", "-o", "f_batch"],
              ["gcc", "-O2", "-Wall", "-Werror", "-fopenmp", "offload.c", "-lm", "-o", "c_offload"],
              ["gfortran", "-O2", "-fopenmp", "-Joffload", "offload/idx_model.F90", "main.f90", "-o", "f_offload"],
              ["g++", "-O1", "-Wall", "-Wno-unknown-pragmas", "-Werror", "cuda.cpp", "-lm", "-o", "cuda_host"]]
    procs = [subprocess.Popen(cmd, cwd=work) for cmd in builds]
    assert [p.wait() for p in procs] == [0] * len(procs)
    return work, {"c": work / "c_batch", "fortran": work / "f_batch", "c_offload": work / "c_offload",
                  "fortran_offload": work / "f_offload", "cuda_host": work / "cuda_host"}


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


@pytest.mark.parametrize("lang", ["c", "fortran", "c_offload", "fortran_offload", "cuda_host"])
@pytest.mark.parametrize("bad", [None, 37])
def test_batch_returns_the_index_status(batch_programs, lang, bad):
    """40 points (a partial block): with every index in range the status is OK and the outputs
    exact; with one point's index past its axis the status is INDEX (rosenna.abi), that point's
    gathered row NaN, every other output exact. Host batch, the OpenMP-offload branch (C and
    Fortran) and the CUDA/HIP kernel file alike; the kernel's call brings back one int and waits
    once, and clears the flag (one more int) only when it was set: the next call is OK."""
    import subprocess

    from rosenna import abi

    work, programs = batch_programs
    x, want = _points(bad)
    x.tofile(work / f"x{bad}.bin")
    out = subprocess.run([str(programs[lang]), "40", str(work / f"x{bad}.bin")], capture_output=True, check=True).stdout
    status = int(np.frombuffer(out[:4], np.int32)[0])
    got = np.frombuffer(out[4:4 + want.nbytes], np.float32).reshape(40, -1)
    assert status == (abi.STATUS["OK"] if bad is None else abi.STATUS["INDEX"])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if lang == "cuda_host":
        transfers, waits, again, again_transfers = np.frombuffer(out[4 + want.nbytes:], np.int32)
        assert (transfers, waits) == ((1, 1) if bad is None else (2, 2))
        assert (again, again_transfers) == (abi.STATUS["OK"], 1)


@pytest.mark.nvcc
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_kernel_file_compiles_and_sets_the_flag_without_atomics(batch_programs):
    """nvcc compiles the kernel file clean; its PTX sets the fault flag with a plain store (no
    atomic that could reorder anything) and the batch waits on the caller's stream only."""
    import subprocess

    work, _ = batch_programs
    proc = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-Xcompiler", "-Wall", "-ptx", "idx_kernel.cu", "-o", "idx.ptx"],
                          cwd=work, capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    ptx = (work / "idx.ptx").read_text()
    assert "idx_index_faults" in ptx and "atom." not in ptx and "st.global.u32" in ptx
    text = (work / "idx_kernel.cu").read_text()
    assert "rosennaStreamSynchronize((rosennaStream_t)stream)" in text and "DeviceSynchronize" not in text


def test_infer_one_asked_for_a_plan_with_run_time_indices(tmp_path, capsys):
    """--infer-one on a gather with run-time indices gives <name>_infer_one (C and Fortran), with
    the INDEX status in its comment, and no note; `info` says the whole-field form is there."""
    from rosenna.cli import main

    model = _graph([helper.make_node("Gather", ["data", "rows"], ["g"], axis=0)], [("rows", I64, [2])],
                   [("g", [2, 3])], {"data": DATA})
    onnx.save(model, str(tmp_path / "gat.onnx"))
    assert main(["generate", str(tmp_path / "gat.onnx"), "--out", str(tmp_path / "out"), "--infer-one",
                 "--lang", "both"]) == 0
    assert "--infer-one" not in capsys.readouterr().err
    header = (tmp_path / "out" / "gat.h").read_text()
    assert "int gat_infer_one(" in header and "_INDEX when an index" in header
    assert "subroutine gat_infer_one(" in (tmp_path / "out" / "gat_model.F90").read_text()
    assert main(["info", str(tmp_path / "gat.onnx")]) == 0
    assert "run-time indices" in capsys.readouterr().out


# -- the whole-field form (<name>_infer_one) of plans with run-time indices ---------------------------
FIELD_C = r"""#include <stdio.h>
#include <stdlib.h>
#include "{n}.h"

int main(int argc, char **argv)
{{
    int n = atoi(argv[1]);
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX}), *y = malloc(sizeof({t}) * (size_t)n * {NY} * 2);
    int *status = malloc(sizeof(int) * (size_t)(n + 1));
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !status || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
    for (int i = 0; i < n; ++i)
        status[i] = {n}_infer_one(x + (size_t)i * {NX}, y + (size_t)i * {NY}, NULL);
    status[n] = {n}_infer_batch(n, x, y + (size_t)n * {NY}, NULL);
    fwrite(status, sizeof(int), (size_t)n + 1, stdout);
    fwrite(y, sizeof({t}), (size_t)n * {NY} * 2, stdout);
    (void)argc;
    return 0;
}}
"""

FIELD_F = """program main
  use, intrinsic :: iso_fortran_env, only: int32
  use {n}_model
  implicit none
  integer :: n, i, unit
  integer(int32), allocatable :: status(:)
  character(len=4096) :: arg
  real({n}_rk), allocatable :: x(:, :), y(:, :)
  call get_command_argument(1, arg)
  read (arg, *) n
  allocate (x({n}_nx, n), y({n}_ny, 2 * n), status(n + 1))
  call get_command_argument(2, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='old', action='read')
  read (unit) x
  close (unit)
  do i = 1, n
    call {n}_infer_one(x(:, i), y(:, i), status(i))
  end do
  call {n}_infer_batch(n, x, y(:, n + 1:), status(n + 1))
  open (newunit=unit, file='/dev/stdout', access='stream', form='unformatted', action='write')
  write (unit) status, y
  close (unit)
end program main
"""

#: How each form of the whole-field routines is built: (language of the harness, compiler flags).
#: The offload forms take their device branch (the macro forced), which GCC runs on the host.
FIELD_BUILDS = {
    "c": ("c", ["-fopenmp"]),
    "fortran": ("f", ["-fopenmp"]),
    "c_offload": ("c", ["-fopenmp", "-include", "field_offload.h"]),
    "fortran_offload": ("f", ["-fopenmp", "-DROSENNA_OMP_DEVICE=.true."]),
    "c_acc": ("c", ["-fopenacc", "-DROSENNA_ACC_DEVICE()=1"]),
    "fortran_acc": ("f", ["-fopenacc", "-DROSENNA_ACC_DEVICE=.true."]),
}

#: The C OpenMP device branch forced: rosenna_rt.h's macro replaced after it is read.
FIELD_OFFLOAD_H = """#include "rosenna_rt.h"
#undef ROSENNA_OMP_DEVICE
#define ROSENNA_OMP_DEVICE() 1
"""


def _field_model(name, exported):
    """(ONNX model, forms to build) of each model the whole-field tests run."""
    if name == "out_of_range":
        model = _graph([helper.make_node("Gather", ["data", "rows"], ["g"], axis=0),
                        helper.make_node("ScatterElements", ["zeros", "targets", "upd"], ["se"], axis=0,
                                         reduction="add")],
                       [("rows", I64, [2]), ("targets", I64, [2, 3]), ("upd", TensorProto.FLOAT, [2, 3])],
                       [("g", [2, 3]), ("se", [5, 3])], {"data": DATA, "zeros": np.zeros((5, 3), np.float32)})
        return model, list(FIELD_BUILDS)
    forms = ["c", "fortran", "c_offload", "fortran_offload"] if name.endswith("legacy") and "processor" in name \
        else ["c", "fortran"]
    return exported[name][0], forms


FIELD_MODELS = ["processor_input_edges_scatter_add_legacy", "processor_constant_edges_index_add_dynamo",
                "embedding_legacy", "embedding_dynamo", "out_of_range"]


@pytest.fixture(scope="module")
def field_programs(tmp_path_factory, exported):
    """Each of FIELD_MODELS generated with the whole-field path taken for the batch too
    (whole_threshold 0) and built in every form it names, warnings as errors, all compiles at
    once: {model: (plan, {form: executable})}."""
    import subprocess

    from rosenna.generate import Options, generate
    from rosenna.strategy import Tuning

    root = tmp_path_factory.mktemp("field")
    built, procs = {}, []
    for name in FIELD_MODELS:
        work = root / name
        work.mkdir()
        model, forms = _field_model(name, exported)
        onnx.save(model, str(work / "m.onnx"))
        plan, _ = generate(str(work / "m.onnx"), str(work), Options(lang="both", name="fld", embed=True,
                                                                   tuning=Tuning().replace(whole_threshold=0)))
        fmt = {"n": plan.name, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
        (work / "main.c").write_text(FIELD_C.format(**fmt))
        (work / "main.f90").write_text(FIELD_F.format(**fmt))
        (work / "field_offload.h").write_text(FIELD_OFFLOAD_H)
        built[name] = (plan, {})
        for form in forms:
            kind, flags = FIELD_BUILDS[form]
            (work / form).mkdir()
            sources = ["main.c", "fld.c", "-lm"] if kind == "c" else [f"-J{form}", "fld_model.F90", "main.f90"]
            strict = ["-Wextra", "-Wno-unknown-pragmas"] if kind == "c" else ["-std=f2008"]
            cmd = ["gcc" if kind == "c" else "gfortran", "-O1", "-Wall", "-Werror", *strict, *flags, *sources, "-o",
                   f"{form}/main"]
            procs.append((subprocess.Popen(cmd, cwd=work, stderr=subprocess.PIPE, text=True), name, form))
            built[name][1][form] = work / form / "main"
    for proc, name, form in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, f"{name} {form}: {err}"
    return root, built


def _run_field(program, plan, x):
    """(infer_one's statuses, infer_batch's status, infer_one's outputs, infer_batch's)."""
    import subprocess

    n = len(x)
    path = program.parent / "x.bin"
    x.astype(np.float32).tofile(path)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    out = subprocess.run([str(program), str(n), str(path)], capture_output=True, check=True, env=env).stdout
    status = np.frombuffer(out[:4 * (n + 1)], np.int32)
    y = np.frombuffer(out[4 * (n + 1):], np.float32).reshape(2, n, plan.ny)
    return status[:n], int(status[n]), y[0], y[1]


def _field_inputs(name, exported, plan):
    """Samples of x for the model ``name`` and onnxruntime's outputs for them (samples x ny). The
    processor with input edges gets the mesh's edges, then the same edges in another order, then
    random edges (repeated targets, nodes with none); the embeddings every category."""
    rng = np.random.default_rng(43)
    proto, feeds = exported[name]
    samples = []
    for k in range(3):
        sample = []
        for s, feed in zip(plan.inputs, feeds):
            value = np.asarray(feed)
            if value.dtype.kind == "i" and name.startswith("processor"):
                order = rng.permutation(len(SENDERS)) if k == 1 else None
                if k == 2:
                    value = rng.integers(0, NODES, value.shape)
                elif order is not None:
                    value = (SENDERS if s.name == "send" else RECEIVERS)[order]
            elif value.dtype.kind == "i":
                value = rng.integers(0, 7, value.shape)
            elif k:
                value = rng.normal(size=value.shape).astype(np.float32)
            sample.append(value.reshape(s.shape))
        samples.append(sample)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    want = [np.concatenate([np.asarray(v).reshape(-1) for v in sess.run(None, dict(zip(names, s)))]) for s in samples]
    x = np.stack([np.concatenate([np.asarray(v, np.float64).reshape(-1) for v in s]) for s in samples])
    return x, np.stack(want)


@pytest.mark.parametrize("name", FIELD_MODELS[:-1])
def test_whole_field_against_onnxruntime(field_programs, exported, name):
    """The MeshGraphNets block (edge lists as inputs and as constants; Gather + ScatterElements
    from the legacy exporter, GatherND + ScatterND from the dynamo one) and nn.Embedding from both
    exporters through <name>_infer_one and the whole-field <name>_infer_batch, on the host, in
    the OpenMP-offload device branch and in C and Fortran: equal to onnxruntime, status OK."""
    _, built = field_programs
    plan, programs = built[name]
    assert plan.has_infer_one and plan.path == "whole" and plan.runtime_indexed
    x, want = _field_inputs(name, exported, plan)
    for form, program in programs.items():
        status, batch, one, many = _run_field(program, plan, x)
        assert list(status) == [0] * len(x) and batch == 0, f"{name} {form}: statuses {list(status)}, {batch}"
        np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} {form}: infer_one")
        np.testing.assert_array_equal(many, one, err_msg=f"{name} {form}: infer_batch differs from infer_one")


def test_whole_field_out_of_range_gives_index(field_programs):
    """40 samples, the 38th with a gathered row past the data, the 4th with a scatter target past
    it: that sample's <name>_infer_one returns INDEX (rosenna.abi) with the elements it would
    have filled NaN (the scatter's whole output), every other sample OK and exact; the batch runs
    every sample and returns INDEX; the flag is cleared, so the next good call is OK. C and
    Fortran, host, OpenMP offload and OpenACC branches."""
    from rosenna import abi

    _, built = field_programs
    plan, programs = built["out_of_range"]
    x, want = _points(37)
    x[3, 2 + 4] = 5  # the 4th sample's scatter target (1, 1) is 5: outside the 5 rows
    want[3, 6:] = np.nan
    again = np.concatenate([x, x[:1]])  # the first sample again after the faults: OK
    want = np.concatenate([want, want[:1]])
    for form, program in programs.items():
        status, batch, one, many = _run_field(program, plan, again)
        expected = [abi.STATUS["INDEX"] if i in (3, 37) else abi.STATUS["OK"] for i in range(len(again))]
        assert list(status) == expected, f"{form}: {list(status)}"
        assert batch == abi.STATUS["INDEX"], form
        np.testing.assert_allclose(one, want, rtol=1e-6, atol=1e-6, err_msg=f"{form}: infer_one")
        np.testing.assert_allclose(many, want, rtol=1e-6, atol=1e-6, err_msg=f"{form}: infer_batch")


@pytest.mark.parametrize("persistent", [False, True])
def test_cuda_whole_field_emulated_on_host(tmp_path, exported, persistent):
    """The CUDA/HIP whole-field phases of the MeshGraphNets block with input edges (what each
    thread of each launch runs, tests/test_infer_one.py's emulation), the threads of every launch
    in order and in reverse: the same bits both ways (the scatter-add's columns never meet, each
    applies its updates in index order in one thread, whatever order the threads run), equal to
    onnxruntime; for the launched phases and the persistent kernel's."""
    from test_infer_one import emulate_launches

    name = "processor_input_edges_scatter_add_legacy"
    path = tmp_path / "m.onnx"
    onnx.save(exported[name][0], str(path))
    from rosenna.generate import Options, build_plan

    x, want = _field_inputs(name, exported, build_plan(str(path), Options())[1])
    plan, _, forwards, backwards = emulate_launches(str(path), tmp_path / "gen", persistent=persistent, x=x)
    np.testing.assert_array_equal(forwards, backwards)
    np.testing.assert_allclose(forwards, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiler", ["nvcc", "hipcc"])
def test_whole_field_kernel_file_compiles_clean(field_programs, compiler):
    """The kernel file of the whole-field path with run-time indices (the MeshGraphNets block, the
    out-of-range model) compiles with 0 warnings under nvcc and hipcc; its flags are set with plain
    stores (no atomic in the PTX of the launched phases) and read back by one copy per call."""
    import subprocess

    if not shutil.which(compiler):
        pytest.skip(f"{compiler} not installed")
    root, _ = field_programs
    for name in ("processor_input_edges_scatter_add_legacy", "out_of_range"):
        work = root / name
        cmd = (["nvcc", "-O3", "-arch=sm_90", "-Xcompiler", "-Wall,-Wextra", "-ptx", "fld_kernel.cu", "-o", "fld.ptx"]
               if compiler == "nvcc" else
               ["hipcc", "-O2", "-Wall", "-Wextra", "--offload-arch=gfx90a", "-x", "hip", "-c", "fld_kernel.cu", "-o",
                "fld_hip.o"])
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                              env=dict(os.environ, HIP_PLATFORM="amd"))
        assert proc.returncode == 0 and not proc.stderr.strip(), f"{name}: {proc.stderr}"
        text = (work / "fld_kernel.cu").read_text()
        assert text.count("rosennaMemcpyFromSymbolAsync(flags, fld_wsf") == 1
        if compiler == "nvcc":  # the phases' kernels (the persistent one's grid barrier is an atomic)
            phases = [entry for entry in (work / "fld.ptx").read_text().split(".entry")[1:] if "_phase" in entry[:80]]
            assert phases and not any("atom." in entry for entry in phases)


@pytest.mark.parametrize("case", ["elements_axis0", "elements_axis1", "nd_rows", "nd_elements"])
def test_scatter_columns_run_in_parallel_only_where_they_never_meet(tmp_path, case):
    """The whole-field form's scatter: parallel over the columns its updates never share (a thread
    per column walking the indices in order: rosenna.parallel._exclusive), one serial region where
    every update may reach any element (ScatterND of whole elements) or where the analysis cannot
    prove the columns apart (along another axis than the first: the offset's range is not known to it)."""
    from rosenna import parallel
    from rosenna.generate import Options, build_plan
    from rosenna.loopir import Loop, Ref, walk

    node, index, updates, columns = {
        "elements_axis0": (dict(axis=0), [4, 3], [4, 3], 3),
        "elements_axis1": (dict(axis=1), [5, 2], [5, 2], None),  # rows apart, but not provably: serial
        "nd_rows": ({}, [4, 1], [4, 3], 3),
        "nd_elements": ({}, [4, 2], [4], None)}[case]
    op = "ScatterND" if case.startswith("nd") else "ScatterElements"
    model = _graph([helper.make_node(op, ["data", "at", "upd"], ["out"], reduction="add", **node)],
                   [("at", I64, index), ("upd", TensorProto.FLOAT, updates)], [("out", [5, 3])], {"data": DATA})
    onnx.save(model, str(tmp_path / "s.onnx"))
    plan = build_plan(str(tmp_path / "s.onnx"), Options())[1]
    stores = [(kind, chain) for kind, chain, body in parallel.regions(plan.field_body) if kind != "comment"
              and any(isinstance(s, Loop) or (getattr(s, "target", None) is not None and isinstance(s.target, Ref)
                      and s.target.at is not None and s.target.buf == "out") for s in walk(body))
              and any(getattr(s, "target", None) is not None and isinstance(s.target, Ref) and s.target.buf == "out"
                      and s.target.at is not None for s in walk(body))]
    assert len(stores) == 1, stores
    kind, chain = stores[0]
    assert (kind, [loop.extent for loop in chain]) == (("parallel", [columns]) if columns else ("serial", []))
