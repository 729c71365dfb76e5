"""The OpenMP offload device body of ``<name>_infer`` for an MLP chain (clang's device passes).

clang's OpenMP device compiler (nvptx, amdgcn) ran the plan's loops as written: the scratch
buffers between layers stayed arrays in local memory (their indices are loop variables), every
weight was a 4-byte load, and a layer's outputs were computed four at a time from a loop over the
inputs that was not unrolled. The CUDA routine's one-thread body (rosenna/emit/cuda/routine.py)
does the same work from registers. This module writes that body in C for the offload device:

- the weights repacked input-major, ``<name>_opacked``: per layer W ``[K][NP]`` (NP the layer's
  width rounded up to 4) then the bias ``[NP]``, 16-byte aligned, so that once the loops are
  unrolled every weight index is a constant and four neighbouring outputs' weights are one
  16-byte load (the device compiler's load vectoriser joins them; all threads of a warp read the
  same address);
- a layer at most the tuning's ``offload_register_width`` wide in and out: every loop unrolled, inputs and outputs
  in registers (the arrays vanish);
- a wider layer (``rosenna_dense_kouter``'s scheme): its outputs accumulate in registers while
  its inputs are read one at a time from a local array (two ping-pong arrays of the widest
  hidden layer);
- an FP32 chain with a wide layer that the CUDA routine's warp body serves (hidden layers at most
  128 wide, at most 8 outputs: rosenna.strategy.mlp.warp_fits), on nvptx: when all 32 lanes of the warp call
  ``<name>_infer`` together (``activemask``), that warp body (rosenna/emit/cuda/routine.py's
  ``rosenna_warp_layer`` / ``rosenna_warp_out`` in C): 16 points per pass, each weight loaded once
  per 8 points and the inputs passed between lanes by shuffles (the copy then has the warp
  layout, ``chain.WarpLayout``, which the one-thread body reads too); a partial warp takes the
  one-thread body. The shuffles are rosenna_rt.h's ``ROSENNA_WARP_*`` macros (the tests define
  them to run the body in 32 host threads).

The plan's loops stay the routine everywhere else (host, GCC's offload, OpenACC, Fortran): the
repacked copy and the body are compiled only by clang with OpenMP (the copy in its host and
device passes, so that the offload runtime maps it; the body in the device pass). The sums run
over the inputs in the same order as the plan's loops, the bias added after the dot product; the
device compiler contracts multiply-adds into FMAs, so results agree within verify's tolerance.
"""

import numpy as np

from rosenna.emit.chain import WarpLayout
from rosenna.emit.lang import C
from rosenna.loopir import Var

# The tuning's offload_register_width (layers at most this wide in and out keep their inputs and
# outputs in registers) and offload_unroll (inputs per step of a wider layer's loop).
#: Which compilations see the repacked copy (clang with OpenMP, host and device passes: the
#: offload runtime pairs a device's declare-target variables with the host's) and the body
#: (``ROSENNA_OFFLOAD_BODY`` non-zero: rosenna_rt.h makes it 1 in clang's device passes, else 0;
#: -DROSENNA_OFFLOAD_BODY=1 compiles the body anywhere (the tests), =0 keeps the plan's loops).
COPY_GUARD = "#if (defined(_OPENMP) && defined(__clang__)) || ROSENNA_OFFLOAD_BODY"
BODY_GUARD = "#if ROSENNA_OFFLOAD_BODY"
#: rosenna_rt.h's lines that define ``ROSENNA_OFFLOAD_BODY``.
RUNTIME_MACRO = """/* 1 where <name>_infer is the unrolled MLP body of clang's OpenMP device passes
   (rosenna/emit/offload_mlp.py), else 0. -DROSENNA_OFFLOAD_BODY=0 keeps the plan's loops there
   too; =1 compiles that body anywhere (the tests run it on the host). */
#if !defined(ROSENNA_OFFLOAD_BODY)
#if defined(_OPENMP) && defined(__clang__) && (defined(__NVPTX__) || defined(__AMDGPU__))
#define ROSENNA_OFFLOAD_BODY 1
#else
#define ROSENNA_OFFLOAD_BODY 0
#endif
#endif
/* The warp primitives of that body's warp path (nvptx only; 0 elsewhere): the lane, whether all 32
   lanes are here, a warp barrier, float and pointer shuffles from a lane and across a lane mask. */
#if !defined(ROSENNA_WARP)
#if ROSENNA_OFFLOAD_BODY && defined(__NVPTX__)
#define ROSENNA_WARP 1
#define ROSENNA_WARP_LANE() ((int)__nvvm_read_ptx_sreg_laneid())
static inline unsigned rosenna_warp_active(void)
{
    unsigned m;
    __asm__ volatile("activemask.b32 %0;" : "=r"(m));
    return m;
}
#define ROSENNA_WARP_FULL() (rosenna_warp_active() == 0xffffffffu)
#define ROSENNA_WARP_SYNC() __nvvm_bar_warp_sync(0xffffffffu)
#define ROSENNA_WARP_SHFL(v, src) __nvvm_shfl_sync_idx_f32(0xffffffffu, (v), (src), 0x1f)
#define ROSENNA_WARP_SHFL_XOR(v, mask) __nvvm_shfl_sync_bfly_f32(0xffffffffu, (v), (mask), 0x1f)
#define ROSENNA_WARP_SHFL_PTR(p, src) \
    ((__typeof__(p))(((unsigned long long)(unsigned)__nvvm_shfl_sync_idx_i32(0xffffffffu, \
        (int)(unsigned)((unsigned long long)(p) >> 32), (src), 0x1f) << 32) | \
        (unsigned)__nvvm_shfl_sync_idx_i32(0xffffffffu, (int)(unsigned)(unsigned long long)(p), (src), 0x1f)))
#else
#define ROSENNA_WARP 0
#endif
#endif"""
#: Fact of the output's format, not of its speed: weight literals per line.
VALUES_PER_LINE = 6


