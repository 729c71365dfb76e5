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
- a layer at most :data:`REGISTER_WIDTH` wide in and out: every loop unrolled, inputs and outputs
  in registers (the arrays vanish);
- a wider layer (``rosenna_dense_kouter``'s scheme): its outputs accumulate in registers while
  its inputs are read one at a time from a local array (two ping-pong arrays of the widest
  hidden layer).

The plan's loops stay the routine everywhere else (host, GCC's offload, OpenACC, Fortran): the
repacked copy and the body are compiled only by clang with OpenMP (the copy in its host and
device passes, so that the offload runtime maps it; the body in the device pass). The sums run
over the inputs in the same order as the plan's loops, the bias added after the dot product; the
device compiler contracts multiply-adds into FMAs, so results agree within verify's tolerance.
"""

import numpy as np

from rosenna import ops
from rosenna.emit.chain import mlp_layers
from rosenna.emit.lang import C
from rosenna.loopir import Var

#: Layers at most this wide in and out keep their inputs and outputs in registers.
REGISTER_WIDTH = 64
#: Inputs per step of a wide layer's loop (unrolled): one step's weight loads in flight together.
KOUTER_UNROLL = 4
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
#endif"""
VALUES_PER_LINE = 6


def layers_of(plan):
    """The plan's MLP layers when it gets the offload body, else None."""
    if plan.path == "whole":
        return None
    return mlp_layers(plan, plan.precision)


class Layout:
    """Where each layer lies in the copy: ``offsets`` per layer (weights, bias, NP) in elements,
    ``size`` in all."""

    def __init__(self, layers):
        self.layers, self.offsets, off = layers, [], 0
        for layer in layers:
            npad = (layer.n + 3) // 4 * 4
            self.offsets.append((off, off + layer.k * npad, npad))
            off += layer.k * npad + npad
        self.size = off


def layout(layers):
    return Layout(layers)


def packed(lay, dtype):
    """The copy's values in ``dtype`` (the plan's precision)."""
    out = np.zeros(lay.size, dtype)
    for layer, (woff, boff, npad) in zip(lay.layers, lay.offsets):
        block = np.zeros((layer.k, npad), dtype)
        block[:, :layer.n] = layer.w.T
        out[woff:woff + block.size] = block.reshape(-1)
        out[boff:boff + layer.n] = layer.b
    return out


def packed_name(plan):
    return C.symbol(plan.name, "opacked")


def copy(plan, layers):
    """The repacked weights, ``declare target``, under :data:`COPY_GUARD`. Embedded weights:
    ``const`` whatever their size (clang keeps const data in global memory and reads it through
    the read-only path; the plan's own weights lose ``const`` above CONST_BANK_BYTES for GCC's
    sake). File-loaded: filled by ``<name>_init`` (:func:`repack`)."""
    lay = layout(layers)
    name, t = packed_name(plan), plan.ctype
    head = (f"{COPY_GUARD}\n"
            f"/* The weights again for the offload device's {plan.name}_infer (rosenna/emit/offload_mlp.py): per layer\n"
            f"   W input-major [K][N rounded up to 4], then the bias; 16-byte aligned"
            f"{'' if plan.embed else f'; packed by {plan.name}_init'}. */\n"
            "#pragma omp declare target\n")
    if plan.embed:
        lit = C.literals(packed(lay, np.float32 if plan.precision == "single" else np.float64), plan.precision)
        rows = ",\n    ".join(", ".join(lit[i:i + VALUES_PER_LINE]) for i in range(0, len(lit), VALUES_PER_LINE))
        array = f"const {t} {name}[{lay.size}] __attribute__((aligned(16))) = {{\n    {rows}\n}};\n"
    else:
        array = f"{t} {name}[{lay.size}] __attribute__((aligned(16)));\n"
    return head + array + "#pragma omp end declare target\n#endif\n"


def repack(plan, layers):
    """``<name>_init``'s lines that pack the weights just read (or cleared) into the copy and
    send it to the device, under :data:`COPY_GUARD`."""
    lay, name = layout(layers), packed_name(plan)
    lines = [COPY_GUARD, f"    /* the offload device body's copy (rosenna/emit/offload_mlp.py) */"]
    for i, (layer, (woff, boff, npad)) in enumerate(zip(layers, lay.offsets)):
        w, b = (C.symbol(plan.name, plan.weights[2 * i + j].ident) for j in (0, 1))
        lines += [f"    for (int k = 0; k < {layer.k}; ++k)",
                  f"        for (int o = 0; o < {layer.n}; ++o)",
                  f"            {name}[{_plus(woff)}k * {npad} + o] = {w}[o * {layer.k} + k];",
                  f"    for (int o = 0; o < {layer.n}; ++o)",
                  f"        {name}[{boff} + o] = {b}[o];"]
    lines += [f"#pragma omp target update to({name})", "#endif"]
    return "\n".join(lines) + "\n"


def activations(plan, layers, renderer):
    """``static inline`` activation functions, one per layer (identity without one)."""
    t, out = plan.ctype, []
    for i, layer in enumerate(layers):
        expr = ops.get(layer.act).expr(layer.attrs, Var("v")) if layer.act else Var("v")
        out.append(f"static inline {t} {_act(plan, i)}({t} v)\n{{\n    return {renderer.expr(expr)};\n}}")
    return "\n".join(out)


def _act(plan, i):
    return f"{plan.name}_oact{i}"


def body(plan, layers):
    """The lines of the device body (inside ``<name>_infer``, x and y its arguments)."""
    t, zero = plan.ctype, C.literal(0.0, plan.precision)
    lay = layout(layers)
    w = packed_name(plan)
    wide = any(max(layer.k, layer.n) > REGISTER_WIDTH for layer in layers)
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
            f"#pragma unroll {KOUTER_UNROLL}",
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
