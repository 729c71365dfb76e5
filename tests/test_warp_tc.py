"""The tensor-core warp body of <name>_infer_warp for staged MLPs (rosenna/emit/cuda/routine.py,
rosenna/data/rosenna_tc_routine.cuh) without a GPU: a lane-by-lane emulation of the generated body
(the layer calls as emitted: fragment and bias offsets, k8 / n8 tiles, groups of n8 tiles, 16-row
tiles per pass) against the model in float64, in both of the tuning's routine_layout forms (the wide
kernel's fragments gathered, or a paired copy of the body's own) with bit-identical results; the
gather's own C++ (rosenna_tc_b) run on the host over both layouts; the parked layer's own C++
(groups, parking, the C-to-A fragment reorder) run on the host with the tensor-core sums replaced
by labelled values; and ptxas's report for the body inlined into a kernel."""

import re
import shutil
import subprocess

import numpy as np
import pytest

from mlp_reference import ODD, act_of, custom_model, evaluate, mma3
from rosenna import zoo
from rosenna.emit import cuda
from rosenna.emit.cuda import routine, tc_chain, tc_wide, tf32
from rosenna.generate import Options, build_plan, generate
from rosenna.strategy import Tuning, analyse

CALL = re.compile(r"rosenna_tc_layer(?:_parked|_local)?<(\d+), (\d+), (?:(\d+), )?rt_act(\d+), (\d+), (?:true|false), "
                  r"(true|false)(?:, (true|false), (\d+)(?:, (true|false))?)?>\(F \+ (\d+), bias \+ (\d+), (\w+), (\w+)\)")
#: The groups of a CALL match, by name.
FIELDS = ("kt", "nt", "ng", "act", "mt", "compact", "gather", "ldt", "weight", "foff", "boff", "src", "dst")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """model -> (plan, layers, the warp body's text, directory) for mlp128 and the odd-width MLP
    (file-loaded), for mlp128 with the other fragment format (``mlp128-other``), the odd MLP with the
    other local-sums choice (``odd-other``), both with the other routine_layout (``-paired``,
    or ``-wide`` where the default is paired), and mlp128 reading the wide kernel's compact fragments
    that hold the weights themselves (``mlp128-weight``: wide_compact_from=1, compact_fragments
    "weight"), and mlp128 whose wide kernel reads the paired k order (``mlp128-kpaired``:
    wide_k_order "paired", the body reading that kernel's fragments as they are; ``-weight``: its
    compact fragments that hold the weights)."""
    tmp = tmp_path_factory.mktemp("warp_tc")
    out = {}
    default = Tuning()
    other = "paired" if default.routine_layout == "wide" else "wide"
    weight = {"wide_compact_from": 1, "compact_fragments": "weight"}
    for name, compact, local, layout, more in (
            ("mlp128", default.warp_compact, default.warp_local_sums, default.routine_layout, {}),
            ("odd", default.warp_compact, default.warp_local_sums, default.routine_layout, {}),
            ("mlp128-other", not default.warp_compact, default.warp_local_sums, default.routine_layout, {}),
            ("odd-other", default.warp_compact, 0 if default.warp_local_sums else 64, default.routine_layout, {}),
            (f"mlp128-{other}", default.warp_compact, default.warp_local_sums, other, {}),
            (f"odd-{other}", default.warp_compact, default.warp_local_sums, other, {}),
            ("mlp128-weight", default.warp_compact, default.warp_local_sums, "wide", weight),
            ("mlp128-kpaired", default.warp_compact, default.warp_local_sums, default.routine_layout,
             {"wide_k_order": "paired"}),
            ("mlp128-kpaired-weight", default.warp_compact, default.warp_local_sums, default.routine_layout,
             {"wide_k_order": "paired", **weight})):
        model = name.split("-")[0]
        path = zoo.save(model, str(tmp / f"{model}.onnx")) if model == "mlp128" else custom_model(tmp, model, *ODD)
        _, plan = build_plan(path, Options(lang="c", embed=False))
        tuning = default.replace(warp_compact=compact, warp_local_sums=local, routine_layout=layout, **more)
        generate(path, str(tmp / name), Options(lang="c", embed=False, tuning=tuning))
        src = (tmp / name / f"{plan.name}_kernel.cu").read_text()
        start = src.index(f"void {plan.name}_infer_warp_body")
        out[name] = (plan, analyse(plan).layers, src[start:src.index("#else", start)], tmp / name)
    for model in ("mlp128", "odd"):  # by layout, whichever is the default
        out[f"{model}-{default.routine_layout}"] = out[model]
    return out