def _wide(layers, tuning):
    return any(max(layer.k, layer.n) > tuning.offload_register_width for layer in layers)


class Layout:
    """Where each layer lies in the copy: ``offsets`` per layer (weights, bias, NP: the row length)
    in elements, ``size`` in all. Rows of N rounded up to 4; with the warp path, ``WarpLayout``'s
    rows and offsets (K rounded up to 16, hidden N to 16, the output layer's to 8)."""

    def __init__(self, layers, warp=False):
        self.layers, self.offsets, off = layers, [], 0
        self.warp = WarpLayout(layers) if warp else None
        for i, layer in enumerate(layers):
            if warp:
                off, kc, nc = self.warp.offsets[i]
                rows, npad = 16 * kc, 8 if i == len(layers) - 1 else 16 * nc
            else:
                rows, npad = layer.k, (layer.n + 3) // 4 * 4
            self.offsets.append((off, off + rows * npad, npad))
            off += rows * npad + npad
        self.size = off


def layout(plan, layers, warp):
    """The copy's layout; ``warp``: the body has the warp path (the strategy's choice,
    rosenna.strategy.mlp.OffloadMlp: its copy then has the warp layout)."""
    return Layout(layers, warp)


def packed(lay, dtype):
    """The copy's values in ``dtype`` (the plan's precision)."""
    if lay.warp:
        return lay.warp.packed().astype(dtype)
    out = np.zeros(lay.size, dtype)
    for layer, (woff, boff, npad) in zip(lay.layers, lay.offsets):
        block = np.zeros((layer.k, npad), dtype)
        block[:, :layer.n] = layer.w.T
        out[woff:woff + block.size] = block.reshape(-1)
        out[boff:boff + layer.n] = layer.b
    return out


def packed_name(plan):
    return C.symbol(plan.name, "opacked")


def copy(plan, layers, warp):
    """The repacked weights, ``declare target``, under :data:`COPY_GUARD`. Embedded weights:
    ``const`` whatever their size (clang keeps const data in global memory and reads it through
    the read-only path; the plan's own weights lose ``const`` above CONST_BANK_BYTES for GCC's
    sake). File-loaded: filled by ``<name>_init`` (:func:`repack`)."""
    lay = layout(plan, layers, warp)
    name, t = packed_name(plan), plan.ctype
    head = (f"{COPY_GUARD}\n"
            f"/* The weights again for the offload device's {plan.name}_infer (rosenna/emit/offload_mlp.py): per layer\n"
            f"   W input-major [K][N rounded up to 4]{' (warp layout: K to 16, N to 16 or 8)' if lay.warp else ''}, then the bias; 16-byte aligned"
            f"{'' if plan.embed else f'; packed by {plan.name}_init'}. */\n"
            "#pragma omp declare target\n")
    if plan.embed:
        lit = C.literals(packed(lay, np.float32 if plan.precision == "single" else np.float64), plan.precision)
        rows = ",\n    ".join(", ".join(lit[i:i + VALUES_PER_LINE]) for i in range(0, len(lit), VALUES_PER_LINE))
        array = f"const {t} {name}[{lay.size}] __attribute__((aligned(16))) = {{\n    {rows}\n}};\n"
    else:
        array = f"{t} {name}[{lay.size}] __attribute__((aligned(16)));\n"
    return head + array + "#pragma omp end declare target\n#endif\n"


