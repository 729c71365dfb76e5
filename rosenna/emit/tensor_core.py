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

Fragment layouts (PTX ISA, ``m16n8k8`` ``.tf32``), ``gid = lane / 4``, ``tig = lane % 4``:
A 16x8: a0 (gid, tig), a1 (gid+8, tig), a2 (gid, tig+4), a3 (gid+8, tig+4);
B 8x8: b0 (tig, gid), b1 (tig+4, gid); C 16x8: c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig),
c3 (gid+8, 2tig+1). The weights are packed per (k8 tile, n8 tile) as 32 lanes x
``{big(b0), big(b1), small(b0), small(b1)}``: one 16-byte load per lane.

The packing exists twice, on purpose: here in numpy for embedded weights (literals in the kernel
file), and as C++ in ``<name>_device_upload`` for file-loaded ones (:func:`host_packing`); a test
compiles the C++ and compares the two bit for bit.
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


def host_packing(layers, dest="tc"):
    """C++ for ``<name>_device_upload``: the same packing as :func:`chain_packed`, from the weights
    as the file holds them (``host[2i]`` is layer i's W as [N][K], ``host[2i+1]`` its bias), into
    ``float *{dest}`` (zeroed beforehand)."""
    frags, biases, frag4, _ = chain_offsets(layers)
    out = []
    for i, layer in enumerate(layers):
        kp_tiles, np_tiles = _tiles(layer.k), _tiles(layer.n)
        k0 = "kt * 8 + 2 * t" if i > 0 else "kt * 8 + t"
        k1 = "k0 + 1" if i > 0 else "k0 + 4"
        out.append(f"""    for (int kt = 0; kt < {kp_tiles}; ++kt)
        for (int nt = 0; nt < {np_tiles}; ++nt)
            for (int lane = 0; lane < 32; ++lane) {{
                const int g = lane / 4, t = lane % 4, c = nt * 8 + g, k0 = {k0}, k1 = {k1};
                const float v0 = c < {layer.n} && k0 < {layer.k} ? host[{2 * i}][c * {layer.k} + k0] : 0.0f;
                const float v1 = c < {layer.n} && k1 < {layer.k} ? host[{2 * i}][c * {layer.k} + k1] : 0.0f;
                float *f = {dest} + 4 * ({frags[i]} + (kt * {np_tiles} + nt) * 32 + lane);
                f[0] = rosenna_host_tf32(v0);
                f[1] = rosenna_host_tf32(v1);
                f[2] = rosenna_host_tf32(v0 - f[0]);
                f[3] = rosenna_host_tf32(v1 - f[1]);
            }}
    for (int o = 0; o < {layer.n}; ++o)
        {dest}[{4 * frag4 + biases[i]} + o] = host[{2 * i + 1}][o];""")
    return "\n".join(out)


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
