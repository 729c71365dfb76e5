"""The 8-lane SIMD variant of ``<name>_infer`` for an MLP chain on an AVX-512 build: its outputs in
the vector lanes, its 8 points in registers.

The plan's form of the variant (emit/c.py's ``simd_variants``) puts the 8 points in the lanes of
one 256-bit vector per statement: each weight is broadcast and feeds one multiply-add of 8 lanes.
On an AVX-512 CPU the batch path's multiply-adds take 16 lanes each, so the variant did twice its
multiply-adds per point and ran 1.6-1.8x the batch path's time on mlp128 (the FMA units were
busy: 4,480 multiply-adds of 8 lanes per point). This form does the layer as the batch path's
arithmetic in 512-bit vectors over the outputs: per input k, a vector of 16 (float) or 8
(double) consecutive outputs' weights and each point's input k broadcast; 8 points x 2 vectors
of outputs = 16 accumulators (AVX-512 has 32 registers). The weights for it are a second copy,
input-major (``<name>_hpacked``: per layer W ``[K][NP]``, NP the layer's width rounded up to one
vector, zero-padded, then the bias ``[NP]``): embedded, or filled by ``<name>_init``,
``<name>_reload`` and ``<name>_set_weights`` from the weights they read.

Each output's sum is the plan's: from 0, over the inputs in order, each step rosenna_rt.h's
multiply-add (``_mm512_fmadd`` where ROSENNA_FMA_FAST, else a multiply and an add), then the
bias added and the layer's activation (its loop-IR expression, the same rosenna_rt.h exp and
tanh): so the variant's results equal the scalar routine's and the batch path's bit for bit
(tests/test_point_simd.py). Compiled only where the compiler targets AVX-512 (``__AVX512F__``);
elsewhere the plan's form.
"""

import numpy as np

from rosenna.emit.lang import C
from rosenna.loopir import Var

#: Fact of AVX-512: per precision, the vector type, the intrinsics' suffix, lanes per 64-byte vector.
VECTOR = {"single": ("__m512", "ps", 16), "double": ("__m512d", "pd", 8)}
#: Fact of the variant (its simdlen) and a register count, not timed: points, and vectors of outputs
#: per accumulator tile (8 x 2 = 16 of AVX-512's 32 registers).
POINTS, TILE = 8, 2
#: Where the form is compiled: a host compiler's pass for an AVX-512 x86-64 target (an offload
#: device's pass defines the host's macros too).
GUARD = ("#if defined(__x86_64__) && defined(__AVX512F__) && defined(__GNUC__) && !defined(__NVPTX__) "
         "&& !defined(__AMDGPU__) && !defined(__CUDACC__) && !defined(__HIPCC__)")


