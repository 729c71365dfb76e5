"""Tensor-core MLP kernels for ``<name>_kernel.cu``: fp32-accurate 3xTF32 on ``mma.sync`` (sm_80+).

Each fp32 operand is split into two TF32 numbers, ``a = big + small`` with ``big = tf32(a)`` and
``small = tf32(a - big)``; a product is ``big*big' + big*small' + small*big'`` (``small*small'``
lies below fp32 rounding), accumulated in fp32 by ``mma.sync.m16n8k8.f32.tf32.tf32.f32``. The
error stays at fp32 level (6e-8 on gemm_big against a float64 reference, docs/benchmarks.md run
5), at a fraction of the FP32 pipe's cost: gemm_big 0.18 ns per point against 0.23-0.28 for the
best FP32-FMA kernels measured.

The ``chain`` kernel (MLPs whose layers are all at most :data:`CHAIN_MAX_WIDTH` wide): a warp runs
32 points (two 16-row tiles) through every layer in registers. The C fragment of one layer, with
its activation applied, is the A fragment of the next once that layer's weight rows are stored
in the order the C fragment leaves them (``paired`` below); no shared memory between layers.
Widths are padded to 8 with zero weights and zero bias, so a padded column carries act(0) into
rows of the next layer whose weights are zero.

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
(:mod:`rosenna.emit.staged`), relative L2 error 1.5e-6 vs 1.1e-7; outside verify's elementwise
tolerance on about 1 output in a million (K = 128 means 48 MMAs per output, accumulated in the
tensor cores' truncating fp32).

Fragment layouts (PTX ISA, ``m16n8k8`` ``.tf32``), ``gid = lane / 4``, ``tig = lane % 4``:
A 16x8: a0 (gid, tig), a1 (gid+8, tig), a2 (gid, tig+4), a3 (gid+8, tig+4);
B 8x8: b0 (tig, gid), b1 (tig+4, gid); C 16x8: c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig),
c3 (gid+8, 2tig+1). The weights are packed per (k8 tile, n8 tile) as 32 lanes x
``{big(b0), big(b1), small(b0), small(b1)}``: one 16-byte load per lane.

The packing exists twice for each kernel, on purpose: here in numpy for embedded weights (literals
in the kernel file), and as C++ in ``<name>_device_upload`` for file-loaded ones
(:func:`host_packing`, :func:`wide_host_packing`); tests compile the C++ and compare the two bit
for bit.
"""

import numpy as np

#: Widest layer the register chain takes: 48 columns = 6 n8 tiles, 2 x 6 x 4 accumulators plus
#: the input fragments stay within the 255-register budget with room to spare (gemm_big, 40
#: wide, needs 102 registers).
CHAIN_MAX_WIDTH = 48
#: Below this many multiply-adds per point the FP32 kernel keeps the chain: such models are
#: memory-bound (gemm_small, 10 MACs, runs at the memory floor from __constant__ weights) and the
#: chain's strided 32-point fragments would not load x any faster. gemm_big has 2,780.
CHAIN_MIN_MACS = 512
#: Packed fragments and biases the chain kernel keeps in (static) shared memory per block.
CHAIN_SMEM_LIMIT = 40 * 1024
#: Threads per block of the chain kernel: 4 warps, 128 points per pass.
CHAIN_THREADS = 128
#: Points a warp carries through the chain: two 16-row MMA tiles.
CHAIN_POINTS_PER_WARP = 32


def _tiles(n):
    return (n + 7) // 8


def chain_fits(layers):
    """Whether an MLP chain takes the register-chain kernel."""
    if not layers or max(max(layer.k, layer.n) for layer in layers) > CHAIN_MAX_WIDTH:
        return False
    if sum(layer.k * layer.n for layer in layers) < CHAIN_MIN_MACS:
        return False
    return chain_bytes(layers) <= CHAIN_SMEM_LIMIT


def chain_offsets(layers):
    """Per layer: (float4 offset of its fragments, float offset of its bias in the bias block),
    and the sizes (float4 of fragments, floats of biases)."""
    frags, biases, f, b = [], [], 0, 0
    for layer in layers:
        frags.append(f)
        biases.append(b)
        f += 32 * _tiles(layer.k) * _tiles(layer.n)
        b += 8 * _tiles(layer.n)
    return frags, biases, f, b


