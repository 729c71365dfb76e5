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

The tensor-core bodies read their fragments (``<name>_rchain``, tc_chain.py's packing, paired
rows after the first layer so that a layer's C fragments are the next one's A fragments) from
global memory through the read-only data cache: every warp of an SM reads the same layer at
about the same time. Measurements: results/measurement-log.md.
"""

import dataclasses

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.chain import WarpLayout  # noqa: F401 (defined there: the offload body shares it)
from rosenna.emit.cuda import dmma, staged, tc_chain, tf32
from rosenna.emit.cuda.mlp import PackedLayout, activation_fn, array, round_up
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


def _chain_layout(choice):
    """The tensor-core warp body's copy ``<name>_rchain`` (tc_chain.py's packing)."""
    return tc_chain.ChainLayout(choice.layers, _compact(choice))


def _dense_layout(choice):
    return PackedLayout.dense(choice.layers, 4, 4)


def _constant(choice):
    """Whether the one-thread body's copy ``<name>_rpacked`` is in ``__constant__`` memory."""
    return _dense_layout(choice).size * 4 <= choice.strategy.tuning.routine_constant_bytes


def _warp_weights(plan, choice):
    """The array the FP32 warp body reads: ``<name>_rpacked`` where its layout
    (:class:`WarpLayout`) puts every weight and bias where the one-thread body's does (widths
    multiples of 16: mlp128) and that copy is not in ``__constant__`` memory (a warp reads 16
    different addresses at once), else its own ``<name>_rwarp``. Decided on the layouts, not the
    values: each weight of a probe chain is its own number."""
    layers, start, probe = choice.layers, 1, []
    for layer in layers:
        w = np.arange(start, start + layer.n * layer.k, dtype=np.float64).reshape(layer.n, layer.k)
        b = np.arange(start + w.size, start + w.size + layer.n, dtype=np.float64)
        probe.append(dataclasses.replace(layer, w=w, b=b))
        start += w.size + layer.n
    if _constant(choice) or start >= 1 << 24:  # (float32 holds the probe's numbers exactly below 2^24)
        return f"{plan.name}_rwarp"
    warp, dense = WarpLayout(probe), PackedLayout.dense(probe, 4, 4)
    same = warp.size == dense.size and np.array_equal(warp.packed(), dense.packed())
    return f"{plan.name}_rpacked" if same else f"{plan.name}_rwarp"