def repack(plan, layers, warp):
    """``<name>_init``'s lines that pack the weights just read (or cleared) into the copy and
    send it to the device, under :data:`COPY_GUARD`."""
    lay, name = layout(plan, layers, warp), packed_name(plan)
    lines = [COPY_GUARD, f"    /* the offload device body's copy (rosenna/emit/offload_mlp.py) */"]
    for i, (layer, (woff, boff, npad)) in enumerate(zip(layers, lay.offsets)):
        w, b = (C.symbol(plan.name, plan.weights[j].ident) for j in (layer.w_index, layer.b_index))
        lines += [f"    for (int k = 0; k < {layer.k}; ++k)",
                  f"        for (int o = 0; o < {layer.n}; ++o)",
                  f"            {name}[{_plus(woff)}k * {npad} + o] = {w}[o * {layer.k} + k];",
                  f"    for (int o = 0; o < {layer.n}; ++o)",
                  f"        {name}[{boff} + o] = {b}[o];"]
    lines += [f"#pragma omp target update to({name})", "#endif"]
    return "\n".join(lines) + "\n"


def activations(plan, layers, renderer):
    """``static inline`` activation functions, one per layer: its pointwise expression (identity
    without one)."""
    t, out = plan.ctype, []
    for i, layer in enumerate(layers):
        expr = layer.expr if layer.expr is not None else Var("v")
        out.append(f"static inline {t} {_act(plan, i)}({t} v)\n{{\n    return {renderer.expr(expr)};\n}}")
    return "\n".join(out)


def _act(plan, i):
    return f"{plan.name}_oact{i}"


def functions(plan, layers, renderer, warp):
    """The functions the body calls: one activation per layer, and with the warp path the
    one-thread body (``<name>_oalone``, never inlined) and the warp body (``<name>_owarp``)."""
    out = activations(plan, layers, renderer)
    if warp:
        sig = f"(const {plan.ctype} *ROSENNA_RESTRICT x, {plan.ctype} *ROSENNA_RESTRICT y)"
        # out of line beside the warp path (else they share registers), inlined without it (13.1 ns
        # per mlp128 point out of line against 11.4 inlined; H200, the first full table)
        out += (f"\n/* One point, one thread (a partial warp). */\n#if ROSENNA_WARP\n"
                f"static __attribute__((noinline)) void {plan.name}_oalone{sig}\n#else\n"
                f"static inline void {plan.name}_oalone{sig}\n#endif\n{{\n"
                + "\n".join(_thread(plan, layers, True)) + "\n}\n"
                "#if ROSENNA_WARP\n"
                f"/* 32 points, one per lane, the whole warp here: two passes of 16. */\n"
                f"static inline void {plan.name}_owarp{sig}\n{{\n"
                + "\n".join(_warp(plan, layers)) + "\n}\n#endif")
    return out


def body(plan, layers, warp):
    """The lines of the device body (inside ``<name>_infer``, x and y its arguments)."""
    if not warp:
        return _thread(plan, layers, False)
    return ["#if ROSENNA_WARP",
            "    if (ROSENNA_WARP_FULL()) {  /* the whole warp is here: 32 points at once */",
            "        ROSENNA_WARP_SYNC();",
            f"        {plan.name}_owarp(x, y);",
            "        return;",
            "    }",
            "#endif",
            f"    {plan.name}_oalone(x, y);"]