def chain_bytes(layers):
    _, _, frag4, bias = chain_offsets(layers)
    return 16 * frag4 + 4 * bias


def tf32(values):
    """Round to TF32 (10-bit mantissa), to nearest, ties away from zero: ``cvt.rna.tf32.f32`` on
    the bit pattern, as the host packing in C++ does it."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _pack_layer(w, kp, npad, paired):
    """One layer's B fragments. ``w`` is [N][K] (ONNX Gemm with transB, as the plan holds it).
    ``paired``: physical rows tig and tig+4 of k-tile kt hold logical rows kt*8+2tig and +1."""
    n_out, k_in = w.shape
    full = np.zeros((kp, npad), np.float32)
    full[:k_in, :n_out] = w.T
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    out = []
    for kt in range(kp // 8):
        k0 = kt * 8 + (2 * t if paired else t)
        k1 = k0 + 1 if paired else k0 + 4
        for nt in range(npad // 8):
            c = nt * 8 + g
            v0, v1 = full[k0, c], full[k1, c]
            b0, b1 = tf32(v0), tf32(v1)
            out.append(np.stack([b0, b1, tf32(v0 - b0), tf32(v1 - b1)], axis=1))
    return np.concatenate(out).reshape(-1)


def chain_packed(layers):
    """Fragments of every layer (float4 units, flattened), then every layer's bias padded to 8."""
    frags, biases = [], []
    for i, layer in enumerate(layers):
        kp, npad = 8 * _tiles(layer.k), 8 * _tiles(layer.n)
        frags.append(_pack_layer(layer.w, kp, npad, paired=i > 0))
        bias = np.zeros(npad, np.float32)
        bias[:layer.n] = layer.b
        biases.append(bias)
    return np.concatenate(frags + biases).astype(np.float32)


#: Device library of the tensor-core kernels (CUDA only: inline PTX).
DEVICE_LIB = r"""/* TF32 tensor-core helpers (rosenna/emit/tensor_core.py says how the 3xTF32 split keeps fp32
   accuracy and how the fragments are laid out). */
__device__ __forceinline__ unsigned rosenna_tf32(float f)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

__device__ __forceinline__ void rosenna_mma(float (&d)[4], const unsigned (&a)[4], float b0, float b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

/* d += a * b in 3xTF32, the small products first: they are the ones fp32 accumulation must not
   lose. b = {big(b0), big(b1), small(b0), small(b1)}. */
__device__ __forceinline__ void rosenna_mma3(float (&d)[4], const float (&a)[4], const float4 &b)
{
    unsigned big[4], small[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        big[i] = rosenna_tf32(a[i]);
        small[i] = rosenna_tf32(a[i] - __uint_as_float(big[i]));
    }
    rosenna_mma(d, small, b.x, b.y);
    rosenna_mma(d, big, b.z, b.w);
    rosenna_mma(d, big, b.x, b.y);
}

/* One layer for the warp's 32 points: in[2][KT][4] A fragments (two 16-row tiles), out[2][NT][4]
   the activated C fragments reordered (c0, c2, c1, c3) into the next layer's A fragments. F: the
   layer's B fragments, bias: its bias padded to NT*8, both in shared memory. */
template <int KT, int NT, float (*ACT)(float)>
__device__ __forceinline__ void rosenna_tc_layer(const float4 *F, const float *bias, const float (&in)[2][KT][4],
                                                 float (&out)[2][NT][4])
{
    const int lane = threadIdx.x % 32, tig = lane % 4;
    float acc[2][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const float2 b = *reinterpret_cast<const float2 *>(bias + nt * 8 + 2 * tig);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            acc[mi][nt][0] = acc[mi][nt][2] = b.x;
            acc[mi][nt][1] = acc[mi][nt][3] = b.y;
        }
    }
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const float4 b = F[(kt * NT + nt) * 32 + lane];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                rosenna_mma3(acc[mi][nt], in[mi][kt], b);
        }
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            out[mi][nt][0] = ACT(acc[mi][nt][0]);
            out[mi][nt][1] = ACT(acc[mi][nt][2]);
            out[mi][nt][2] = ACT(acc[mi][nt][1]);
            out[mi][nt][3] = ACT(acc[mi][nt][3]);
        }
}
"""


