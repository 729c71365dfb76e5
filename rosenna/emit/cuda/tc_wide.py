"""The opt-in wide 3xTF32 tensor-core kernel (CUDA sm_80+, only with ``-DROSENNA_TF32_WIDE``).

The ``wide`` kernel (mlp-wide chains: input and hidden layers at most :data:`WIDE_WIDTH`, output at
most :data:`WIDE_MAX_OUT`; a port of the design study's hand-written mlp128 kernel, which ran at
1.04 ns/point on the H200 against 2.27 for the generated FP32 tile kernel): a block of 128 points keeps its activations in shared memory,
act[p][132], and every hidden layer, padded to 128 columns, is one 128 x 128 product of 8 warps
(32 points x 64 columns each). The weights stream through shared memory in stages of 16 rows
(16 KB of fragments), double-buffered by ``cp.async`` across layer boundaries; each layer ends
with bias and activation written back over act. Padded columns hold act(0), finite, and meet
zero weight rows downstream; the padded input columns are zeroed. The output layer is one
m16n8 tile per warp with its fragments read through L1. It is compiled in only with
``-DROSENNA_TF32_WIDE``: 1.06 vs 1.60 ns/point on the H200 against the default staged FP32 kernel
(:mod:`rosenna.emit.cuda.staged`), relative L2 error 1.5e-6 vs 1.1e-7; outside verify's elementwise
tolerance on about 1 output in a million (K = 128 means 48 MMAs per output, accumulated in the
tensor cores' truncating fp32).

The 3xTF32 split and the fragment layouts: :mod:`rosenna.emit.cuda.tf32`.
"""

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.cuda import staged, tf32
from rosenna.emit.cuda.base import Kind
from rosenna.emit.cuda.tf32 import tiles as _tiles