def calls_of(body):
    """The layer calls of a generated warp body, each a dict of :data:`FIELDS`."""
    return [dict(zip(FIELDS, call)) for call in CALL.findall(body)]


def packed_for(body, layers):
    """The copy the generated warp body reads: the wide kernel's <name>_tc_packed (16-byte or
    compact hidden fragments), or the paired packing of tc_chain.py, in the form the calls read."""
    calls = calls_of(body)
    form = "weight" if any(c["weight"] == "true" for c in calls) else "sum"
    compact = calls[0]["compact"] == "true"
    if "_tc_packed" in re.search(r"const float \*bias = (\w+)\.v ", body).group(1):
        order = "fragment" if calls[1]["gather"] == "true" else "paired"
        return tc_wide.wide_packed(layers, Tuning(wide_compact_from=1 if compact else 1 << 20, compact_fragments=form,
                                                  wide_k_order=order))
    return tc_chain.chain_packed(layers, compact, form)


def fetch(packed, call, tile):
    """A B fragment as rosenna_tc_b reads it for the layer ``call`` (:func:`calls_of`) from the
    copy ``packed`` (flat, float32), for the 32 lanes ([32, 4], float32: as the tensor cores see
    the numbers): 16-byte or compact (split as rosenna_tcw_b, or rosenna_tcw_w for WEIGHT), read
    as the lane's own or gathered into paired rows; ``tile`` = kt * LDT + nt."""
    lane = np.arange(32)
    compact, form = call["compact"] == "true", "weight" if call["weight"] == "true" else "sum"
    unit = 2 if compact else 4  # floats per lane and tile; F's offsets are in float4
    base = 4 * int(call["foff"]) // unit + tile * 32
    if call["gather"] == "true":
        q, c = base + (lane & ~3) + 2 * (lane & 1), lane >> 1 & 1
        if compact:
            return tf32.unpack_compact(np.stack([packed[2 * q + c], packed[2 * q + 2 + c]], axis=1), form)
        p = 4 * q + c
        return np.stack([packed[p], packed[p + 4], packed[p + 2], packed[p + 6]], axis=1)
    own = np.stack([packed[unit * (base + lane) + s] for s in range(unit)], axis=1)
    return tf32.unpack_compact(own, form) if compact else own


