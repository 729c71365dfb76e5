"""The per-point routines of ``<name>_kernel.cu`` for the user's own kernels (compiled with
``-DROSENNA_DEVICE_ROUTINE`` as relocatable device code): ``<name>_infer`` and
``<name>_infer_warp``.

``<name>_infer(x, y)`` computes one point and may be called by any thread, alone or not. For an
FP32 MLP chain with embedded weights (:func:`fast`) it is not the plan's loops but:

- its one-thread body: every layer unrolled with the activations in registers, as the narrow
  batched kernel does it (``rosenna_dense``), the weights repacked input-major ``[K][N rounded up
  to 4]`` in ``__constant__`` memory up to the tuning's ``routine_constant_bytes`` (FFMA operands straight from the
  constant bank), else in global memory read as uniform 16-byte loads; a layer wider than
  the tuning's ``routine_register_width`` accumulates its outputs in registers and reads its inputs from a local
  array, one at a time (``rosenna_dense_kouter``: 128 + 128 live values would not fit);
- when all 32 lanes of the warp are calling it together (``__activemask()`` full, CUDA), the
  warp body below instead: 32 points at once. Both give results within verify's tolerance of the
  plan's loops; which one a point took depends on how the caller's warp arrived.

``<name>_infer_warp(x, y)`` is the warp-cooperative routine: all 32 lanes of a warp must call it
together (each with its own point; lanes without one pass a valid point, e.g. the last, and a y
that may be written), and the 32 points are computed together (on CUDA behind the same
``__activemask()`` test as ``<name>_infer``, the tuning's ``warp_mask_test``):

- an MLP chain the 3xTF32 tensor-core chain takes (:mod:`rosenna.emit.cuda.tc_chain`): that
  kernel's warp body, its fragments read from global memory (CUDA sm_80+);
- an MLP chain the staged FP32 kernel takes (a hidden layer 96 to 128 wide, at most 8 outputs):
  on CUDA sm_80+ the same 3xTF32 layers (``rosenna_tc_layer`` in ``rosenna/data/rosenna_tf32.cuh``)
  with the whole of a layer's input in registers as A fragments, and a layer whose input and
  sums would not fit the tuning's ``warp_registers`` computed in groups of n8 tiles, every group's
  activated outputs but the last parked in local memory until the layer ends
  (``rosenna/data/rosenna_tc_routine.cuh``); ``warp_tiles`` 16-row tiles at once;
  elsewhere (HIP, older GPUs, ``-DROSENNA_NO_TENSOR_CORES``) ``rosenna/data/rosenna_routine.cuh``:
  FP32, two passes of 16 points, no shared memory (HIP: in each 32-lane half of a 64-wide
  wavefront);
- a float64 chain the FP64 tensor-core kernel takes (:mod:`rosenna.emit.cuda.dmma`): that
  kernel's warp body (CUDA sm_80+), and ``<name>_infer`` takes it when the whole warp calls;
- anything else (and the tensor-core chains where their guard fails): each lane computes its own
  point.

The tensor-core bodies read their fragments (tc_chain.py's packing, paired rows after the first
layer so that a layer's C fragments are the next one's A fragments) from global memory through the
read-only data cache: every warp of an SM reads the same layer at about the same time.
Measurements: results/measurement-log.md.

Each body reads the batched kernel's copy of the weights where it can (:func:`shared`; the kernel
file then holds that copy once, for both of its compiles): the one-thread body the batched
kernel's ``<name>_packed`` (the same layout, or any with 16-byte rows: ``rosenna_dense_kouter``
takes each layer's bias pointer and row stride), the FP32 warp body the same array where every
block it reads is there, the tensor-core bodies the 3xTF32 chain's or the FP64 chain's
``<name>_tc_packed``, and the parked body the wide 3xTF32 kernel's (the tuning's
``routine_layout`` "wide": its fragments are in the natural row order, so each lane gathers the
paired rows it needs from two neighbours' fragments, ``rosenna_tc_b``: the same numbers reach the
tensor cores). Otherwise a body has its own copy: ``<name>_rpacked``, ``<name>_rwarp``,
``<name>_rchain`` (``routine_layout`` "paired": the paired rows, one load per fragment).
"""

