"""The wide 3xTF32 tensor-core kernel (CUDA sm_80+), beside the FP32 kernel of wide MLPs.

The ``wide`` kernel (rosenna.strategy.mlp.TensorWide: a hidden layer at least 64 wide, input and hidden layers at
most 512, output at most 8; grown from the design study's hand-written mlp128 kernel): a block
of points keeps its activations in shared memory, act[p][width + 4], and every hidden layer,
padded to the block's width, is one points x width product of its warps (32 points x 8 ni
columns each; :class:`WideShape` picks the block for the width: 128 points and 8 warps up to 128
wide, 128 points and 16 warps up to 256, 64 points and 16 warps up to 512). The weights stream
through shared memory in stages of 16 rows, double-buffered by ``cp.async`` across layer
boundaries with one barrier per stage (beyond 256 wide as compact fragments, each weight once);
each layer ends with bias and activation written back over act. Padded columns
hold act(0), finite, and meet zero weight rows downstream; the padded input columns are zeroed.
The output layer is one m16n8 tile per warp with its fragments read through L1.

Accuracy: each stage's products (two k8 tiles, six MMAs) are summed by the tensor cores from zero
and added to the running sums in fp32, round to nearest (split accumulation). Accumulating a
whole 128-deep layer in the MMAs (48 per output, each truncating the running sum) left ~1 output
in a million outside verify's elementwise tolerance on mlp128 (results/measurement-log.md), which kept
this kernel opt-in; with split accumulation it is the default, and ``-DROSENNA_NO_TENSOR_CORES``
keeps the FP32 kernels. Measurements: results/measurement-log.md.

The 3xTF32 split and the fragment layouts: :mod:`rosenna.emit.cuda.tf32`.
"""

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.cuda import staged, tf32
from rosenna.emit.cuda.base import Kind
from rosenna.emit.cuda.tf32 import tiles as _tiles
from rosenna.strategy import Tuning

#: Fact of the kernel's design: the widest output is one n8 tile of the output MMA (the widest
#: input or hidden layer it takes is the strategy's, rosenna/strategy/mlp).
WIDE_MAX_OUT = 8