def chain_kernel(plan, layers, acts):
    """The register-chain kernel ``<name>_tc_kernel`` (its body only where the device code is
    compiled for sm_80 or later) and the lines that launch it; the host side picks it when the
    kernel's binary for the current device is sm_80+ (``<name>_tc_usable``)."""
    n = plan.name
    frags, biases, frag4, nbias = chain_offsets(layers)
    size4 = frag4 + nbias // 4
    warps = CHAIN_THREADS // 32
    kt0 = _tiles(layers[0].k)
    lines = [f"/* Tensor-core chain: a warp carries {CHAIN_POINTS_PER_WARP} points through all {len(layers)} layers in "
             f"registers; {16 * frag4} bytes of",
             f"   fragments and {4 * nbias} of biases in shared memory once per block (persistent grid). */",
             f"__global__ void __launch_bounds__({CHAIN_THREADS}) {n}_tc_kernel(int n, const float *ROSENNA_RESTRICT x, "
             "float *ROSENNA_RESTRICT y)",
             "{",
             "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800",
             f"    __shared__ float4 s[{size4}];",
             f"    for (int e = threadIdx.x; e < {size4}; e += {CHAIN_THREADS})",
             f"        s[e] = __ldg(reinterpret_cast<const float4 *>({n}_tc_packed) + e);",
             "    __syncthreads();",
             f"    const float *bias = reinterpret_cast<const float *>(s + {frag4});",
             "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;",
             f"    for (long base = ((long)blockIdx.x * {warps} + warp) * {CHAIN_POINTS_PER_WARP}; base < n; "
             f"base += (long)gridDim.x * {warps * CHAIN_POINTS_PER_WARP}) {{",
             f"        /* Layer 0's A fragments: x[p][k], zeros past the point count and past {plan.nx} inputs. */",
             f"        float h0[2][{kt0}][4];",
             "#pragma unroll",
             "        for (int mi = 0; mi < 2; ++mi) {",
             "            const long r = base + mi * 16 + gid;",
             "#pragma unroll",
             f"            for (int kt = 0; kt < {kt0}; ++kt) {{",
             "                const int k0 = kt * 8 + tig, k1 = k0 + 4;",
             f"                h0[mi][kt][0] = k0 < {plan.nx} && r < n ? x[r * {plan.nx} + k0] : 0.0f;",
             f"                h0[mi][kt][1] = k0 < {plan.nx} && r + 8 < n ? x[(r + 8) * {plan.nx} + k0] : 0.0f;",
             f"                h0[mi][kt][2] = k1 < {plan.nx} && r < n ? x[r * {plan.nx} + k1] : 0.0f;",
             f"                h0[mi][kt][3] = k1 < {plan.nx} && r + 8 < n ? x[(r + 8) * {plan.nx} + k1] : 0.0f;",
             "            }",
             "        }"]
    for i, layer in enumerate(layers):
        kt, nt = _tiles(layer.k), _tiles(layer.n)
        lines += [f"        float h{i + 1}[2][{nt}][4];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */",
                  f"        rosenna_tc_layer<{kt}, {nt}, {acts[i]}>(s + {frags[i]}, bias + {biases[i]}, h{i}, h{i + 1});"]
    last, ny = len(layers), plan.ny
    nt_last = _tiles(layers[-1].n)
    lines += ["        /* Output columns 2tig and 2tig+1 of each n8 tile, rows gid and gid+8. */",
              "#pragma unroll",
              "        for (int mi = 0; mi < 2; ++mi) {",
              "            const long r = base + mi * 16 + gid;",
              "#pragma unroll",
              f"            for (int nt = 0; nt < {nt_last}; ++nt) {{",
              "                const int c = nt * 8 + 2 * tig;",
              f"                if (c < {ny} && r < n)\n                    y[r * {ny} + c] = h{last}[mi][nt][0];",
              f"                if (c < {ny} && r + 8 < n)\n                    y[(r + 8) * {ny} + c] = h{last}[mi][nt][1];",
              f"                if (c + 1 < {ny} && r < n)\n                    y[r * {ny} + c + 1] = h{last}[mi][nt][2];",
              f"                if (c + 1 < {ny} && r + 8 < n)\n                    y[(r + 8) * {ny} + c + 1] = h{last}[mi][nt][3];",
              "            }",
              "        }",
              "    }",
              "#else",
              "    (void)n; (void)x; (void)y;  /* no mma.sync before sm_80: never launched (see the host side) */",
              "#endif",
              "}",
              "",
              f"/* Whether this device runs {n}_tc_kernel's sm_80+ body: the binary the runtime picked for it. */",
              f"static bool {n}_tc_usable()",
              "{",
              "    static int usable = -1;",
              "    if (usable < 0) {",
              "        cudaFuncAttributes attributes;",
              f"        usable = cudaFuncGetAttributes(&attributes, {n}_tc_kernel) == cudaSuccess && attributes.binaryVersion >= 80;",
              "    }",
              "    return usable == 1;",
              "}"]
    return "\n".join(lines)