import dataclasses
import textwrap

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.chain import WarpLayout  # noqa: F401 (defined there: the offload body shares it)
from rosenna.emit.cuda import copies, dmma, staged, tc_chain, tc_wide, tf32
from rosenna.emit.cuda.mlp import PackedLayout, activation_fn, round_up
from rosenna.emit.cuda.tf32 import tiles

# The routine's tuning (rosenna.strategy.tuning.Tuning): routine_constant_bytes (packed weights
# up to it go to __constant__ memory for the one-thread body), warp_auto (<name>_infer takes the
# warp body when the whole warp calls), warp_mask_test (<name>_infer_warp behind the same
# __activemask() test), warp_tiles and warp_registers (the tensor-core warp body's 16-row tiles at
# once and its register budget before parked groups), warp_ldg, warp_compact (compact 8-byte
# fragments) and warp_local_sums (sums a layer may hold when its input is in local memory,
# rosenna_tc_layer_local; 0: parked groups).


def fast(plan, choice):
    """Whether the plan gets the MLP routines (else ``<name>_point`` serves both): the strategy's
    choice (rosenna.strategy.mlp.ROUTINE)."""
    return choice.routine == "routine-mlp"


def _warp_kind(choice):
    """The warp body: the 3xTF32 chain's where the batched kernel has that chain beside it, the
    parked 3xTF32 layers where the staged kernel serves, else none."""
    if choice.tensor is tc_chain.KIND:
        return "chain"
    if choice.base is staged.KIND:
        return "parked"
    return None


def _compact(choice):
    return _warp_kind(choice) == "parked" and choice.strategy.tuning.warp_compact


def _reads_wide(choice):
    """Whether the parked warp body reads the wide 3xTF32 kernel's ``<name>_tc_packed`` (the
    tuning's ``routine_layout`` "wide", or its ``wide_k_order`` "paired": that kernel's rows in
    the body's own order; the wide kernel beside it), in that kernel's fragment format (16-byte or
    compact hidden layers; ``warp_compact`` is for the body's own copy)."""
    tuning = choice.strategy.tuning
    return (_warp_kind(choice) == "parked" and choice.tensor is tc_wide.KIND
            and (tuning.routine_layout == "wide" or tuning.wide_k_order == "paired"))


def _chain_layout(choice):
    """The layout the tensor-core warp body reads: the wide kernel's (:func:`_reads_wide`), else
    tc_chain.py's packing (the chain kernel's copy, or the body's own ``<name>_rchain``)."""
    if _reads_wide(choice):
        return choice.tensor_layout
    return tc_chain.ChainLayout(choice.layers, _compact(choice), choice.strategy.tuning.compact_fragments)


def _warp_places(choice):
    """Where the tensor-core warp body finds each layer in the copy it reads: ``(fragments, biases,
    forms, bias_at)``: per layer the float4 offset of its fragments, the float offset of its bias
    from ``bias_at`` (the float offset of the first bias), and how they are read (the template
    arguments of the layer's call after MT: LDG, COMPACT[, GATHER, LDT[, WEIGHT]]; rosenna_tc_b)."""
    layers, tuning = choice.layers, choice.strategy.tuning
    ldg, weight = str(tuning.warp_ldg).lower(), tuning.compact_fragments == "weight"
    if _reads_wide(choice):
        # The wide kernel's fragments: their k8 rows the padded width apart (one n8 tile for the
        # output layer, always 16-byte), gathered into paired rows after the first layer, whose A
        # fragments come from x in the natural order (rosenna_tc_b), unless the wide kernel's k
        # order is paired already (wide_k_order).
        wide = choice.tensor_layout
        gather = not wide.shape.paired
        frags = [first * wide.shape.stage4 for first in wide.first] + [wide.out_frag4]
        forms = []
        for i in range(len(layers)):
            compact = wide.shape.compact and i < len(layers) - 1
            stride = wide.shape.width // 8 if i < len(layers) - 1 else 1
            forms.append(f"{ldg}, {str(compact).lower()}, {str(gather and i > 0).lower()}, {stride}" + (", true" if compact and weight else ""))
        return frags, [b - wide.bias[0] for b in wide.bias], forms, wide.bias[0]
    compact = _compact(choice)
    frags, biases, frag4, _ = tc_chain.chain_offsets(layers, compact)
    forms = [f"{ldg}, {str(compact).lower()}" + (f", false, {tiles(layer.n)}, true" if compact and weight else "") for layer in layers]
    return frags, biases, forms, 4 * frag4