def _one_thread(plan, choice, weights, ld):
    """The lines of the one-thread body (inside ``{n}_point_thread``)."""
    layers = choice.layers
    layout = _dense_layout(choice)
    wide = any(max(layer.k, layer.n) > plan.tuned.routine_register_width for layer in layers)
    lines = []
    if not wide:
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
    for i, (layer, (woff, _, npad)) in enumerate(zip(layers, layout.offsets)):
        dst = "y" if i == len(layers) - 1 else ("a" if i % 2 == 0 else "b")
        lines.append(f"    rosenna_dense_kouter<{layer.k}, {layer.n}, {npad}, rt_act{i}>({weights} + {woff}, {src}, {dst});"
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
    compact = _compact(choice)
    tuning = choice.strategy.tuning
    local_sums = tuning.warp_local_sums
    frags, biases, frag4, _ = tc_chain.chain_offsets(layers, compact)
    kt0 = tiles(layers[0].k)
    mt = tuning.warp_tiles if parked else 2
    passes = 2 // mt
    ldg = f"{str(tuning.warp_ldg).lower()}, {str(compact).lower()}"
    ind = "    " * (2 if passes > 1 else 1)
    lines = [f"    const float4 *F = reinterpret_cast<const float4 *>({n}_rchain);",
             f"    const float *bias = {n}_rchain + {4 * frag4};",
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
            body.append(f"rosenna_tc_layer_local<{kt}, {nt}, {ngl}, rt_act{i}, {mt}, {ldg}>(F + {frags[i]}, bias + {biases[i]}, "
                        f"{local}, {out});  /* {what}; {nt // ngl} groups of {ngl} n8 tiles */")
            local = out
            continue
        body.append(f"float h{i + 1}[{mt}][{nt}][4];  /* {what} */")
        if ng == nt:
            body.append(f"rosenna_tc_layer<{kt}, {nt}, rt_act{i}, {mt}, {ldg}>(F + {frags[i]}, bias + {biases[i]}, h{i}, h{i + 1});")
        else:
            body.append(f"rosenna_tc_layer_parked<{kt}, {nt}, {ng}, rt_act{i}, {mt}, {ldg}>(F + {frags[i]}, bias + {biases[i]}, "
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
    layers, weights = choice.layers, _warp_weights(plan, choice)
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
    for i, (layer, (off, kc, nc)) in enumerate(zip(layers[:-1], layout.offsets)):
        lines += [f"        float h{i + 1}[8][{nc}];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */",
                  f"        rosenna_warp_layer<{kc}, {nc}, rt_act{i}>({weights} + {off}, h{i}, h{i + 1}, py, cx);"]
    last = len(layers) - 1
    off, kc, _ = layout.offsets[-1]
    lines += [f"        /* layer {last}: {layers[-1].k} -> {layers[-1].n}, {layers[-1].act or 'no activation'}: lane cx ends with "
              "point 8py + cx / 2, outputs 4 (cx % 2) .. + 4 */",
              f"        const float4 v = rosenna_warp_out<{kc}, rt_act{last}>({weights} + {off}, h{last}, cx);",
              "        float *yp = rosenna_lane_ptr(y, 16 * pass + 8 * py + cx / 2);",
              "        const int o = 4 * (cx % 2);",
              "        const float r[4] = {v.x, v.y, v.z, v.w};",
              "#pragma unroll",
              "        for (int j = 0; j < 4; ++j)",
              f"            if (o + j < {ny})",
              "                yp[o + j] = r[j];",
              "    }"]
    return lines


def _array(plan, storage, name, layout):
    """A routine's copy: initialised for embedded weights, else filled by ``<name>_routine_upload``
    (``__constant__`` stays constant memory; the rest is ``__device__``)."""
    if plan.embed:
        return array(storage, name, layout.packed(), layout.size)
    storage = "__constant__" if storage == "__constant__" else "__device__"
    return f"static {storage} __align__(16) float {name}[{layout.size}];"


def upload(plan, choice):
    """The lines of ``<name>_routine_upload`` (file-loaded weights) that pack and copy the MLP
    routines' copies, and the host helpers they need (``(helpers, lines)``)."""
    if choice.routine == "routine-dmma":
        return "#include <stdlib.h>\n", dmma.routine_upload(plan, choice.chain)
    if not fast(plan, choice):
        return "", ""
    n, layers = plan.name, choice.layers
    steps = [(f"{n}_rpacked", _dense_layout(choice), "packed", "")]
    kind = _warp_kind(choice)
    if kind in ("chain", "parked"):
        steps.append((f"{n}_rchain", _chain_layout(choice), "tc", tf32.GUARD))
    if kind == "parked" and _warp_weights(plan, choice) == f"{n}_rwarp":
        steps.append((f"{n}_rwarp", WarpLayout(layers), "rw", ""))
    lines = []
    for name, layout, var, guard in steps:
        lines += ([guard] if guard else []) + [
            "    {",
            f"        float *{var} = (float *)calloc({layout.size}, sizeof(float));",
            f"        if ({var} == NULL)\n            return ROSENNA_STATUS_DEVICE;",
            layout.host_packing(var) if var != "packed" else layout.host_packing(),
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
    parts = ["/* The one-thread body's copy: per layer W input-major [K][N rounded up to 4], then the bias. */",
             _array(plan, "__constant__" if constant else "__device__ const", f"{n}_rpacked", dense)]
    kind = _warp_kind(choice)
    if kind in ("chain", "parked"):
        parts += [f"{tf32.GUARD}\n/* The warp body's copy: the 3xTF32 chain's fragments, then its biases (tc_chain.py). */",
                  _array(plan, "__device__ const", f"{n}_rchain", _chain_layout(choice)), "#endif"]
    if kind == "parked" and _warp_weights(plan, choice) == f"{n}_rwarp":
        parts += ["/* The FP32 warp body's copy (HIP, no tensor cores): per layer W [16 KC][16 NC], then its bias "
                  "(emit/chain.py's WarpLayout). */",
                  _array(plan, "__device__ const", f"{n}_rwarp", WarpLayout(layers))]
    parts.append("namespace {")
    parts += [activation_fn(f"rt_act{i}", layer, renderer) for i, layer in enumerate(layers)]
    libraries = len(parts)  # rosenna_narrow.cuh and rosenna_lane.cuh go here where the code calls them
    parts.append(fixed.load("rosenna_routine.cuh"))
    if kind == "chain":
        parts += [tf32.GUARD, tf32.device_lib(), "#endif"]
    elif kind == "parked":
        parts += [tf32.GUARD, tf32.device_lib(), fixed.load("rosenna_tc_routine.cuh"), "#endif"]
    parts.append("}  // namespace\n")
    body = _one_thread(plan, choice, f"{n}_rpacked", 0 if constant else 1)
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
    parts[libraries:libraries] = [fixed.load(name) for name, call in (("rosenna_narrow.cuh", "rosenna_dense<"),
                                                                      ("rosenna_lane.cuh", "rosenna_lane()"))
                                  if call in code]
    return "\n".join(parts)
