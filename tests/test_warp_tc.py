"""The tensor-core warp body of <name>_infer_warp for staged MLPs (rosenna/emit/cuda/routine.py,
rosenna/data/rosenna_tc_routine.cuh) without a GPU: a lane-by-lane emulation of the generated body
(the layer calls as emitted: fragment and bias offsets, k8 / n8 tiles, groups of n8 tiles, 16-row
tiles per pass) against the model in float64; the parked layer's own C++ (groups, parking, the
C-to-A fragment reorder) run on the host with the tensor-core sums replaced by labelled values;
and ptxas's report for the body inlined into a kernel."""

import re
import shutil
import subprocess

import numpy as np
import pytest

from mlp_reference import ODD, act_of, custom_model, evaluate, mma3
from rosenna import zoo
from rosenna.emit import cuda
from rosenna.emit.cuda import routine, tc_chain, tf32
from rosenna.generate import Options, build_plan, generate
from rosenna.strategy import Tuning, analyse

CALL = re.compile(r"rosenna_tc_layer(?:_parked|_local)?<(\d+), (\d+), (?:(\d+), )?rt_act(\d+), (\d+), (?:true|false), "
                  r"(true|false)>\(F \+ (\d+), bias \+ (\d+), (\w+), (\w+)\)")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """model -> (plan, layers, the warp body's text, directory) for mlp128 and the odd-width MLP
    (file-loaded), and for mlp128 with the other fragment format (``mlp128-other``)."""
    tmp = tmp_path_factory.mktemp("warp_tc")
    out = {}
    default = Tuning()
    for name, compact, local in (("mlp128", default.warp_compact, default.warp_local_sums),
                                 ("odd", default.warp_compact, default.warp_local_sums),
                                 ("mlp128-other", not default.warp_compact, default.warp_local_sums),
                                 ("odd-other", default.warp_compact, 0 if default.warp_local_sums else 64)):
        model = name.split("-")[0]
        path = zoo.save(model, str(tmp / f"{model}.onnx")) if model == "mlp128" else custom_model(tmp, model, *ODD)
        _, plan = build_plan(path, Options(lang="c", embed=False))
        tuning = default.replace(warp_compact=compact, warp_local_sums=local)
        generate(path, str(tmp / name), Options(lang="c", embed=False, tuning=tuning))
        src = (tmp / name / f"{plan.name}_kernel.cu").read_text()
        start = src.index(f"void {plan.name}_infer_warp_body")
        out[name] = (plan, analyse(plan).layers, src[start:src.index("#else", start)], tmp / name)
    return out