def _own_layout(choice):
    """The one-thread body's own copy ``<name>_rpacked``: per layer W ``[K][N rounded up to 4]``, then the bias."""
    return PackedLayout.dense(choice.layers, 4, 4)


def _constant(choice):
    """Whether the one-thread body's copy is in ``__constant__`` memory."""
    return _own_layout(choice).size * 4 <= choice.strategy.tuning.routine_constant_bytes


def _wide(choice):
    """Whether the one-thread body takes a layer at a time from memory (``rosenna_dense_kouter``)."""
    return any(max(layer.k, layer.n) > choice.plan.tuned.routine_register_width for layer in choice.layers)


def _reads_packed(choice):
    """Whether the one-thread body reads the batched kernel's ``<name>_packed`` as it is: the same
    memory (``__constant__`` or not) and either the same layout or, for ``rosenna_dense_kouter``
    (which takes each layer's bias and row stride), any packed layout with 16-byte aligned rows."""
    layout, own = choice.layout, _own_layout(choice)
    if not isinstance(layout, PackedLayout) or choice.routine != "routine-mlp":
        return False
    batched_constant = choice.constant and choice.base is not staged.KIND  # (the staged kernel's copy: global)
    if batched_constant != _constant(choice):
        return False
    if layout.size == own.size and layout.offsets == own.offsets:
        return True
    return _wide(choice) and all(w % 4 == 0 and b % 4 == 0 and npad % 4 == 0 and npad >= round_up(layer.n, 4)
                                 for layer, (w, b, npad) in zip(choice.layers, layout.offsets))


def _dense_layout(choice):
    """The layout the one-thread body reads: the batched kernel's (:func:`_reads_packed`) or its own."""
    return choice.layout if _reads_packed(choice) else _own_layout(choice)


def _dense_name(plan, choice):
    return f"{plan.name}_packed" if _reads_packed(choice) else f"{plan.name}_rpacked"


def _reads_tc(choice):
    """Whether the tensor-core warp body reads the batched tensor-core kernel's ``<name>_tc_packed``:
    the 3xTF32 chain's (the same packing), or the FP64 chain's (which the strategy pairs with it).
    The wide kernel's fragments are not paired (its activations pass through shared memory): the
    parked warp body reads them with a gather (:func:`_reads_wide`) or keeps its own."""
    return choice.routine == "routine-dmma" or (_warp_kind(choice) == "chain" and not _compact(choice)) or _reads_wide(choice)


def shared(choice):
    """The batched kernel's copies the per-point routines read as they are: the kernel file holds
    them once, for both of its compiles (a subset of ``{"packed", "tc"}``)."""
    return {name for name, reads in (("packed", _reads_packed(choice)), ("tc", _reads_tc(choice))) if reads}


def _probe(layers):
    """The chain with every weight and bias its own number (1, 2, ...): two layouts that pack it
    alike place every weight and bias alike."""
    start, probe = 1, []
    for layer in layers:
        w = np.arange(start, start + layer.n * layer.k, dtype=np.float64).reshape(layer.n, layer.k)
        b = np.arange(start + w.size, start + w.size + layer.n, dtype=np.float64)
        probe.append(dataclasses.replace(layer, w=w, b=b))
        start += w.size + layer.n
    return probe, start