def _thread(plan, layers, warp):
    """The one-thread body's lines (``warp``: the copy has the warp layout)."""
    t, zero = plan.ctype, C.literal(0.0, plan.precision)
    lay = layout(plan, layers, warp)
    w = packed_name(plan)
    wide = _wide(layers, plan.tuned)
    lines = []
    if wide:
        width = max(lay.offsets[i][2] for i in range(len(layers) - 1)) if len(layers) > 1 else 4
        lines += [f"    {t} a[{width}], b[{width}];  /* the activations, ping-pong (local memory) */",
                  "#pragma omp allocate(a, b) allocator(omp_thread_mem_alloc)"]
    src = "x"
    for i, (layer, (woff, boff, npad)) in enumerate(zip(layers, lay.offsets)):
        last = i == len(layers) - 1
        what = f"/* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */"
        if wide:
            dst = "y" if last else ("a" if i % 2 == 0 else "b")
            lines += _kouter(plan, i, layer, woff, boff, npad, src, dst, what, zero, w)
        else:
            dst = "y" if last else f"h{i + 1}"
            lines.append(f"    {what}")
            lines += _registers(plan, i, layer, woff, boff, npad, src, dst, zero, w)
        src = dst
    if not wide and len(layers) > 1:
        # clang's device pass moves a function's local arrays to a shared stack unless told that
        # each thread keeps its own (c.py's _thread_private_scratch); unrolled, they become registers.
        names = [f"h{i + 1}" for i in range(len(layers) - 1)]
        decl = [f"    {t} {', '.join(f'{h}[{layer.n}]' for h, layer in zip(names, layers))};",
                f"#pragma omp allocate({', '.join(names)}) allocator(omp_thread_mem_alloc)"]
        lines = decl + lines
    return lines


def _warp(plan, layers):
    """The warp body's lines: lane (py, cx) = (lane / 16, lane % 16) holds points 8py .. +8 of the
    pass and, of every layer, the columns cx NC .. + NC; a layer's input column k = c KC + j of
    point i is register h[i][j] of lane (py, c), fetched with one shuffle for NC multiply-adds."""
    lay, w, n = layout(plan, layers, True), packed_name(plan), plan.name
    kc0 = lay.warp.offsets[0][1]
    private = "#pragma omp allocate({}) allocator(omp_thread_mem_alloc)"
    lines = ["    const int lane = ROSENNA_WARP_LANE(), py = lane / 16, cx = lane % 16;",
             "#pragma unroll 1",
             "    for (int pass = 0; pass < 2; ++pass) {",
             f"        float h0[8][{kc0}];", private.format("h0"),
             "#pragma unroll",
             "        for (int i = 0; i < 8; ++i) {",
             "            const float *xp = ROSENNA_WARP_SHFL_PTR(x, 16 * pass + 8 * py + i);",
             "#pragma unroll",
             f"            for (int j = 0; j < {kc0}; ++j)",
             f"                h0[i][j] = cx * {kc0} + j < {plan.nx} ? xp[cx * {kc0} + j] : 0.0f;",
             "        }"]
    for i, (layer, (woff, boff, npad)) in enumerate(zip(layers[:-1], lay.offsets)):
        _, kc, nc = lay.warp.offsets[i]
        aligned = nc % 4 == 0
        row = f"{w} + {_plus(woff)}(c * {kc} + j) * {npad} + cx * {nc}"
        lines += [f"        float h{i + 1}[8][{nc}];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */",
                  private.format(f"h{i + 1}"),
                  "        {",
                  f"            float s[8][{nc}];", private.format("s"),
                  "#pragma unroll",
                  "            for (int i = 0; i < 8; ++i)",
                  "#pragma unroll",
                  f"                for (int o = 0; o < {nc}; ++o)",
                  "                    s[i][o] = 0.0f;",
                  "#pragma unroll 1",
                  "            for (int c = 0; c < 16; ++c) {",
                  "#pragma unroll",
                  f"                for (int j = 0; j < {kc}; ++j) {{",
                  (f"                    const float *wr = (const float *)__builtin_assume_aligned({row}, 16);"
                   if aligned else f"                    const float *wr = {row};"),
                  "#pragma unroll",
                  "                    for (int i = 0; i < 8; ++i) {",
                  f"                        const float v = ROSENNA_WARP_SHFL(h{i}[i][j], py * 16 + c);",
                  "#pragma unroll",
                  f"                        for (int o = 0; o < {nc}; ++o)",
                  "                            s[i][o] += wr[o] * v;",
                  "                    }",
                  "                }",
                  "            }",
                  "#pragma unroll",
                  "            for (int i = 0; i < 8; ++i)",
                  "#pragma unroll",
                  f"                for (int o = 0; o < {nc}; ++o)",
                  f"                    h{i + 1}[i][o] = {_act(plan, i)}(s[i][o] + {w}[{boff} + cx * {nc} + o]);",
                  "        }"]
    last = len(layers) - 1
    woff, boff, _ = lay.offsets[-1]
    kc = lay.warp.offsets[-1][1]
    lines += [f"        /* layer {last}: {layers[-1].k} -> {layers[-1].n}, {layers[-1].act or 'no activation'}: each lane sums its "
              f"{kc} input column(s) for 8 points x 8 outputs,",
              "           then a reduce-scatter over its half-warp (xor 8, 4, 2, 1; the lane whose bit is set keeps the",
              "           upper half) leaves lane cx point 8py + cx / 2, outputs 4 (cx % 2) .. + 4 */",
              "        {",
              "            float p[64];", private.format("p"),
              "#pragma unroll",
              "            for (int e = 0; e < 64; ++e)",
              "                p[e] = 0.0f;",
              "#pragma unroll",
              f"            for (int j = 0; j < {kc}; ++j) {{",
              f"                const float *wr = (const float *)__builtin_assume_aligned({w} + {_plus(woff)}(cx * {kc} + j) * 8, 16);",
              "#pragma unroll",
              "                for (int i = 0; i < 8; ++i)",
              "#pragma unroll",
              "                    for (int o = 0; o < 8; ++o)",
              f"                        p[i * 8 + o] += wr[o] * h{last}[i][j];",
              "            }",
              "#pragma unroll",
              "            for (int r = 0; r < 4; ++r) {",
              "                const int half = 32 >> r, bit = 8 >> r, upper = (cx & bit) != 0;",
              "#pragma unroll",
              "                for (int e = 0; e < half; ++e) {  /* both halves sent: a select of two loads",
              "                    would keep p in local memory (clang selects their addresses) */",
              "                    const float lo = p[e] + ROSENNA_WARP_SHFL_XOR(p[e], bit);",
              "                    const float hi = p[e + half] + ROSENNA_WARP_SHFL_XOR(p[e + half], bit);",
              "                    p[e] = upper ? hi : lo;",
              "                }",
              "            }",
              "            float *yp = ROSENNA_WARP_SHFL_PTR(y, 16 * pass + 8 * py + cx / 2);",
              "            const int o = 4 * (cx % 2);",
              "#pragma unroll",
              "            for (int j = 0; j < 4; ++j)",
              f"                if (o + j < {plan.ny})",
              f"                    yp[o + j] = {_act(plan, last)}(p[j] + {w}[{boff} + o + j]);",
              "        }",
              "    }"]
    return lines