def chain_launch(plan):
    """Statements of ``<name>_infer_batch`` that run the chain kernel and return, when usable: a
    persistent grid of as many blocks as the GPU holds at once, each copying the weights once."""
    n = plan.name
    per_block = CHAIN_THREADS // 32 * CHAIN_POINTS_PER_WARP
    return f"""    if ({n}_tc_usable()) {{
        static int resident;
        if (!resident) {{
            int device = 0, sms = 0, per_sm = 0;
            if (cudaGetDevice(&device) != cudaSuccess ||
                cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {n}_tc_kernel, {CHAIN_THREADS}, 0) != cudaSuccess)
                return ROSENNA_STATUS_LAUNCH;
            resident = sms * (per_sm > 0 ? per_sm : 1);
        }}
        const long wanted = ((long)n + {per_block - 1}) / {per_block};
        {n}_tc_kernel<<<(unsigned)(wanted < resident ? wanted : resident), {CHAIN_THREADS}, 0, (cudaStream_t)stream>>>(n, x, y);
        return cudaGetLastError() == cudaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
    }}
"""


def _host_layer(i, layer, kt_tiles, nt_tiles, frag4, bias, paired, dest):
    """C++ packing one layer: its fragments at float4 offset ``frag4`` of ``dest`` ([kt][nt][lane],
    as :func:`_pack_layer`), its bias at float offset ``bias``."""
    k0 = "kt * 8 + 2 * t" if paired else "kt * 8 + t"
    k1 = "k0 + 1" if paired else "k0 + 4"
    return f"""    for (int kt = 0; kt < {kt_tiles}; ++kt)
        for (int nt = 0; nt < {nt_tiles}; ++nt)
            for (int lane = 0; lane < 32; ++lane) {{
                const int g = lane / 4, t = lane % 4, c = nt * 8 + g, k0 = {k0}, k1 = {k1};
                const float v0 = c < {layer.n} && k0 < {layer.k} ? host[{2 * i}][c * {layer.k} + k0] : 0.0f;
                const float v1 = c < {layer.n} && k1 < {layer.k} ? host[{2 * i}][c * {layer.k} + k1] : 0.0f;
                float *f = {dest} + 4 * ({frag4} + (kt * {nt_tiles} + nt) * 32 + lane);
                f[0] = rosenna_host_tf32(v0);
                f[1] = rosenna_host_tf32(v1);
                f[2] = rosenna_host_tf32(v0 - f[0]);
                f[3] = rosenna_host_tf32(v1 - f[1]);
            }}
    for (int o = 0; o < {layer.n}; ++o)
        {dest}[{bias} + o] = host[{2 * i + 1}][o];"""