def _warp_weights(plan, choice):
    """Where the FP32 warp body reads each layer: ``(array, [(weights, bias, row stride) per
    layer])``. The one-thread body's array where it holds every block the warp body reads (per
    :class:`WarpLayout`: W ``[16 KC][16 NC]`` with its zero rows and columns, the output layer's
    rows 8 floats apart, the bias with its zeros: the staged kernel's copy of mlp128 and of a
    96-wide tanh chain, its rows 128 floats apart) and that copy is not in ``__constant__`` memory
    (a warp reads 16 different addresses at once), else its own ``<name>_rwarp``. Decided on the
    layouts, not the values (:func:`_probe`)."""
    layers = choice.layers
    warp = WarpLayout(layers)
    blocks = []  # per layer: (W offset, rows, columns, bias offset) in <name>_rwarp
    for i, (off, kc, nc) in enumerate(warp.offsets):
        cols = 8 if i == len(layers) - 1 else 16 * nc
        blocks.append((off, 16 * kc, cols, off + 16 * kc * cols))
    own = (f"{plan.name}_rwarp", [(off, bias, cols) for off, _, cols, bias in blocks])
    probe, end = _probe(layers)
    if _constant(choice) or end >= 1 << 24:  # (float32 holds the probe's numbers exactly below 2^24)
        return own
    dense = _dense_layout(choice)
    got, want = PackedLayout(probe, dense.offsets, dense.size).packed(), WarpLayout(probe).packed()
    places = []
    for i, ((off, rows, cols, bias), (woff, boff, npad)) in enumerate(zip(blocks, dense.offsets)):
        stride = 8 if i == len(layers) - 1 else npad
        if stride < cols or stride % 4 or woff + (rows - 1) * stride + cols > dense.size:
            return own
        mine = np.stack([got[woff + r * stride:woff + r * stride + cols] for r in range(rows)])
        if not (np.array_equal(mine, want[off:bias].reshape(rows, cols))
                and np.array_equal(got[boff:boff + cols], want[bias:bias + cols])):
            return own
        places.append((woff, boff, stride))
    return _dense_name(plan, choice), places


def _one_thread(plan, choice, weights, ld):
    """The lines of the one-thread body (inside ``{n}_point_thread``)."""
    layers = choice.layers
    layout = _dense_layout(choice)
    lines = []
    if not _wide(choice):
        lines += [f"    float h0[{plan.nx}];", "#pragma unroll", f"    for (int e = 0; e < {plan.nx}; ++e)",
                  "        h0[e] = x[e];"]
        for i, (layer, (woff, _, npad)) in enumerate(zip(layers, layout.offsets)):
            lines.append(f"    float h{i + 1}[{layer.n}];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */")
            lines.append(f"    rosenna_dense<{layer.k}, {layer.n}, {npad}, {ld}, rt_act{i}>({weights} + {woff}, h{i}, h{i + 1});")
        lines += ["#pragma unroll", f"    for (int e = 0; e < {plan.ny}; ++e)", f"        y[e] = h{len(layers)}[e];"]
        return lines
    width = max((round_up(layer.n, 4) for layer in layers[:-1]), default=0)
    if width:  # (one layer: x to y directly)
        lines.append(f"    float a[{width}], b[{width}];  /* the activations, ping-pong (local memory) */")
    src = "x"
    for i, (layer, (woff, boff, npad)) in enumerate(zip(layers, layout.offsets)):
        dst = "y" if i == len(layers) - 1 else ("a" if i % 2 == 0 else "b")
        lines.append(f"    rosenna_dense_kouter<{layer.k}, {layer.n}, {npad}, rt_act{i}>({weights} + {woff}, {weights} + {boff}, "
                     f"{src}, {dst});"
                     f"  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */")
        src = dst
    return lines


def _groups(layer, mt, kt, registers):
    """n8 tiles per group of a layer whose input is ``kt`` k8 tiles (``registers``: the tuning's
    ``warp_registers``):
    all of them (``rosenna_tc_layer``) when the input and every sum fit, else the most that fit
    and divide the layer's n8 tiles (``rosenna_tc_layer_parked``)."""
    nt = tiles(layer.n)
    fit = [g for g in range(1, nt + 1) if nt % g == 0 and 4 * mt * (kt + g) <= registers]
    return max(fit) if fit else 1