def _registers(plan, i, layer, woff, boff, npad, src, dst, zero, w):
    t = plan.ctype
    acc = [f"s{j}" for j in range(4)]
    lines = ["#pragma unroll",
             f"    for (int n0 = 0; n0 < {npad}; n0 += 4) {{",
             f"        {t} {', '.join(f'{a} = {zero}' for a in acc)};",
             "#pragma unroll",
             f"        for (int k = 0; k < {layer.k}; ++k) {{",
             f"            const {t} *wk = {w} + {_plus(woff)}k * {npad} + n0;",
             f"            const {t} v = {src}[k];"]
    lines += [f"            {a} += wk[{j}] * v;" for j, a in enumerate(acc)]
    lines.append("        }")
    for j, a in enumerate(acc):
        guard = f"if (n0 + {j} < {layer.n}) " if layer.n % 4 and j >= layer.n % 4 else ""
        lines.append(f"        {guard}{dst}[n0 + {j}] = {_act(plan, i)}({a} + {w}[{boff} + n0 + {j}]);")
    lines.append("    }")
    return lines


def _kouter(plan, i, layer, woff, boff, npad, src, dst, what, zero, w):
    t = plan.ctype
    return [f"    {{  {what}",
            f"        {t} s[{npad}];",
            "#pragma omp allocate(s) allocator(omp_thread_mem_alloc)",
            "#pragma unroll",
            f"        for (int j = 0; j < {npad}; ++j)",
            f"            s[j] = {zero};",
            f"#pragma unroll {plan.tuned.offload_unroll}",
            f"        for (int k = 0; k < {layer.k}; ++k) {{",
            f"            const {t} v = {src}[k];",
            f"            const {t} *wk = {w} + {_plus(woff)}k * {npad};",
            "#pragma unroll",
            f"            for (int j = 0; j < {npad}; ++j)",
            "                s[j] += wk[j] * v;",
            "        }",
            "#pragma unroll",
            f"        for (int j = 0; j < {layer.n}; ++j)",
            f"            {dst}[j] = {_act(plan, i)}(s[j] + {w}[{boff} + j]);",
            "    }"]


def _plus(offset):
    return f"{offset} + " if offset else ""