def _layout(plan, layers):
    """Per layer (weight offset, bias offset, NP), and the copy's size, in elements."""
    per = VECTOR[plan.precision][2]
    offsets, off = [], 0
    for layer in layers:
        npad = -(-layer.n // per) * per
        offsets.append((off, off + layer.k * npad, npad))
        off += layer.k * npad + npad
    return offsets, off


def name(plan):
    return C.symbol(plan.name, "hpacked")


def copy(plan, layers):
    """The input-major copy of the weights, under :data:`GUARD`: embedded, their values; loaded
    from a file, zeros until :func:`repack` fills it."""
    offsets, size = _layout(plan, layers)
    head = (f"{GUARD}\n#include <immintrin.h>\n\n"
            f"/* The weights again for the AVX-512 form of {plan.name}_infer_lanes8 (rosenna/emit/simd_mlp.py):\n"
            f"   per layer W input-major [K][N rounded up to {VECTOR[plan.precision][2]}], then the bias"
            f"{'' if plan.embed else f'; packed by {plan.name}_init'}. */\n")
    if not plan.embed:
        return head + f"static {plan.ctype} {name(plan)}[{size}] __attribute__((aligned(64)));\n#endif\n"
    dtype = np.float32 if plan.precision == "single" else np.float64
    out = np.zeros(size, dtype)
    for layer, (woff, boff, npad) in zip(layers, offsets):
        block = np.zeros((layer.k, npad), dtype)
        block[:, :layer.n] = layer.w.T
        out[woff:woff + block.size] = block.reshape(-1)
        out[boff:boff + layer.n] = layer.b
    lit = C.literals(out, plan.precision)
    rows = ",\n    ".join(", ".join(lit[i:i + 6]) for i in range(0, len(lit), 6))
    return head + f"static const {plan.ctype} {name(plan)}[{size}] __attribute__((aligned(64))) = {{\n    {rows}\n}};\n#endif\n"


def repack(plan, layers):
    """The reader's lines (``<name>_init``, ``_reload``, ``_set_weights``) that fill the copy from
    the weights just read, under :data:`GUARD` (the padding stays 0)."""
    offsets, _ = _layout(plan, layers)
    lines = [GUARD, f"    /* the AVX-512 SIMD variant's copy (rosenna/emit/simd_mlp.py) */"]
    for i, (layer, (woff, boff, npad)) in enumerate(zip(layers, offsets)):
        w, b = (C.symbol(plan.name, plan.weights[j].ident) for j in (layer.w_index, layer.b_index))
        lines += [f"    /* layer {i}: W transposed, {npad} columns a row; then its bias */",
                  f"    for (int k = 0; k < {layer.k}; ++k)",
                  f"        for (int o = 0; o < {layer.n}; ++o)",
                  f"            {name(plan)}[{woff} + k * {npad} + o] = {w}[o * {layer.k} + k];",
                  f"    for (int o = 0; o < {layer.n}; ++o)",
                  f"        {name(plan)}[{boff} + o] = {b}[o];"]
    return "\n".join(lines + ["#endif"]) + "\n"


def routine(plan, layers, renderer, routine_name):
    """``static void <routine_name>(x, y)``: 8 points, x and y point-major (under :data:`GUARD`)."""
    t = plan.ctype
    vec, sfx, per = VECTOR[plan.precision]
    offsets, _ = _layout(plan, layers)
    widest = max(npad for _, _, npad in offsets)
    w = name(plan)
    madd = (f"#if ROSENNA_FMA_FAST\n#define ROSENNA_VMADD(a, b, c) _mm512_fmadd_{sfx}(a, b, c)\n#else\n"
            f"#define ROSENNA_VMADD(a, b, c) _mm512_add_{sfx}(_mm512_mul_{sfx}(a, b), c)\n#endif")
    lines = [f"static void {routine_name}(const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y)", "{",
             f"    /* the sums of a layer and its outputs, {POINTS} points, a row of the layer's padded width each */",
             f"    {t} g[{POINTS * widest}] __attribute__((aligned(64)));"]
    if len(layers) > 1:  # the hidden layers' outputs, in turn
        lines.append(f"    {t} h[2][{POINTS * widest}] __attribute__((aligned(64)));")
    src, stride = "x", plan.nx
    for i, (layer, (woff, boff, npad)) in enumerate(zip(layers, offsets)):
        last = i == len(layers) - 1
        dst, dstride = ("y", plan.ny) if last else (f"h[{i % 2}]", npad)
        lines.append(f"    /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */")
        full = npad // (per * TILE) * per * TILE
        if full:
            lines += [f"    /* layer {i}: the sums of outputs 0..{full - 1}, {per * TILE} at a time, for the {POINTS} points */",
                      f"    for (int o = 0; o < {full}; o += {per * TILE}) {{",
                      *_tile(vec, sfx, per, TILE, f"{w} + {woff} + o", npad, src, stride, layer.k, "o", "        ")]
            lines.append("    }")
        if full < npad:  # one vector left
            lines += [f"    /* layer {i}: the sums of outputs {full}..{npad - 1} for the {POINTS} points */",
                      "    {", *_tile(vec, sfx, per, 1, f"{w} + {woff} + {full}", npad, src, stride, layer.k,
                                       str(full), "        "), "    }"]
        expr = layer.expr if layer.expr is not None else Var("v")
        # a hidden layer's padded columns too (whole vectors; the bias and sums there are 0 and the
        # next layer never reads them)
        lines += [f"    /* layer {i}: bias{' and ' + layer.act if layer.act else ''}, each point's outputs */",
                  f"    for (int p = 0; p < {POINTS}; ++p) {{",
                  f"#pragma omp simd simdlen({per})",  # 512-bit vectors: GCC's tuning prefers 256 bits
                  f"        for (int o = 0; o < {layer.n if last else npad}; ++o) {{",
                  f"            const {t} v = g[p * {npad} + o] + {w}[{boff} + o];",
                  f"            {dst}[p * {dstride} + o] = {renderer.expr(expr)};",
                  "        }", "    }"]
        src, stride = dst, dstride
    return "\n".join([madd, *lines, "}", "#undef ROSENNA_VMADD"])


def _tile(vec, sfx, per, vectors, wrow, npad, src, stride, k, col, pad):
    """One tile: ``vectors`` vectors of outputs from column ``col`` for the 8 points, summed over
    the ``k`` inputs, stored to g."""
    acc = [[f"s{p}{v}" for v in range(vectors)] for p in range(POINTS)]
    lines = [f"{pad}{vec} {', '.join(f'{a} = _mm512_setzero_{sfx}()' for row in acc for a in row)};",
             f"{pad}/* over the {k} inputs: a row of weights times each point's input, into its sums */",
             f"{pad}for (int k = 0; k < {k}; ++k) {{",
             f"{pad}    const {'float' if sfx == 'ps' else 'double'} *wr = {wrow} + k * {npad};",
             f"{pad}    const {vec} {', '.join(f'w{v} = _mm512_load_{sfx}(wr + {v * per})' for v in range(vectors))};"]
    for p in range(POINTS):
        lines.append(f"{pad}    {{")
        lines.append(f"{pad}        const {vec} b = _mm512_set1_{sfx}({src}[{p * stride} + k]);")
        lines += [f"{pad}        {acc[p][v]} = ROSENNA_VMADD(w{v}, b, {acc[p][v]});" for v in range(vectors)]
        lines.append(f"{pad}    }}")
    lines.append(f"{pad}}}")
    for p in range(POINTS):
        lines += [f"{pad}_mm512_store_{sfx}(g + {p * npad} + {col}{f' + {v * per}' if v else ''}, {acc[p][v]});"
                  for v in range(vectors)]
    return lines