def _tc_warp(plan, choice):
    """The 3xTF32 warp body for the lanes' 32 points (CUDA sm_80+): the chain's layers in
    registers, 32 points at once (the tuning's ``warp_tiles`` 16-row tiles a pass); a layer too wide for its
    input and all its sums in registers computes its outputs in groups (``_groups``)."""
    n, nx, ny = plan.name, plan.nx, plan.ny
    layers = choice.layers
    parked = _warp_kind(choice) == "parked"
    tuning = choice.strategy.tuning
    local_sums = tuning.warp_local_sums
    frags, biases, forms, bias_at = _warp_places(choice)
    kt0 = tiles(layers[0].k)
    mt = tuning.warp_tiles if parked else 2
    passes = 2 // mt
    ind = "    " * (2 if passes > 1 else 1)
    chain = copies.ref(f"{n}_tc_packed" if _reads_tc(choice) else f"{n}_rchain")
    lines = [f"    const float4 *F = reinterpret_cast<const float4 *>({chain});",
             f"    const float *bias = {chain} + {bias_at};",
             "    const int lane = rosenna_lane(), gid = lane / 4, tig = lane % 4;"]
    if passes > 1:
        lines += ["#pragma unroll 1", f"    for (int pass = 0; pass < {passes}; ++pass) {{  /* 16 points a pass */"]
    row = "16 * (pass + mi)" if passes > 1 else "16 * mi"
    body = [f"float h0[{mt}][{kt0}][4];",
            "#pragma unroll",
            f"for (int mi = 0; mi < {mt}; ++mi) {{",
            f"    const float *x0 = rosenna_lane_ptr(x, {row} + gid), *x1 = rosenna_lane_ptr(x, {row} + gid + 8);",
            "#pragma unroll",
            f"    for (int kt = 0; kt < {kt0}; ++kt) {{",
            "        const int k0 = kt * 8 + tig, k1 = k0 + 4;",
            f"        h0[mi][kt][0] = k0 < {nx} ? x0[k0] : 0.0f;",
            f"        h0[mi][kt][1] = k0 < {nx} ? x1[k0] : 0.0f;",
            f"        h0[mi][kt][2] = k1 < {nx} ? x0[k1] : 0.0f;",
            f"        h0[mi][kt][3] = k1 < {nx} ? x1[k1] : 0.0f;",
            "    }",
            "}"]
    local = None  # the local buffer (act0 / act1) that holds the current layer's input, if any
    width = max([kt0] + [tiles(layer.n) for layer in layers])
    for i, layer in enumerate(layers):
        kt, nt = tiles(layer.k), tiles(layer.n)
        ng = _groups(layer, mt, kt, tuning.warp_registers)
        what = f"layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'}"
        if parked and local_sums and (local or ng < nt):
            if local is None:
                local = "act0"
                body += [f"float4 act0[{width}][{mt}], act1[{width}][{mt}];  /* A fragments [k8 tile][row tile] in local memory */",
                         "#pragma unroll", f"for (int kt = 0; kt < {kt}; ++kt)", "#pragma unroll",
                         f"    for (int mi = 0; mi < {mt}; ++mi)",
                         f"        act0[kt][mi] = make_float4(h{i}[mi][kt][0], h{i}[mi][kt][1], h{i}[mi][kt][2], h{i}[mi][kt][3]);"]
            out = "act1" if local == "act0" else "act0"
            ngl = max(g for g in range(1, nt + 1) if nt % g == 0 and (4 * mt * g <= local_sums or g == 1))
            body.append(f"rosenna_tc_layer_local<{kt}, {nt}, {ngl}, rt_act{i}, {mt}, {forms[i]}>(F + {frags[i]}, bias + {biases[i]}, "
                        f"{local}, {out});  /* {what}; {nt // ngl} groups of {ngl} n8 tiles */")
            local = out
            continue
        body.append(f"float h{i + 1}[{mt}][{nt}][4];  /* {what} */")
        if ng == nt:
            body.append(f"rosenna_tc_layer<{kt}, {nt}, rt_act{i}, {mt}, {forms[i]}>(F + {frags[i]}, bias + {biases[i]}, h{i}, h{i + 1});")
        else:
            body.append(f"rosenna_tc_layer_parked<{kt}, {nt}, {ng}, rt_act{i}, {mt}, {forms[i]}>(F + {frags[i]}, bias + {biases[i]}, "
                        f"h{i}, h{i + 1});  /* {nt // ng} groups of {ng} n8 tiles */")
    last = len(layers)
    if local:
        nt = tiles(layers[-1].n)
        body += [f"float h{last}[{mt}][{nt}][4];", "#pragma unroll", f"for (int mi = 0; mi < {mt}; ++mi)", "#pragma unroll",
                 f"    for (int nt = 0; nt < {nt}; ++nt) {{", f"        const float4 v = {local}[nt][mi];",
                 f"        h{last}[mi][nt][0] = v.x;", f"        h{last}[mi][nt][1] = v.y;",
                 f"        h{last}[mi][nt][2] = v.z;", f"        h{last}[mi][nt][3] = v.w;", "    }"]
    body += ["/* Output columns 2tig and 2tig+1 of each n8 tile, rows gid and gid+8. */",
             "#pragma unroll",
             f"for (int mi = 0; mi < {mt}; ++mi) {{",
             f"    float *y0 = rosenna_lane_ptr(y, {row} + gid), *y1 = rosenna_lane_ptr(y, {row} + gid + 8);",
             "#pragma unroll",
             f"    for (int nt = 0; nt < {tiles(layers[-1].n)}; ++nt) {{",
             "        const int c = nt * 8 + 2 * tig;",
             f"        if (c < {ny}) {{",
             f"            y0[c] = h{last}[mi][nt][0];",
             f"            y1[c] = h{last}[mi][nt][1];",
             "        }",
             f"        if (c + 1 < {ny}) {{",
             f"            y0[c + 1] = h{last}[mi][nt][2];",
             f"            y1[c + 1] = h{last}[mi][nt][3];",
             "        }",
             "    }",
             "}"]
    lines += [ind + b if b and not b.startswith("#") else b for b in body]
    if passes > 1:
        lines.append("    }")
    return lines