def host_packing(layers, dest="tc"):
    """C++ for ``<name>_device_upload``: the same packing as :func:`chain_packed`, from the weights
    as the file holds them (``host[2i]`` is layer i's W as [N][K], ``host[2i+1]`` its bias), into
    ``float *{dest}`` (zeroed beforehand)."""
    frags, biases, frag4, _ = chain_offsets(layers)
    return "\n".join(_host_layer(i, layer, _tiles(layer.k), _tiles(layer.n), frags[i], 4 * frag4 + biases[i], i > 0, dest)
                     for i, layer in enumerate(layers))


#: Host TF32 rounding for :func:`host_packing` (the bit operation :func:`tf32` does in numpy).
HOST_TF32 = r"""#include <string.h>

/* TF32 rounding on the host: to nearest, ties away (cvt.rna), on the bit pattern. */
static float rosenna_host_tf32(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&f, &u, sizeof f);
    return f;
}
"""


# -- the wide kernel ------------------------------------------------------------------------------

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


def wide_fits(layers):
    """Whether an MLP chain (already judged wide, see cuda.KernelChoice) takes the tensor-core wide
    kernel: at least one hidden layer, input and every hidden layer at most :data:`WIDE_WIDTH`
    wide, output at most :data:`WIDE_MAX_OUT`."""
    if not layers or len(layers) < 2:
        return False
    return (layers[0].k <= WIDE_WIDTH and all(layer.n <= WIDE_WIDTH for layer in layers[:-1])
            and layers[-1].n <= WIDE_MAX_OUT)


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


def _round16(n):
    return (n + 15) // 16 * 16


def wide_packed(layers):
    """The wide kernel's ``<name>_tc_packed`` (floats): see :class:`WideLayout`."""
    layout = WideLayout(layers)
    out = np.zeros(layout.size, np.float32)
    parts = [_pack_layer(layer.w, kp, WIDE_WIDTH, paired=False) for layer, kp in zip(layers[:-1], layout.kp)]
    parts.append(_pack_layer(layers[-1].w, 8 * layout.out_kt, 8, paired=False))
    frags = np.concatenate(parts)
    assert frags.size == 4 * layout.frag4
    out[:frags.size] = frags
    for layer, off in zip(layers, layout.bias):
        out[off:off + layer.n] = layer.b
    return out