#: Points per block of the wide kernel and its threads: 8 warps, warp (wm, wn) = (warp / 2,
#: warp % 2) owning points 32wm .. +32 and columns 64wn .. +64 of every hidden layer. Run 3 of
#: the design study: 1.041 ns/point for mlp128 at 128 points per block (2 blocks per SM), 1.065
#: at 64.
WIDE_POINTS = 128
WIDE_THREADS = 256
#: Hidden layers are padded to this many columns (16 n8 tiles: 2 warps x 8); the input to it too.
WIDE_WIDTH = 128
#: Widest output: one n8 tile of the output MMA.
WIDE_MAX_OUT = 8
#: Row stride of the activation buffer act[p][LDA]: 132 puts a warp's 32 A-fragment reads (rows
#: gid, columns tig) in 32 distinct banks.
WIDE_LDA = WIDE_WIDTH + 4
#: Weight rows per cp.async stage (two k8 tiles) and a stage's size in float4: 2 x 16 n8 tiles
#: x 32 lanes, 16 KB.
WIDE_STAGE_ROWS = 16
WIDE_STAGE4 = 2 * (WIDE_WIDTH // 8) * 32
#: Dynamic shared memory per block: the activations and two stages, 98 KB: two blocks per SM on
#: sm_90 (227 KB), one on sm_80 (164 KB); every sm_80+ GPU lets a block opt in to at least 99 KB.
WIDE_SMEM = WIDE_POINTS * WIDE_LDA * 4 + 2 * WIDE_STAGE4 * 16


class WideLayout:
    """Where the wide kernel finds each layer in ``<name>_tc_packed``.

    Hidden layer i has ``kp[i]`` weight rows (its input width padded to 16) and 128 columns;
    its fragments are stages ``first[i]`` .. ``first[i] + count[i] - 1`` of one stream of
    ``stages`` stages, each stage ``WIDE_STAGE4`` float4 at offset ``g * WIDE_STAGE4``: packing
    layer after layer in [kt][nt][lane] order makes every stage two consecutive k8 tiles. The
    output layer's fragments follow (``out_kt`` k8 tiles x 1 n8 tile, at float4 ``out_frag4``),
    then the biases: 128 floats per hidden layer, 8 for the output (``bias[i]``, float offsets
    from the start of the array)."""

    def __init__(self, layers):
        self.layers = layers
        hidden = layers[:-1]
        self.kp = [_round16(layer.k) for layer in hidden]
        self.count = [kp // WIDE_STAGE_ROWS for kp in self.kp]
        self.first = [sum(self.count[:i]) for i in range(len(hidden))]
        self.stages = sum(self.count)
        self.out_frag4 = self.stages * WIDE_STAGE4
        self.out_kt = _tiles(layers[-1].k)
        self.frag4 = self.out_frag4 + 32 * self.out_kt
        self.bias = [4 * self.frag4 + WIDE_WIDTH * i for i in range(len(hidden))]
        self.bias.append(4 * self.frag4 + WIDE_WIDTH * len(hidden))
        self.size = self.bias[-1] + WIDE_MAX_OUT  # floats

    def packed(self):
        return wide_packed(self.layers)

    def host_packing(self, dest="tc"):
        return host_packing(self.layers, dest)


def _round16(n):
    return (n + 15) // 16 * 16


def wide_packed(layers):
    """The wide kernel's ``<name>_tc_packed`` (floats): see :class:`WideLayout`."""
    layout = WideLayout(layers)
    out = np.zeros(layout.size, np.float32)
    parts = [tf32.pack_layer(layer.w, kp, WIDE_WIDTH, paired=False) for layer, kp in zip(layers[:-1], layout.kp)]
    parts.append(tf32.pack_layer(layers[-1].w, 8 * layout.out_kt, 8, paired=False))
    frags = np.concatenate(parts)
    assert frags.size == 4 * layout.frag4
    out[:frags.size] = frags
    for layer, off in zip(layers, layout.bias):
        out[off:off + layer.n] = layer.b
    return out


def host_packing(layers, dest="tc"):
    """C++ for ``<name>_device_upload``: the same packing as :func:`wide_packed` (``host`` and
    ``dest`` as for :func:`rosenna.emit.cuda.tc_chain.host_packing`)."""
    layout = WideLayout(layers)
    out = [tf32.host_layer(i, layer, kp // 8, WIDE_WIDTH // 8, first * WIDE_STAGE4, bias, False, dest)
           for i, (layer, kp, first, bias) in enumerate(zip(layers, layout.kp, layout.first, layout.bias))]
    last = len(layers) - 1
    out.append(tf32.host_layer(last, layers[-1], layout.out_kt, 1, layout.out_frag4, layout.bias[-1], False, dest))
    return "\n".join(out)


def library():
    """``rosenna/data/rosenna_tc_wide.cuh``, checked against the constants above. It comes after
    :func:`rosenna.emit.cuda.tf32.device_lib` and the staged kernel's library, whose stage copy it
    uses: the staged kernel is always the FP32 kernel beside this one."""
    return fixed.load("rosenna_tc_wide.cuh", ROSENNA_TCW_THREADS=WIDE_THREADS, ROSENNA_TCW_LDA=WIDE_LDA,
                       ROSENNA_TCW_STAGE=WIDE_STAGE4)


def wide_kernel(plan, layers, acts):
    """The wide kernel ``<name>_tc_kernel`` (its body only where the device code is compiled for
    sm_80 or later) and ``<name>_tc_usable``, which also opts the kernel into its shared memory."""
    n, nx, ny = plan.name, plan.nx, plan.ny
    layout = WideLayout(layers)
    k0p = layout.kp[0]
    out = layers[-1]
    k0 = [WIDE_STAGE_ROWS * s for count in layout.count for s in range(count)]
    lines = ["/* Per stage of the weight stream: its first input row within its layer. A table in the constant bank:",
             "   with k0 computed from g (mlp128) or carried through the loop (a 128-input MLP), ptxas spilled a",
             "   register at the 128-register cap of two blocks per SM. */",
             f"static __constant__ int {n}_tc_k0[{layout.stages}] = {{{', '.join(map(str, k0))}}};",
             "",
             f"/* Tensor-core wide MLP: {WIDE_POINTS} points per block, their activations act[p][{WIDE_LDA}] in shared memory, "
             f"the {layout.stages}",
             f"   stages of 16 weight rows streamed through two 16 KB buffers; the output layer ({out.k} -> {out.n}) is one",
             f"   m16n8 tile per warp with its fragments read through L1. {WIDE_SMEM} bytes of dynamic shared memory. */",
             f"__global__ void __launch_bounds__({WIDE_THREADS}, 2) {n}_tc_kernel(int n, const float *ROSENNA_RESTRICT x, "
             "float *ROSENNA_RESTRICT y)",
             "{",
             "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800",
             "    extern __shared__ float4 rosenna_smem[];",
             "    float *act = reinterpret_cast<float *>(rosenna_smem);  /* point-major, as the A fragments read it */",
             f"    float4 *stage = rosenna_smem + {WIDE_POINTS * WIDE_LDA // 4};  /* after act: two stages of 16 KB */",
             f"    const float4 *F = reinterpret_cast<const float4 *>({n}_tc_packed);",
             f"    const long p0 = (long)blockIdx.x * {WIDE_POINTS};",
             "    rosenna_stage_copy<ROSENNA_TCW_STAGE, ROSENNA_TCW_THREADS>(stage, F);",
             "    rosenna_stage_commit();",
             f"    /* x into columns 0 .. {k0p - 1}: zeros past {nx} inputs and past the point count (shared memory",
             "       is not zeroed, and a NaN there times a zero weight would not vanish). */",
             f"    for (int e = threadIdx.x; e < {WIDE_POINTS * k0p}; e += {WIDE_THREADS}) {{",
             f"        const int p = e / {k0p}, k = e % {k0p};",
             f"        act[p * {WIDE_LDA} + k] = {f'k < {nx} && ' if nx < k0p else ''}p0 + p < n ? x[(p0 + p) * {nx} + k] : 0.0f;",
             "    }"]
    lines += ["    float acc[2][8][4];",
              "#pragma unroll",
              "    for (int mi = 0; mi < 2; ++mi)",
              "#pragma unroll",
              "        for (int ni = 0; ni < 8; ++ni)",
              "#pragma unroll",
              "            for (int r = 0; r < 4; ++r)",
              "                acc[mi][ni][r] = 0.0f;",
              "    /* One loop over the stages of all hidden layers, as the design study's kernel. */",
              "#pragma unroll 1",
              f"    for (int g = 0; g < {layout.stages}; ++g) {{",
              f"        rosenna_tcw_stage<{layout.stages}>(acc, act, stage, F, g, {n}_tc_k0[g]);"]
    for i, layer in enumerate(layers[:-1]):
        end = layout.first[i] + layout.count[i] - 1
        lines += [f"        {'if' if i == 0 else 'else if'} (g == {end})  /* layer {i} ends: {layer.k} -> {layer.n}, "
                  f"{layer.act or 'no activation'} */",
                  f"            rosenna_tcw_epilogue<{acts[i]}>(acc, act, {n}_tc_packed + {layout.bias[i]});"]
    lines.append("    }")
    last = len(layers) - 1
    lines += ["    __syncthreads();  /* a warp's 16 output rows were written by two warps */",
              f"    /* layer {last}: {out.k} -> {out.n}, {out.act or 'no activation'}; warp w takes points 16w .. +16 */",
              "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;",
              "    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};",
              f"    const float *sa = act + (warp * 16 + gid) * {WIDE_LDA} + tig;",
              "#pragma unroll 4",
              f"    for (int kt = 0; kt < {layout.out_kt}; ++kt) {{",
              f"        const rosenna_split a = rosenna_split_a(sa[kt * 8], sa[kt * 8 + {8 * WIDE_LDA}], sa[kt * 8 + 4], "
              f"sa[kt * 8 + {8 * WIDE_LDA + 4}]);",
              f"        rosenna_mma3s(c, a, __ldg(F + {layout.out_frag4} + kt * 32 + lane));",
              "    }",
              f"    const float *bias = {n}_tc_packed + {layout.bias[-1]};",
              "    const int col = 2 * tig;",
              "    const long r = p0 + warp * 16 + gid;",
              f"    const float b0 = __ldg(bias + col), b1 = __ldg(bias + col + 1);  /* padded to {WIDE_MAX_OUT}: in bounds */",
              f"    if (col < {ny} && r < n)\n        y[r * {ny} + col] = {acts[last]}(c[0] + b0);",
              f"    if (col + 1 < {ny} && r < n)\n        y[r * {ny} + col + 1] = {acts[last]}(c[1] + b1);",
              f"    if (col < {ny} && r + 8 < n)\n        y[(r + 8) * {ny} + col] = {acts[last]}(c[2] + b0);",
              f"    if (col + 1 < {ny} && r + 8 < n)\n        y[(r + 8) * {ny} + col + 1] = {acts[last]}(c[3] + b1);",
              "#else",
              "    (void)n; (void)x; (void)y;  /* no mma.sync before sm_80: never launched (see the host side) */",
              "#endif",
              "}",
              "",
              f"/* Whether this device runs {n}_tc_kernel: its binary for the device is sm_80+ (the runtime picked it), and",
              f"   the kernel may have its {WIDE_SMEM} bytes of shared memory. Otherwise the FP32 kernel runs. */",
              f"static bool {n}_tc_usable()",
              "{",
              "    static int usable = -1;",
              "    if (usable < 0) {",
              "        cudaFuncAttributes attributes;",
              f"        usable = cudaFuncGetAttributes(&attributes, {n}_tc_kernel) == cudaSuccess && attributes.binaryVersion >= 80 &&",
              f"                 cudaFuncSetAttribute({n}_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {WIDE_SMEM}) == "
              "cudaSuccess;",
              "        if (!usable)",
              "            (void)cudaGetLastError();  /* a refused attribute is no error of the caller's launch */",
              "    }",
              "    return usable == 1;",
              "}"]
    return "\n".join(lines)


def wide_launch(plan):
    """Statements of ``<name>_infer_batch`` that run the wide kernel and return, when usable: one
    block per 128 points (two resident per SM; a block's weights stream from L2)."""
    n = plan.name
    return f"""    if ({n}_tc_usable()) {{
        {n}_tc_kernel<<<(unsigned)(((long)n + {WIDE_POINTS - 1}) / {WIDE_POINTS}), {WIDE_THREADS}, {WIDE_SMEM}, (cudaStream_t)stream>>>(n, x, y);
        return cudaGetLastError() == cudaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
    }}
"""


#: Compiled in only on request: faster than the staged FP32 kernel, less accurate (module docstring).
GUARD = tf32.GUARD + " && defined(ROSENNA_TF32_WIDE)"


class Wide(Kind):
    label = "3xTF32 wide"
    #: What the kernel file calls its copy of the weights.
    copy = "wide kernel"
    guard = GUARD

    def fits(self, choice):
        return choice.base is staged.KIND

    def layout(self, choice):
        return WideLayout(choice.layers)

    def kernel(self, plan, choice, acts):
        return ("/* The wide 3xTF32 tensor-core kernel, only with -DROSENNA_TF32_WIDE (see the header). */\n"
                + self.guard + "\n" + tf32.device_lib() + "\n" + library() + "\n"
                + wide_kernel(plan, choice.layers, acts) + "\n#endif /* ROSENNA_TF32_WIDE */")

    def launch(self, plan, choice):
        return self.guard + "\n" + wide_launch(plan) + "#endif\n"


KIND = Wide()