def _shuffle_warp(plan, choice):
    """The FP32 warp body (rosenna_routine.cuh): two passes of 16 points."""
    n, nx, ny = plan.name, plan.nx, plan.ny
    layout = WarpLayout(choice.layers)
    layers, (array, places) = choice.layers, _warp_weights(plan, choice)
    weights = copies.ref(array)
    kc0 = layout.offsets[0][1]
    lines = ["    const int lane = rosenna_lane(), py = lane / 16, cx = lane % 16;",
             "#pragma unroll 1",
             "    for (int pass = 0; pass < 2; ++pass) {",
             f"        float h0[8][{kc0}];",
             "#pragma unroll",
             "        for (int i = 0; i < 8; ++i) {",
             "            const float *xp = rosenna_lane_ptr(x, 16 * pass + 8 * py + i);",
             "#pragma unroll",
             f"            for (int j = 0; j < {kc0}; ++j)",
             f"                h0[i][j] = cx * {kc0} + j < {nx} ? xp[cx * {kc0} + j] : 0.0f;",
             "        }"]
    for i, (layer, (_, kc, nc), (off, bias, stride)) in enumerate(zip(layers[:-1], layout.offsets, places)):
        lines += [f"        float h{i + 1}[8][{nc}];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */",
                  f"        rosenna_warp_layer<{kc}, {nc}, {stride}, rt_act{i}>({weights} + {off}, {weights} + {bias}, h{i}, h{i + 1}, "
                  "py, cx);"]
    last = len(layers) - 1
    (_, kc, _), (off, bias, _) = layout.offsets[-1], places[-1]
    lines += [f"        /* layer {last}: {layers[-1].k} -> {layers[-1].n}, {layers[-1].act or 'no activation'}: lane cx ends with "
              "point 8py + cx / 2, outputs 4 (cx % 2) .. + 4 */",
              f"        const float4 v = rosenna_warp_out<{kc}, rt_act{last}>({weights} + {off}, {weights} + {bias}, h{last}, cx);",
              "        float *yp = rosenna_lane_ptr(y, 16 * pass + 8 * py + cx / 2);",
              "        const int o = 4 * (cx % 2);",
              "        const float r[4] = {v.x, v.y, v.z, v.w};",
              "#pragma unroll",
              "        for (int j = 0; j < 4; ++j)",
              f"            if (o + j < {ny})",
              "                yp[o + j] = r[j];",
              "    }"]
    return lines


def _array(plan, choice, storage, name, layout, var=None):
    """A routine's copy (rosenna/emit/cuda/copies.py): ``var``, the pointer its packing writes, where
    the copy may be packed while the file compiles (CUDA-only copies: the packing is C++14)."""
    return copies.copy(plan, choice, storage, name, layout, var)