class WideShape:
    """The block of the wide kernel for a padded width ``width``: ``wm`` x ``wn`` warps, warp (wm,
    wn) owning points 32wm .. +32 and columns ``8 ni`` wn .. +8 ni; stages of ``ks`` k8 tiles
    (8 ks weight rows); act[points][lda] in shared memory (lda = width + 4 puts a warp's A-fragment
    reads, rows gid and columns tig, in 32 distinct banks for every width here; width + 8 its
    8-byte reads of columns 2tig, 2tig+1 with ``paired``, 32 distinct banks per half warp).

    - width <= 128 (a multiple of 32): 4 x 2 warps, 128 points, 16-row stages, two blocks per SM
      (mlp128: 98 KB of shared memory per block);
    - width <= 256 (a multiple of 64): 4 x 4 warps, 128 points, 16-row stages, one block per SM
      (194 KB at 256);
    - width <= 512 (a multiple of 128): 2 x 8 warps, 64 points, 16-row stages of compact
      fragments (``compact``), one block per SM (197 KB at 512).

    ``ni`` is at most 8 in each: 64 accumulators per thread, within the 128-register cap of two
    256-thread blocks (or one 512-thread block) per SM.

    ``compact``: the hidden layers' fragments hold each weight once, as the fp32 number big + small
    (22 significant bits, what 3xTF32 multiplies with), 8 bytes per lane and k8 x n8 tile instead
    of 16; the kernel splits it in two instructions per weight. Half the weight stream from L2
    and through shared memory: at 512 wide a 64-point block streams 2 MB of fragments per
    layer.

    The tuning decides ``compact`` (``wide_compact_from``) and the persistent grid
    (``wide_persistent``, ``wide_persistent_compact``)."""

    def __init__(self, widest, tuning=Tuning()):
        self.compact = widest >= tuning.wide_compact_from
        #: What a compact fragment holds (the tuning's ``compact_fragments``: "sum" or "weight").
        self.form = tuning.compact_fragments
        #: The k order within a k8 tile (the tuning's ``wide_k_order``): "paired" reads columns 2tig,
        #: 2tig+1 of act against the paired rows of tf32.pack_layer (the warp routine's order).
        self.paired = tuning.wide_k_order == "paired"
        if widest <= 128:
            self.width, self.wm, self.wn, self.ks, self.min_blocks = _round(widest, 32), 4, 2, 2, 2
        elif widest <= 256:
            self.width, self.wm, self.wn, self.ks, self.min_blocks = _round(widest, 64), 4, 4, 2, 1
        else:  # 16 8-byte rows or 8 16-byte rows per stage: 32 KB
            self.width, self.wm, self.wn, self.min_blocks = _round(widest, 128), 2, 8, 1
            self.ks = 2 if self.compact else 1
        self.ni = self.width // (8 * self.wn)
        self.points = 32 * self.wm
        self.threads = 32 * self.wm * self.wn
        self.lda = self.width + (8 if self.paired else 4)
        self.stage_rows = 8 * self.ks
        #: One stage of fragments in float4 units: ks x (width / 8) tiles x 32 lanes, 16 bytes per
        #: lane (8 compact).
        self.stage4 = self.ks * (self.width // 8) * (16 if self.compact else 32)
        self.smem = self.points * self.lda * 4 + 2 * self.stage4 * 16
        self.persistent = tuning.wide_persistent and (tuning.wide_persistent_compact or not self.compact)
        assert self.stage4 % self.threads == 0 and self.ni <= 8


def widest(layers):
    """The widest of the input and the hidden layers: what the act buffer holds."""
    return max([layers[0].k] + [layer.n for layer in layers[:-1]])


class WideLayout:
    """Where the wide kernel finds each layer in ``<name>_tc_packed``.

    Hidden layer i has ``kp[i]`` weight rows (its input width padded to a stage's rows) and
    ``shape.width`` columns; its fragments are stages ``first[i]`` .. ``first[i] + count[i] - 1``
    of one stream of ``stages`` stages, each ``shape.stage4`` float4 at offset ``g * stage4``:
    packing layer after layer in [kt][nt][lane] order makes every stage ``ks`` consecutive k8
    tiles. The output layer's fragments follow (``out_kt`` k8 tiles x 1 n8 tile, at float4
    ``out_frag4``), then the biases: ``width`` floats per hidden layer, 8 for the output
    (``bias[i]``, float offsets from the start of the array); ``k0[g]``: stage g's first row
    within its layer."""

    def __init__(self, layers, tuning=Tuning()):
        self.layers, self.tuning = layers, tuning
        self.shape = shape = WideShape(widest(layers), tuning)
        hidden = layers[:-1]
        self.kp = [_round(layer.k, shape.stage_rows) for layer in hidden]
        self.count = [kp // shape.stage_rows for kp in self.kp]
        self.first = [sum(self.count[:i]) for i in range(len(hidden))]
        self.stages = sum(self.count)
        self.k0 = [shape.stage_rows * s for count in self.count for s in range(count)]
        self.out_frag4 = self.stages * shape.stage4
        self.out_kt = _tiles(layers[-1].k)
        self.frag4 = self.out_frag4 + 32 * self.out_kt
        self.bias = [4 * self.frag4 + shape.width * i for i in range(len(hidden))]
        self.bias.append(4 * self.frag4 + shape.width * len(hidden))
        self.size = self.bias[-1] + WIDE_MAX_OUT  # floats

    def packed(self):
        return wide_packed(self.layers, self.tuning)

    def host_packing(self, dest="tc"):
        return host_packing(self.layers, dest, self.tuning)


def _round(n, m):
    return (n + m - 1) // m * m


def wide_packed(layers, tuning=Tuning()):
    """The wide kernel's ``<name>_tc_packed`` (floats): see :class:`WideLayout`."""
    layout = WideLayout(layers, tuning)
    width = layout.shape.width
    out = np.zeros(layout.size, np.float32)
    def pack(w, kp, npad, paired):
        if layout.shape.compact:
            return tf32.pack_compact(w, kp, npad, paired, layout.shape.form)
        return tf32.pack_layer(w, kp, npad, paired)

    # Paired k order: every layer's rows paired but the first's, whose input x is staged into act
    # permuted (x_column) so that the paired reads give the natural order.
    paired = layout.shape.paired
    parts = [pack(layer.w, kp, width, paired=paired and i > 0) for i, (layer, kp) in enumerate(zip(layers[:-1], layout.kp))]
    parts.append(tf32.pack_layer(layers[-1].w, 8 * layout.out_kt, 8, paired=paired and len(layers) > 1))
    frags = np.concatenate(parts)
    assert frags.size == 4 * layout.frag4
    out[:frags.size] = frags
    for layer, off in zip(layers, layout.bias):
        out[off:off + layer.n] = layer.b
    return out


def host_packing(layers, dest="tc", tuning=Tuning()):
    """C++ for ``<name>_device_upload``: the same packing as :func:`wide_packed` (``host`` and
    ``dest`` as for :func:`rosenna.emit.cuda.tc_chain.host_packing`)."""
    layout = WideLayout(layers, tuning)
    shape = layout.shape
    out = [tf32.host_layer(i, layer, kp // 8, shape.width // 8, first * shape.stage4, bias, shape.paired and i > 0, dest,
                           shape.compact, shape.form)
           for i, (layer, kp, first, bias) in enumerate(zip(layers, layout.kp, layout.first, layout.bias))]
    last = len(layers) - 1
    out.append(tf32.host_layer(last, layers[-1], layout.out_kt, 1, layout.out_frag4, layout.bias[-1], shape.paired and last > 0,
                               dest))
    return "\n".join(out)


def library():
    """``rosenna/data/rosenna_tc_wide.cuh``. It comes after :func:`rosenna.emit.cuda.tf32.device_lib`
    and the stage copy (``rosenna/data/rosenna_cp_async.cuh``)."""
    return fixed.load("rosenna_tc_wide.cuh")


def x_column(k, paired):
    """The column of act that input ``k`` (a C expression) is staged into: itself, or with
    ``paired`` its place in the paired k order (k8-tile positions 2t and 2t+1 hold t and t + 4)."""
    return f"(({k} & ~7) | (({k} & 3) << 1) | (({k} >> 2) & 1))" if paired else k


def wide_kernel(plan, layers, acts):
    """The wide kernel ``<name>_tc_kernel`` (its body only where the device code is compiled for
    sm_80 or later) and ``<name>_tc_usable``, which also opts the kernel into its shared memory."""
    n, nx, ny = plan.name, plan.nx, plan.ny
    layout = WideLayout(layers, plan.tuned)
    shape = layout.shape
    P, T, lda = shape.points, shape.threads, shape.lda
    k0p = layout.kp[0]
    out = layers[-1]
    tparams = f"{layout.stages}, {T}, {shape.wn}, {shape.ni}, {shape.ks}, {lda}, {str(shape.compact).lower()}"
    if shape.compact and shape.form == "weight" or shape.paired:  # (rosenna_tcw_w: the weights themselves)
        tparams += f", {str(shape.compact and shape.form == 'weight').lower()}"
    if shape.paired:  # (rosenna_tcw_a: the paired k order)
        tparams += ", true"
    lines = ["/* Per stage of the weight stream: its first input row within its layer. A table in the constant bank:",
             "   with k0 computed from g (mlp128) or carried through the loop (a 128-input MLP), ptxas spilled a",
             "   register at the 128-register cap of two blocks per SM. */",
             f"static __constant__ int {n}_tc_k0[{layout.stages}] = {{{', '.join(map(str, layout.k0))}}};",
             "",
             f"/* Tensor-core wide MLP: {P} points per block, their activations act[p][{lda}] in shared memory "
             f"(hidden layers",
             f"   padded to {shape.width} columns), {shape.wm} x {shape.wn} warps; the {layout.stages} stages of "
             f"{shape.stage_rows} weight rows streamed through two",
             f"   buffers; the output layer ({out.k} -> {out.n}) is one m16n8 tile per warp of the first "
             f"{P // 16}, its fragments read through",
             f"   L1. {shape.smem} bytes of dynamic shared memory. */",
             f"__global__ void __launch_bounds__({T}, {shape.min_blocks}) {n}_tc_kernel(int n, const float *ROSENNA_RESTRICT x, "
             "float *ROSENNA_RESTRICT y)",
             "{",
             "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800",
             "    extern __shared__ float4 rosenna_smem[];",
             "    float *act = reinterpret_cast<float *>(rosenna_smem);  /* point-major, as the A fragments read it */",
             f"    float4 *stage = rosenna_smem + {P * lda // 4};  /* after act: two stages of {shape.stage4 * 16} bytes */",
             f"    const float4 *F = reinterpret_cast<const float4 *>({n}_tc_packed.v);",
             f"    rosenna_stage_copy<{shape.stage4}, {T}>(stage, F);  /* stage 0 for the block's first points */",
             "    rosenna_stage_commit();",
             "    int slot = 0;  /* the buffer that holds stage g (the other one takes the prefetch) */",
             *([f"    for (long p0 = (long)blockIdx.x * {P}; p0 < n; p0 += (long)gridDim.x * {P}) {{",
                f"        const bool again = p0 + (long)gridDim.x * {P} < n;  /* the block has more points: prefetch stage 0 */"]
               if shape.persistent else
               [f"    {{  /* one tile of points per block (a loop over tiles spilled at the register cap) */",
                f"        const long p0 = (long)blockIdx.x * {P};",
                "        const bool again = false;"]),
             f"        /* x into columns 0 .. {k0p - 1}: zeros past {nx} inputs and past the point count (shared memory",
             "           is not zeroed, and a NaN there times a zero weight would not vanish)." + ("" if shape.paired else " */"),
             *(["           Paired k order: input k at its place in the paired order of its k8 tile (column 2t + 1 holds",
                "           input t + 4), so that the reads of columns 2tig, 2tig+1 give the first layer's rows tig, tig + 4. */"]
               if shape.paired else []),
             f"        for (int e = threadIdx.x; e < {P * k0p}; e += {T}) {{",
             f"            const int p = e / {k0p}, k = e % {k0p};",
             f"            act[p * {lda} + {x_column('k', shape.paired)}] = {f'k < {nx} && ' if nx < k0p else ''}p0 + p < n ? "
             f"x[(p0 + p) * {nx} + k] : 0.0f;",
             "        }"]
    lines += [f"        float acc[2][{shape.ni}][4];",
              "#pragma unroll",
              "        for (int mi = 0; mi < 2; ++mi)",
              "#pragma unroll",
              f"            for (int ni = 0; ni < {shape.ni}; ++ni)",
              "#pragma unroll",
              "                for (int r = 0; r < 4; ++r)",
              "                    acc[mi][ni][r] = 0.0f;",
              "        /* One loop over the stages of all hidden layers. */",
              "#pragma unroll 1",
              f"        for (int g = 0; g < {layout.stages}; ++g, slot ^= 1) {{",
              f"            rosenna_tcw_stage<{tparams}>(acc, act, stage, F, g, {n}_tc_k0[g], slot, again);"]
    for i, layer in enumerate(layers[:-1]):
        end = layout.first[i] + layout.count[i] - 1
        lines += [f"            {'if' if i == 0 else 'else if'} (g == {end})  /* layer {i} ends: {layer.k} -> {layer.n}, "
                  f"{layer.act or 'no activation'} */",
                  f"                rosenna_tcw_epilogue<{acts[i]}, {shape.wn}, {shape.ni}, {lda}>(acc, act, "
                  f"{n}_tc_packed.v + {layout.bias[i]});"]
    lines.append("        }")
    last = len(layers) - 1
    lines += ["        __syncthreads();  /* a warp's 16 output rows were written by other warps */",
              f"        /* layer {last}: {out.k} -> {out.n}, {out.act or 'no activation'}; warp w < {P // 16} takes points 16w .. +16 */",
              "        const int warp = threadIdx.x / 32;",
              f"        if (warp < {P // 16}) {{",
              "            const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;",
              "            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};",
              f"            rosenna_tcw_out<{layout.out_kt}, {lda}{', true' if shape.paired else ''}>(c, act, warp * 16, "
              f"F + {layout.out_frag4});",
              f"            const float *bias = {n}_tc_packed.v + {layout.bias[-1]};",
              "            const int col = 2 * tig;",
              "            const long r = p0 + warp * 16 + gid;",
              f"            const float b0 = __ldg(bias + col), b1 = __ldg(bias + col + 1);  /* padded to {WIDE_MAX_OUT}: in bounds */",
              f"            if (col < {ny} && r < n)\n                y[r * {ny} + col] = {acts[last]}(c[0] + b0);",
              f"            if (col + 1 < {ny} && r < n)\n                y[r * {ny} + col + 1] = {acts[last]}(c[1] + b1);",
              f"            if (col < {ny} && r + 8 < n)\n                y[(r + 8) * {ny} + col] = {acts[last]}(c[2] + b0);",
              f"            if (col + 1 < {ny} && r + 8 < n)\n                y[(r + 8) * {ny} + col + 1] = {acts[last]}(c[3] + b1);",
              "        }",
              "        __syncthreads();  /* the next points' x overwrites act */",
              "    }",
              *tf32.kernel_end(n, shape.smem)]
    return "\n".join(lines)


def wide_launch(plan, layers):
    """Statements of ``<name>_infer_batch`` that run the wide kernel and return, when usable: a
    persistent grid of as many blocks as the GPU holds at once (the tuning's ``wide_persistent``),
    each block taking every gridDim-th block of points with its weight stream running on from one
    to the next; else one block per block of points."""
    n = plan.name
    shape = WideShape(widest(layers), plan.tuned)
    wanted = f"((long)n + {shape.points - 1}) / {shape.points}"
    if not shape.persistent:
        return f"""    if ({n}_tc_usable()) {{
        {n}_tc_kernel<<<(unsigned){wanted}, {shape.threads}, {shape.smem}, (cudaStream_t)stream>>>(n, x, y);
        return cudaGetLastError() == cudaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
    }}
"""
    return tf32.persistent_launch(n, shape.threads, shape.smem, wanted)


class Wide(Kind):
    label = "3xTF32 wide"
    #: What the kernel file calls its copy of the weights.
    copy = "wide kernel"
    note = (" (on CUDA sm_80+: the wide 3xTF32 tensor-core kernel; compile with -DROSENNA_NO_TENSOR_CORES for\n"
            " * the FP32 kernel everywhere)")
    guard = tf32.GUARD

    def layout(self, choice):
        return WideLayout(choice.layers, choice.strategy.tuning)

    def kernel(self, plan, choice, acts):
        # The staged FP32 kernel's library carries the stage copy already.
        copy = "" if choice.base is staged.KIND else fixed.load("rosenna_cp_async.cuh") + "\n"
        return ("/* The wide 3xTF32 tensor-core kernel (see the header). */\n"
                + self.guard + "\n" + tf32.device_lib() + "\n" + copy + library() + "\n"
                + wide_kernel(plan, choice.layers, acts) + "\n#endif /* tensor cores */")

    def launch(self, plan, choice):
        return self.guard + "\n" + wide_launch(plan, choice.layers) + "#endif\n"


KIND = Wide()