def emulate(body, layers, packed, x):
    """The generated warp body for one warp's 32 points (x [32, nx]), lane by lane, float64 sums of
    the TF32-split products (mma3), each layer as rosenna_tc_layer(_parked) computes it."""
    calls = calls_of(body)
    assert len(calls) == len(layers), body
    passes = int(re.search(r"for \(int pass = 0; pass < (\d+);", body).group(1)) if "int pass" in body else 1
    bias_at = int(re.search(r"const float \*bias = \w+_(?:rchain|tc_packed)\.v \+ (\d+);", body).group(1))
    packed = np.asarray(packed, np.float32)
    bias = packed[bias_at:].astype(np.float64)
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    nx, ny = x.shape[1], layers[-1].n
    y = np.full((32, ny), np.nan)
    for p in range(passes):
        mt = int(calls[0]["mt"])
        rows = [16 * (p + mi) + gid for mi in range(mt)]
        kt0 = int(calls[0]["kt"])
        # Each buffer by name: [row tile][k8 tile] -> [32 lanes, 4] A fragments (registers h<i>, or the
        # local act0 / act1 that hold the same values as [k8 tile][row tile] float4s).
        bufs = {"h0": [[np.stack([np.where(kt * 8 + tig + 4 * (s // 2) < nx,
                                           x[r + 8 * (s % 2), np.minimum(kt * 8 + tig + 4 * (s // 2), nx - 1)], 0.0)
                                  for s in range(4)], axis=1) for kt in range(kt0)] for r in rows]}
        stored = dict((m.group(1), m.group(2)) for m in re.finditer(r"(act0)\[kt\]\[mi\] = make_float4\((h\d+)\[", body))
        for i, call in enumerate(calls):
            src, dst = call["src"], call["dst"]
            h = bufs[src] if src in bufs else bufs[stored[src]]
            kt_n, nt_n, boff = int(call["kt"]), int(call["nt"]), int(call["boff"])
            ldt = int(call["ldt"]) if call["ldt"] else nt_n
            ng = int(call["ng"]) if call["ng"] else nt_n
            assert (int(call["act"]), int(call["mt"])) == (i, mt) and nt_n % ng == 0 and len(h[0]) == kt_n
            act = act_of(layers[i])
            out = [[None] * nt_n for _ in range(mt)]
            for g in range(nt_n // ng):  # the groups, in order; parked or not, a group's outputs land at g*NG + nt
                for nt in range(g * ng, g * ng + ng):
                    b0, b1 = bias[boff + nt * 8 + 2 * tig], bias[boff + nt * 8 + 2 * tig + 1]
                    for mi in range(mt):
                        acc = np.stack([b0, b1, b0, b1], axis=1)
                        for k0 in range(0, kt_n, 2):
                            t = sum(mma3(h[mi][kt], fetch(packed, call, kt * ldt + nt).astype(np.float64))
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


@pytest.mark.parametrize("name", ["mlp128", "odd", "mlp128-other", "odd-other", "mlp128-paired", "odd-paired",
                                  "mlp128-weight", "mlp128-kpaired", "mlp128-kpaired-weight"])
def test_emulated_warp_body_matches_the_model(generated, name):
    """Every form: inputs in registers with parked groups, or in local memory (odd-other is the
    one the default warp_local_sums does not pick), 16-byte and compact fragments, the wide
    kernel's fragments gathered (16-byte, or compact ones holding the weights) or a paired copy."""
    plan, layers, body, _ = generated[name]
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert routine._warp_kind(choice) == "parked" and re.search(r"rosenna_tc_layer_(parked|local)<", body)
    packed = packed_for(body, layers)
    x = np.random.default_rng(5).uniform(-1, 1, size=(32, plan.nx))
    want = evaluate(layers, x)
    np.testing.assert_allclose(emulate(body, layers, packed, x), want, rtol=2e-6, atol=1e-6)
    # It can fail: layer 1's fragment offset one n8 tile off (what a wrong group offset would read).
    shifted = re.sub(r"(rosenna_tc_layer_(?:parked|local)<[^>]*>\(F \+ )(\d+)",
                     lambda m: m.group(1) + str(int(m.group(2)) + 32), body, count=1)
    assert not np.allclose(emulate(shifted, layers, packed, x), want, atol=1e-3)


@pytest.mark.parametrize("wide,paired", [("mlp128-wide", "mlp128-paired"), ("odd-wide", "odd-paired"),
                                         ("mlp128-weight", "mlp128-paired"), ("mlp128-kpaired", "mlp128-paired"),
                                         ("mlp128-kpaired-weight", "mlp128-paired")])
def test_wide_layout_gives_the_paired_bits(generated, wide, paired):
    """routine_layout "wide" (the wide kernel's <name>_tc_packed, gathered; mlp128-weight: its
    compact fragments that hold the weights, split in the body) and "paired" (the body's own
    <name>_rchain): every layer call reads the same four numbers per lane and tile, bit for bit, so
    the tensor cores see the same operands and the 32 points come out bit-identical. mlp128-kpaired:
    the wide kernel's fragments in the paired k order, read as they are (no gather). The odd MLP
    (5-100-120-3) has layers narrower than the wide kernel's padded width (k8 rows 16 n8 tiles apart
    where the layer has 13 or 15, a padded k8 tile the body does not read)."""
    _, layers, body_w, _ = generated[wide]
    _, _, body_p, _ = generated[paired]
    assert "_tc_packed" in body_w and "_rchain" in body_p and "_rchain" not in body_w
    got_w, got_p = packed_for(body_w, layers), packed_for(body_p, layers)
    bias_w = int(re.search(r"const float \*bias = \w+\.v \+ (\d+);", body_w).group(1))
    bias_p = int(re.search(r"const float \*bias = \w+\.v \+ (\d+);", body_p).group(1))
    calls_w, calls_p = calls_of(body_w), calls_of(body_p)
    assert len(calls_w) == len(calls_p) == len(layers)
    for i, (cw, cp) in enumerate(zip(calls_w, calls_p)):
        assert [cw[k] for k in ("kt", "nt", "ng", "act", "mt")] == [cp[k] for k in ("kt", "nt", "ng", "act", "mt")]
        gathered = i > 0 and "kpaired" not in wide  # (layer 0: x's natural order)
        assert cw["gather"] == str(gathered).lower() and not cp["gather"]
        kt_n, nt_n, ldt = int(cw["kt"]), int(cw["nt"]), int(cw["ldt"])
        for kt in range(kt_n):
            for nt in range(nt_n):
                a, b = fetch(got_w, cw, kt * ldt + nt), fetch(got_p, cp, kt * nt_n + nt)
                assert a.view(np.uint32).tolist() == b.view(np.uint32).tolist(), (cw, kt, nt)
        n = 8 * nt_n
        assert np.array_equal(got_w[bias_w + int(cw["boff"]):][:n].view(np.uint32),
                              got_p[bias_p + int(cp["boff"]):][:n].view(np.uint32))
    x = np.random.default_rng(9).uniform(-1, 1, size=(32, layers[0].k))
    assert np.array_equal(emulate(body_w, layers, got_w, x), emulate(body_p, layers, got_p, x))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_fragment_gather_in_cpp_reads_the_paired_fragment(generated, tmp_path):
    """rosenna_tc_b (and the splits rosenna_tcw_b, rosenna_tcw_w), as rosenna/data/rosenna_tf32.cuh
    spells them, compiled by g++ and run for every lane and tile of the odd MLP's and mlp128's
    layers after the first (whose A fragments are in the natural order, in both packings): GATHER
    over the wide kernel's packing, 16-byte or compact holding the weights (WEIGHT), gives the
    paired packing's fragment bit for bit (as the tensor cores read it: the low 13 bits dropped);
    a gather that forgets the lane pairs does not."""
    from rosenna.emit import fixed

    text = fixed.load("rosenna_tf32.cuh")
    start = text.index("/* A compact fragment (rosenna/emit/cuda/tf32.py compact")
    device = text[start:text.index("\n}\n", text.index("__device__ __forceinline__ float4 rosenna_tc_b(")) + 3]
    weight = Tuning(wide_compact_from=1, compact_fragments="weight")
    cases = []
    for model in ("mlp128", "odd"):
        layers = generated[model][1]
        pairs = tc_chain.chain_offsets(layers)[0]
        for tuning, args in ((Tuning(), "true, false, true, false"), (weight, "true, true, true, true")):
            wide = tc_wide.WideLayout(layers, tuning)
            strides = [wide.shape.width // 8] * (len(layers) - 1) + [1]
            frags = [f * wide.shape.stage4 for f in wide.first] + [wide.out_frag4]
            places = [(frags[i], pairs[i], tf32.tiles(layer.k), tf32.tiles(layer.n), strides[i])
                      for i, layer in enumerate(layers[:-1]) if i]  # (the output layer: 16-byte in both forms)
            cases.append((model, args, tc_wide.wide_packed(layers, tuning), tc_chain.chain_packed(layers), places))
    entries = []
    for c, (model, args, wide_packed, chain_packed, places) in enumerate(cases):
        (tmp_path / f"w{c}.bin").write_bytes(wide_packed.tobytes())
        (tmp_path / f"p{c}.bin").write_bytes(chain_packed.tobytes())
        rows = ", ".join("{%d, %d, %d, %d, %d}" % place for place in places)
        entries.append(f"    count<{args}>(\"w{c}.bin\", \"p{c}.bin\", {{{rows}}});")
    for broken in (False, True):
        src = device.replace("2 * (l & 1)", "0") if broken else device
        (tmp_path / "t.cpp").write_text(f"""#include <array>
#include <cstdio>
#include <cstring>
#include <vector>
#define __device__
#define __forceinline__ inline
struct float4 {{ float x, y, z, w; }};
struct float2 {{ float x, y; }};
static float4 make_float4(float a, float b, float c, float d) {{ return {{a, b, c, d}}; }}
static float2 make_float2(float a, float b) {{ return {{a, b}}; }}
static unsigned __float_as_uint(float f) {{ unsigned u; memcpy(&u, &f, 4); return u; }}
static float __uint_as_float(unsigned u) {{ float f; memcpy(&f, &u, 4); return f; }}
template <class T> static T __ldg(const T *p) {{ return *p; }}
{src}
static std::vector<float4> load(const char *name)
{{
    FILE *f = fopen(name, "rb");
    std::vector<float4> v(1 << 20);
    v.resize(fread(v.data(), sizeof(float), 4 << 20, f) / 4 + 1);
    fclose(f);
    return v;
}}
static bool same_tf32(const float4 &a, const float4 &b)  /* what the tensor cores read of each */
{{
    unsigned u[4], v[4];
    memcpy(u, &a, 16);
    memcpy(v, &b, 16);
    for (int i = 0; i < 4; ++i)
        if ((u[i] & 0xffffe000u) != (v[i] & 0xffffe000u))
            return false;
    return true;
}}
/* Per layer {{wide fragments, paired fragments, k8 tiles, n8 tiles, the wide rows' n8 tiles}}. */
template <bool LDG, bool COMPACT, bool GATHER, bool WEIGHT>
static void count(const char *wide_file, const char *paired_file, const std::vector<std::array<int, 5>> &places)
{{
    const std::vector<float4> wide = load(wide_file), paired = load(paired_file);
    long same = 0, all = 0;
    for (const auto &pl : places)
        for (int kt = 0; kt < pl[2]; ++kt)
            for (int nt = 0; nt < pl[3]; ++nt)
                for (unsigned lane = 0; lane < 32; ++lane) {{
                    const float4 a = rosenna_tc_b<LDG, COMPACT, GATHER, WEIGHT>(wide.data() + pl[0], kt * pl[4] + nt, lane);
                    const float4 b = rosenna_tc_b<true, false, false>(paired.data() + pl[1], kt * pl[3] + nt, lane);
                    same += same_tf32(a, b);
                    ++all;
                }}
    printf("%ld %ld\\n", same, all);
}}
int main()
{{
{chr(10).join(entries)}
}}
""")
        subprocess.run(["g++", "-O1", "-std=c++17", "-Wall", "-Wextra", "-o", "t", "t.cpp"], cwd=tmp_path, check=True)
        out = subprocess.run(["./t"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(out) == len(cases)
        for (model, args, *_), line in zip(cases, out):
            same, total = map(int, line.split())
            assert total > 0 and (same < total if broken else same == total), (model, args, broken, same, total)


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
template <bool LDG, bool COMPACT, bool GATHER, bool WEIGHT> static float4 rosenna_tc_b(const float4 *, int, unsigned) {{ return {{}}; }}
static void rosenna_mma3(float (&)[4], const float (&)[4], const float4 &) {{}}
static int asked[64], calls;
template <int KT, int NT, int NG, int MT, bool LDG, bool COMPACT, bool GATHER, int LDT, bool WEIGHT>
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