def upload(plan, choice):
    """The lines of ``<name>_routine_upload`` (file-loaded weights) that pack and copy the MLP
    routines' copies, and the host helpers they need (``(helpers, lines)``)."""
    if choice.routine == "routine-dmma":
        return "#include <stdlib.h>\n", dmma.routine_upload(plan, choice.chain)
    if not fast(plan, choice):
        return "", ""
    n, layers = plan.name, choice.layers
    # (a copy the batched kernel has too is this object's own: the routine fills it here)
    steps = [(_dense_name(plan, choice), _dense_layout(choice), "packed", "")]
    kind = _warp_kind(choice)
    if kind in ("chain", "parked"):
        steps.append((f"{n}_tc_packed" if _reads_tc(choice) else f"{n}_rchain", _chain_layout(choice), "tc", tf32.GUARD))
    if kind == "parked" and _warp_weights(plan, choice)[0] == f"{n}_rwarp":
        steps.append((f"{n}_rwarp", WarpLayout(layers), "rw", ""))
    lines = []
    for name, layout, var, guard in steps:
        lines += ([guard] if guard else []) + [
            "    {",
            f"        float *{var} = (float *)calloc({layout.size}, sizeof(float));",
            f"        if ({var} == NULL)\n            return ROSENNA_STATUS_DEVICE;",
            textwrap.indent(layout.host_packing(var) if var != "packed" else layout.host_packing(), "    "),
            f"        const int failed = rosennaMemcpyToSymbol({name}, {var}, sizeof(float) * {layout.size}, 0, "
            "rosennaMemcpyHostToDevice) != rosennaSuccess;",
            f"        free({var});",
            "        if (failed)\n            return ROSENNA_STATUS_DEVICE;",
            "    }"] + (["#endif"] if guard else [])
    code = "\n".join(lines)
    helpers = "#include <stdlib.h>\n" + (f"{tf32.GUARD}\n{tf32.host_tf32(code)}#endif\n" if kind in ("chain", "parked") else "")
    return helpers, code