def emulate(body, layers, packed, x):
    """The generated warp body for one warp's 32 points (x [32, nx]), lane by lane, float64 sums of
    the TF32-split products (mma3), each layer as rosenna_tc_layer(_parked) computes it."""
    calls = CALL.findall(body)
    assert len(calls) == len(layers), body
    passes = int(re.search(r"for \(int pass = 0; pass < (\d+);", body).group(1)) if "int pass" in body else 1
    bias_at = int(re.search(r"const float \*bias = \w+_rchain \+ (\d+);", body).group(1))
    compact = calls[0][5] == "true"
    if compact:  # the kernel's split of each 8-byte fragment (rosenna_tcw_b)
        pairs = packed[:bias_at].reshape(-1, 2)
        f4 = tf32.unpack_compact(pairs).astype(np.float64)
    else:
        f4 = packed[:bias_at].reshape(-1, 4).astype(np.float64)
    bias = packed[bias_at:].astype(np.float64)
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    nx, ny = x.shape[1], layers[-1].n
    y = np.full((32, ny), np.nan)
    for p in range(passes):
        mt = int(calls[0][4])
        rows = [16 * (p + mi) + gid for mi in range(mt)]
        kt0 = int(calls[0][0])
        # Each buffer by name: [row tile][k8 tile] -> [32 lanes, 4] A fragments (registers h<i>, or the
        # local act0 / act1 that hold the same values as [k8 tile][row tile] float4s).
        bufs = {"h0": [[np.stack([np.where(kt * 8 + tig + 4 * (s // 2) < nx,
                                           x[r + 8 * (s % 2), np.minimum(kt * 8 + tig + 4 * (s // 2), nx - 1)], 0.0)
                                  for s in range(4)], axis=1) for kt in range(kt0)] for r in rows]}
        stored = dict((m.group(1), m.group(2)) for m in re.finditer(r"(act0)\[kt\]\[mi\] = make_float4\((h\d+)\[", body))
        for i, (kt_n, nt_n, ng, act_i, mt_i, comp, foff, boff, src, dst) in enumerate(calls):
            h = bufs[src] if src in bufs else bufs[stored[src]]
            kt_n, nt_n, foff, boff = int(kt_n), int(nt_n), int(foff), int(boff)
            foff *= 2 if comp == "true" else 1  # float4 offsets; a compact tile's lane is half a float4
            ng = int(ng) if ng else nt_n
            assert (int(act_i), int(mt_i)) == (i, mt) and nt_n % ng == 0 and len(h[0]) == kt_n
            act = act_of(layers[i])
            out = [[None] * nt_n for _ in range(mt)]
            for g in range(nt_n // ng):  # the groups, in order; parked or not, a group's outputs land at g*NG + nt
                for nt in range(g * ng, g * ng + ng):
                    b0, b1 = bias[boff + nt * 8 + 2 * tig], bias[boff + nt * 8 + 2 * tig + 1]
                    for mi in range(mt):
                        acc = np.stack([b0, b1, b0, b1], axis=1)
                        for k0 in range(0, kt_n, 2):
                            t = sum(mma3(h[mi][kt], f4[foff + (kt * nt_n + nt) * 32 + lane])
                                    for kt in range(k0, min(k0 + 2, kt_n)))
                            acc = acc + t
                        out[mi][nt] = np.stack([act(acc[:, 0]), act(acc[:, 2]), act(acc[:, 1]), act(acc[:, 3])], axis=1)
            bufs[dst] = out
        last = f"h{len(layers)}"
        final = re.search(r"const float4 v = (act\d)\[nt\]\[mi\];", body)
        h = bufs[final.group(1)] if final else bufs[last]
        for mi, r in enumerate(rows):
            for nt in range(len(h[mi])):
                c = nt * 8 + 2 * tig
                for s, (rr, cc) in enumerate([(r, c), (r + 8, c), (r, c + 1), (r + 8, c + 1)]):
                    ok = cc < ny
                    y[rr[ok], cc[ok]] = h[mi][nt][ok, s]
    return y


@pytest.mark.parametrize("name", ["mlp128", "odd", "mlp128-other", "odd-other"])
def test_emulated_warp_body_matches_the_model(generated, name):
    """Every form: inputs in registers with parked groups, or in local memory (odd-other is the
    one the default warp_local_sums does not pick), 16-byte and compact fragments."""
    plan, layers, body, _ = generated[name]
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert routine._warp_kind(choice) == "parked" and re.search(r"rosenna_tc_layer_(parked|local)<", body)
    packed = tc_chain.chain_packed(layers, compact=CALL.findall(body)[0][5] == "true")
    x = np.random.default_rng(5).uniform(-1, 1, size=(32, plan.nx))
    want = evaluate(layers, x)
    np.testing.assert_allclose(emulate(body, layers, packed, x), want, rtol=2e-6, atol=1e-6)
    # It can fail: layer 1's fragment offset one n8 tile off (what a wrong group offset would read).
    shifted = re.sub(r"(rosenna_tc_layer_(?:parked|local)<[^>]*>\(F \+ )(\d+)",
                     lambda m: m.group(1) + str(int(m.group(2)) + 32), body, count=1)
    assert not np.allclose(emulate(shifted, layers, packed, x), want, atol=1e-3)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("kt,nt,ng,mt", [(16, 16, 4, 2), (16, 16, 8, 1), (13, 15, 5, 2), (2, 13, 1, 1)])
def test_parked_layer_puts_every_group_where_the_next_layer_reads_it(tmp_path, kt, nt, ng, mt):
    """rosenna_tc_layer_parked compiled by g++ with rosenna_tc_sums replaced by labelled sums
    (1000 mi + 10 n8 tile + fragment slot): every group is asked for once, in order, and out[mi][j]
    is n8 tile j's C fragment reordered into an A fragment (c0, c2, c1, c3) and activated."""
    from rosenna.emit import fixed

    (tmp_path / "rosenna_tc_routine.cuh").write_text(fixed.load("rosenna_tc_routine.cuh"))
    (tmp_path / "t.cpp").write_text(f"""#include <cstdio>
#define __device__
#define __forceinline__ inline
struct float4 {{ float x, y, z, w; }};
struct float2 {{ float x, y; }};
static float4 make_float4(float a, float b, float c, float d) {{ return {{a, b, c, d}}; }}
/* What the file's other templates name (not instantiated here). */
template <class T> static T __ldg(const T *p) {{ return *p; }}
static float4 rosenna_tcw_b(float2 w) {{ return {{w.x, w.y, 0.0f, 0.0f}}; }}
static void rosenna_mma3(float (&)[4], const float (&)[4], const float4 &) {{}}
static int asked[64], calls;
template <int KT, int NT, int NG, int MT, bool LDG, bool COMPACT>
void rosenna_tc_sums(const float4 *, const float *, const float (&)[MT][KT][4], int nt0, float (&acc)[MT][NG][4])
{{
    asked[calls++] = nt0;
    for (int mi = 0; mi < MT; ++mi)
        for (int j = 0; j < NG; ++j)
            for (int r = 0; r < 4; ++r)
                acc[mi][j][r] = 1000.0f * mi + 10.0f * (nt0 + j) + r;
}}
static float act(float v) {{ return v + 0.5f; }}
#include "rosenna_tc_routine.cuh"
int main()
{{
    static float in[{mt}][{kt}][4], out[{mt}][{nt}][4];
    rosenna_tc_layer_parked<{kt}, {nt}, {ng}, act, {mt}, true, false>(nullptr, nullptr, in, out);
    for (int i = 0; i < calls; ++i)
        printf("%d ", asked[i]);
    printf("\\n");
    for (int mi = 0; mi < {mt}; ++mi)
        for (int j = 0; j < {nt}; ++j)
            printf("%g %g %g %g\\n", out[mi][j][0], out[mi][j][1], out[mi][j][2], out[mi][j][3]);
}}
""")
    subprocess.run(["g++", "-O1", "-std=c++17", "-o", "t", "t.cpp"], cwd=tmp_path, check=True)
    lines = subprocess.run(["./t"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.splitlines()
    assert [int(v) for v in lines[0].split()] == list(range(0, nt, ng))
    got = np.array([[float(v) for v in line.split()] for line in lines[1:]])
    want = np.array([[1000 * mi + 10 * j + r + 0.5 for r in (0, 2, 1, 3)] for mi in range(mt) for j in range(nt)])
    np.testing.assert_array_equal(got, want)


def test_groups_fit_the_register_budget(generated):
    """Each layer's input and one group's sums within Tuning().warp_registers, the groups dividing
    the layer's n8 tiles; a layer whose input and sums all fit is not parked."""
    for name in ("mlp128", "odd"):
        _, layers, body, _ = generated[name]
        for call in re.finditer(r"rosenna_tc_layer(_parked|_local)?<", body):
            kt, nt, ng, _, mt, *_ = CALL.match(body, call.start()).groups()
            kt, nt, mt = int(kt), int(nt), int(mt)
            ng = int(ng) if ng else nt
            if call.group(1) == "_local":
                assert 4 * mt * ng <= Tuning().warp_local_sums or ng == 1
                continue
            assert 4 * mt * (kt + ng) <= Tuning().warp_registers or ng == 1
            assert nt % ng == 0 and (ng < nt) == (4 * mt * (kt + nt) > Tuning().warp_registers)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("compact", [False, True])
def test_warp_copy_host_packing_in_cpp_equals_numpy(generated, tmp_path, compact):
    """File-loaded models pack the warp body's copy at init (C++ in <name>_routine_upload), both
    fragment formats, bit for bit as numpy packs embedded ones."""
    from mlp_reference import run_packing

    _, layers, _, _ = generated["odd"]
    layout = tc_chain.ChainLayout(layers, compact)
    body = f"    float *tc = (float *)calloc({layout.size}, sizeof(float));\n" + layout.host_packing("tc")
    got = run_packing(tmp_path, layers, tf32.host_tf32(body), body, "tc", layout.size)
    want = layout.packed()
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.nvcc
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_warp_body_compiles_without_spilling_in_its_loops(generated):
    """mlp128's warp body inlined into a kernel (what ptxas allocates for it, without the ABI's
    callee-saved registers that the relocatable <name>_infer_warp saves once per call): at most a
    few registers' worth of spills (inputs in local memory, 32 sums: 106 registers, none; inputs in
    registers, 2-144-ldg: 255, 48 bytes; the 4-tile groups of 2-160-ldg spilled in the k loops and
    ran 18% slower, results/measurement-log.md, the warp-routine study)."""
    plan, _, _, out_dir = generated["mlp128"]
    src = out_dir / "probe.cu"
    src.write_text((out_dir / f"{plan.name}_kernel.cu").read_text() + f"""
__global__ void warp_probe(const float *x, float *y)
{{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    {plan.name}_infer_warp_body(x + i * {plan.nx}, y + i * {plan.ny});
}}
""")
    proc = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-DROSENNA_DEVICE_ROUTINE", "-Xptxas", "-v", "-c", str(src),
                           "-o", str(out_dir / "probe.o")], capture_output=True, text=True, cwd=out_dir, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"Compiling entry function '\w*warp_probe\w*'.*?(\d+) bytes spill stores.*?Used (\d+) registers",
                  proc.stderr, re.S)
    assert m, proc.stderr[-3000:]
    assert int(m.group(1)) <= 64 and int(m.group(2)) <= 255, m.group(0)