def wide_host_packing(layers, dest="tc"):
    """C++ for ``<name>_device_upload``: the same packing as :func:`wide_packed` (``host`` and
    ``dest`` as for :func:`host_packing`)."""
    layout = WideLayout(layers)
    out = [_host_layer(i, layer, kp // 8, WIDE_WIDTH // 8, first * WIDE_STAGE4, bias, False, dest)
           for i, (layer, kp, first, bias) in enumerate(zip(layers, layout.kp, layout.first, layout.bias))]
    last = len(layers) - 1
    out.append(_host_layer(last, layers[-1], layout.out_kt, 1, layout.out_frag4, layout.bias[-1], False, dest))
    return "\n".join(out)


_WIDE_CONSTANTS = (f"constexpr int ROSENNA_TCW_THREADS = {WIDE_THREADS}, ROSENNA_TCW_LDA = {WIDE_LDA}, "
                   f"ROSENNA_TCW_STAGE = {WIDE_STAGE4};\n")

#: Device library of the wide kernel, after :data:`DEVICE_LIB` and the staged FP32 kernel's library
#: (:data:`rosenna.emit.staged.LIB`), whose stage copy it uses: the two are always emitted together.
WIDE_LIB = r"""/* The wide tensor-core kernel's block (rosenna/emit/tensor_core.py, run 3 of the design study):
   ROSENNA_TCW_THREADS threads, 8 warps; warp (wm, wn) = (warp / 2, warp % 2) owns points
   32wm .. +32 and columns 64wn .. +64, 2 x 8 m16n8 tiles, 64 accumulators per thread. */
""" + _WIDE_CONSTANTS + r"""
/* An A fragment split once into its TF32 halves: each serves the warp's 8 n8 tiles. */
struct rosenna_split {
    unsigned big[4], small[4];
};

__device__ __forceinline__ rosenna_split rosenna_split_a(float a0, float a1, float a2, float a3)
{
    const float a[4] = {a0, a1, a2, a3};
    rosenna_split s;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        s.big[i] = rosenna_tf32(a[i]);
        s.small[i] = rosenna_tf32(a[i] - __uint_as_float(s.big[i]));
    }
    return s;
}

/* rosenna_mma3 with the A fragment already split: the small products first. */
__device__ __forceinline__ void rosenna_mma3s(float (&d)[4], const rosenna_split &a, const float4 &b)
{
    rosenna_mma(d, a.small, b.x, b.y);
    rosenna_mma(d, a.big, b.z, b.w);
    rosenna_mma(d, a.big, b.x, b.y);
}

/* One stage g of the STAGES-stage weight stream (16 input rows of a hidden layer, the first at
   column k0 of act[p][LDA]) multiplied into the warp's accumulators. On entry stage g is in
   flight in buffer g & 1; this prefetches stage g + 1 into the other buffer, the next layer's
   first stage at a layer's last, so the stream never stops at a layer boundary. F: all
   fragments, stage g at F + g * ROSENNA_TCW_STAGE. */
template <int STAGES>
__device__ __forceinline__ void rosenna_tcw_stage(float (&acc)[2][8][4], const float *act, float4 *stage,
                                                  const float4 *ROSENNA_RESTRICT F, int g, int k0)
{
    constexpr int LDA = ROSENNA_TCW_LDA;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int wm = warp / 2, wn = warp % 2;
    if (g + 1 < STAGES)
        rosenna_stage_copy<ROSENNA_TCW_STAGE, ROSENNA_TCW_THREADS>(stage + ((g + 1) & 1) * ROSENNA_TCW_STAGE,
                                                                 F + (g + 1) * ROSENNA_TCW_STAGE);
    rosenna_stage_commit();  /* possibly empty: keeps "all but the newest group" meaning stage g */
    rosenna_stage_wait_prev();
    __syncthreads();  /* stage g and the last epilogue's act are visible to every warp */
    const float4 *sb = stage + (g & 1) * ROSENNA_TCW_STAGE + wn * 8 * 32 + lane;
#pragma unroll
    for (int kt = 0; kt < 2; ++kt) {
        const float *sa = act + (wm * 32 + gid) * LDA + k0 + kt * 8 + tig;
        const rosenna_split a[2] = {rosenna_split_a(sa[0], sa[8 * LDA], sa[4], sa[8 * LDA + 4]),
                                    rosenna_split_a(sa[16 * LDA], sa[24 * LDA], sa[16 * LDA + 4], sa[24 * LDA + 4])};
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
            const float4 b = sb[(kt * 16 + ni) * 32];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                rosenna_mma3s(acc[mi][ni], a[mi], b);
        }
    }
    __syncthreads();  /* buffer g & 1 is refilled next stage, and an epilogue may overwrite act */
}

/* A hidden layer's end: bias and activation, written over act[p][LDA] as the next layer's input
   (every warp has read this layer's input: rosenna_tcw_stage ends on a barrier); the
   accumulators start again from zero. bias: the layer's, 128 floats. */
template <float (*ACT)(float)>
__device__ __forceinline__ void rosenna_tcw_epilogue(float (&acc)[2][8][4], float *act, const float *ROSENNA_RESTRICT bias)
{
    constexpr int LDA = ROSENNA_TCW_LDA;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int wm = warp / 2, wn = warp % 2;
    /* C fragment: c0, c1 at (row gid, columns 2tig, 2tig+1), c2, c3 at row gid + 8. */
#pragma unroll
    for (int ni = 0; ni < 8; ++ni) {
        const float2 b = __ldg(reinterpret_cast<const float2 *>(bias + wn * 64 + ni * 8 + 2 * tig));
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            float *o = act + (wm * 32 + mi * 16 + gid) * LDA + wn * 64 + ni * 8 + 2 * tig;
            float(&c)[4] = acc[mi][ni];
            *reinterpret_cast<float2 *>(o) = make_float2(ACT(c[0] + b.x), ACT(c[1] + b.y));
            *reinterpret_cast<float2 *>(o + 8 * LDA) = make_float2(ACT(c[2] + b.x), ACT(c[3] + b.y));
            c[0] = c[1] = c[2] = c[3] = 0.0f;
        }
    }
}
"""


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