def routine(plan, choice, renderer):
    """The ``-DROSENNA_DEVICE_ROUTINE`` part of the kernel file after ``<name>_point``: the MLP
    routines' weight copies and device code, ``<name>_infer`` and ``<name>_infer_warp``."""
    n, t = plan.name, plan.ctype
    sig = f"(const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y)"
    warp_note = ("/* The warp routine: all 32 lanes of the warp call it together, each with its own point "
                 "(rosenna/emit/cuda/routine.py). */")
    if choice.routine == "routine-dmma":
        return dmma.routine_parts(plan, choice.chain, sig)
    if not fast(plan, choice):
        return (f"/* The per-point routine for the user's own kernels (link them with the device linker). */\n"
                f"extern \"C\" __device__ void {n}_infer{sig}\n{{\n    {n}_point(x, y);\n}}\n\n"
                f"{warp_note}\nextern \"C\" __device__ void {n}_infer_warp{sig}\n{{\n    {n}_point(x, y);\n}}\n")
    layers = choice.layers
    dense = _dense_layout(choice)
    constant = _constant(choice)
    parts = []
    if not _reads_packed(choice):
        parts += ["/* The one-thread body's copy: per layer W input-major [K][N rounded up to 4], then the bias. */",
                  _array(plan, choice, "__constant__" if constant else "__device__ const", f"{n}_rpacked", dense)]
    kind = _warp_kind(choice)
    if kind in ("chain", "parked") and not _reads_tc(choice):
        parts += [f"{tf32.GUARD}\n/* The warp body's copy: the 3xTF32 chain's fragments, paired rows after the first layer, "
                  "then its biases (tc_chain.py). */",
                  _array(plan, choice, "__device__ const", f"{n}_rchain", _chain_layout(choice), "tc"), "#endif"]
    if kind == "parked" and _warp_weights(plan, choice)[0] == f"{n}_rwarp":
        parts += ["/* The FP32 warp body's copy (HIP, no tensor cores): per layer W [16 KC][16 NC], then its bias "
                  "(emit/chain.py's WarpLayout). */",
                  # (read by the FP32 warp body only: not in a CUDA sm_80+ compile, which says so unless told)
                  _array(plan, choice, "__device__ const __attribute__((unused))", f"{n}_rwarp", WarpLayout(layers))]
    parts.append("namespace {")
    parts += [activation_fn(f"rt_act{i}", layer, renderer) for i, layer in enumerate(layers)]
    libraries = len(parts)  # rosenna_narrow.cuh and rosenna_lane.cuh go here where the code calls them
    parts.append(fixed.load("rosenna_routine.cuh"))
    if kind == "chain":
        parts += [tf32.GUARD, tf32.device_lib(), "#endif"]
    elif kind == "parked":
        parts += [tf32.GUARD, tf32.device_lib(), fixed.load("rosenna_tc_routine.cuh"), "#endif"]
    parts.append("}  // namespace\n")
    body = _one_thread(plan, choice, copies.ref(_dense_name(plan, choice)), 0 if constant else 1)
    parts.append(f"/* One point, one thread. */\nstatic __device__ __forceinline__ void {n}_point_thread{sig}\n{{\n"
                 + "\n".join(body) + "\n}\n")
    guard = tf32.GUARD.replace("#if ", "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && ")
    if kind == "chain":
        warp = [guard] + _tc_warp(plan, choice) + ["#else", f"    {n}_point_thread(x, y);", "#endif"]
        warp_kind = "the 3xTF32 chain's warp body (CUDA sm_80+; elsewhere each lane its own point)"
    elif kind == "parked":
        warp = [guard] + _tc_warp(plan, choice) + ["#else"] + _shuffle_warp(plan, choice) + ["#endif"]
        warp_kind = ("3xTF32 on the tensor cores, outputs of wide layers in parked groups (CUDA sm_80+); elsewhere "
                     "FP32, two passes of 16 points, no shared memory")
    else:
        warp = [f"    {n}_point_thread(x, y);"]
        warp_kind = "each lane its own point"
    parts.append(f"/* 32 points, one per lane: {warp_kind}. */\n"
                 f"static __device__ __forceinline__ void {n}_infer_warp_body{sig}\n{{\n" + "\n".join(warp) + "\n}\n")
    if choice.strategy.tuning.warp_auto and kind:
        # CUDA: the one-thread path in a function of its own. Inlined beside the warp body, its
        # local arrays and registers were allocated for <name>_infer as a whole (mlp128: a
        # 1,720-byte frame and 424 bytes spilled, where the warp body alone has 520 / 252), and
        # the whole warp, which takes the warp body, paid for them.
        parts.append("#if !defined(__HIPCC__)\n"
                     f"/* The one-thread path of {n}_infer when only part of the warp calls it. */\n"
                     f"static __device__ __noinline__ void {n}_point_alone{sig}\n{{\n    {n}_point_thread(x, y);\n}}\n"
                     "#endif\n")
        body = ("#if !defined(__HIPCC__)\n"
                "    if (__activemask() == 0xffffffffu) {  /* the whole warp is here: 32 points at once */\n"
                "        __syncwarp();\n"
                f"        {n}_infer_warp_body(x, y);\n"
                "        return;\n"
                "    }\n"
                f"    {n}_point_alone(x, y);\n"
                "#else\n"
                f"    {n}_point_thread(x, y);\n"
                "#endif\n")
        # <name>_infer_warp behind the same test (the tuning's warp_mask_test): the body then compiles as in
        # <name>_infer (see the tuning's warp_mask_test), and a warp that breaks the contract still gets its
        # points, one lane at a time.
        warp_call = body.replace(f"    {n}_point_thread(x, y);\n#endif", f"    {n}_infer_warp_body(x, y);\n#endif") \
            if choice.strategy.tuning.warp_mask_test else f"    {n}_infer_warp_body(x, y);\n"
    else:
        body = f"    {n}_point_thread(x, y);\n"
        warp_call = f"    {n}_infer_warp_body(x, y);\n"
    parts.append(f"/* The per-point routine for the user's own kernels (link them with the device linker). */\n"
                 f"extern \"C\" __device__ void {n}_infer{sig}\n{{\n{body}}}\n\n"
                 f"{warp_note}\nextern \"C\" __device__ void {n}_infer_warp{sig}\n{{\n{warp_call}}}\n")
    code = "\n".join(parts[libraries:])
    # (the 3xTF32 chain's warp body is the one caller of rosenna_lane() there: CUDA's, under its guard)
    lane = fixed.load("rosenna_lane.cuh")
    parts[libraries:libraries] = [text for text, call in (
        (fixed.load("rosenna_narrow.cuh"), "rosenna_dense<"),
        (f"{tf32.GUARD}\n{lane}#endif\n" if kind == "chain" else lane, "rosenna_lane()")) if call in code]
    return "\n".join(parts)
