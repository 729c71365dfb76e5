"""The staged FP32 wide kernel of ``<name>_kernel.cu``: the default for mlp-wide chains that fit.

A port of the design study's ``k_mlp128_stream<8>`` (bench/mlp_bench.cu, kernel family 4,
"stream 64pt 8x8 cp.async": 1.60 ns/point for mlp128 on the H200 at 16M points, 1.62 at 1M, 69% of
the FP32 peak, relative L2 error 1.1e-7), generalised as the wide tensor-core kernel was
(:mod:`rosenna.emit.tensor_core`), and taking the same models (:func:`fits`: at least one hidden
layer, input and hidden layers at most 128 wide, output at most 8):

- a block of :data:`POINTS` (64) points, :data:`THREADS` (128) threads, keeps its activations in
  shared memory input-major, ``act[k][LDA]`` (points contiguous), one buffer for every layer;
- every hidden layer is one 64-point x 128-column product, padded to 128 columns with zero weights
  and zero bias (a padded column holds act(0), finite, and meets zero weight rows downstream);
  thread (tx, ty) = (t % 16, t / 16) owns points 8ty .. +8 and columns 4tx .. +4 and 64 + 4tx .. +4
  (a quarter-warp's 16-byte weight reads then cover 128 contiguous bytes: no bank conflict), 64
  accumulators;
- the weights, fp32 as ``[K][128]`` input-major rows with K padded to 16, stream through shared
  memory in stages of :data:`STAGE_ROWS` (16) rows, 8 KB, double-buffered across layer boundaries
  (stage g of all hidden layers lies at ``g * STAGE`` floats, so the next layer's first stage
  loads while this layer's last is multiplied); ``cp.async`` on sm_80+, plain loads through
  registers elsewhere (HIP, older GPUs; the same buffers and barriers);
- a layer ends with bias and activation written over ``act`` (every thread has read it: each
  stage ends on a barrier); the padded input rows are zeroed when x is read;
- the output layer is the design study's ``mlp128_out_layer``: each point's outputs in groups of
  4 columns, one thread per group, weights ``[K][4 or 8]`` through L1.

The packed array (``<name>_packed``): the hidden layers' stages, then their biases (128 floats
each), then the output layer's ``[K][NP]`` and its bias ``[NP]`` (:class:`StagedLayout`). It is
``__device__`` data always: ``cp.async`` reads global memory, not the constant bank.
"""

from rosenna.emit import tensor_core

POINTS = 64
THREADS = 128
#: Hidden layers are padded to this many columns; the activation buffer has this many rows.
WIDTH = 128
#: Row stride of act[k][LDA]: 64 points + 4 (16-byte aligned rows, the epilogue's stores spread).
LDA = POINTS + 4
STAGE_ROWS = 16
#: Floats per stage: 16 rows x 128 columns, 8 KB.
STAGE = STAGE_ROWS * WIDTH
#: Dynamic shared memory per block: act and two stages, 51,200 bytes (4 blocks = 16 warps per SM).
SMEM = (WIDTH * LDA + 2 * STAGE) * 4
#: Blocks per SM __launch_bounds__ asks for on CUDA: a 128-register cap.
MIN_BLOCKS = 4


def fits(layers):
    """Whether an MLP chain already judged mlp-wide takes the staged kernel: the wide tensor-core
    kernel's conditions (input and hidden layers <= 128, output <= 8)."""
    return tensor_core.wide_fits(layers)


def _round(n, m):
    return (n + m - 1) // m * m


class StagedLayout:
    """Where the staged kernel finds each layer in ``<name>_packed`` (float offsets).

    Hidden layer i has ``kp[i]`` rows (its input width padded to 16) of 128 columns: stages
    ``first[i]`` .. ``first[i] + count[i] - 1`` of one stream of ``stages`` stages, stage g at
    ``g * STAGE``; ``k0[g]`` is stage g's first row within its layer (the act row it reads), and
    ``ends[i]`` the stage that ends layer i. ``offsets``: per layer (weights, bias, row stride),
    as :class:`rosenna.emit.cuda.KernelChoice` keeps them for the other kernels."""

    def __init__(self, layers):
        hidden, out = layers[:-1], layers[-1]
        self.kp = [_round(layer.k, STAGE_ROWS) for layer in hidden]
        self.count = [kp // STAGE_ROWS for kp in self.kp]
        self.first = [sum(self.count[:i]) for i in range(len(hidden))]
        self.ends = [first + count - 1 for first, count in zip(self.first, self.count)]
        self.stages = sum(self.count)
        self.k0 = [STAGE_ROWS * s for count in self.count for s in range(count)]
        biases = self.stages * STAGE
        self.offsets = [(first * STAGE, biases + WIDTH * i, WIDTH) for i, first in enumerate(self.first)]
        self.out_np = _round(out.n, 4)
        out_w = biases + WIDTH * len(hidden)
        self.offsets.append((out_w, out_w + out.k * self.out_np, self.out_np))
        self.size = out_w + out.k * self.out_np + self.out_np


#: Device library of the staged kernel (inside the kernel file's anonymous namespace).
LIB = r"""/* The staged FP32 wide kernel's block (rosenna/emit/staged.py; the design study's k_mlp128_stream<8>).
   Thread (tx, ty) = (t % 16, t / 16) owns points 8ty .. +8 and columns 4tx .. +4, 64 + 4tx .. +4. */
""" + (f"constexpr int ROSENNA_FS_THREADS = {THREADS}, ROSENNA_FS_LDA = {LDA}, ROSENNA_FS_STAGE4 = {STAGE // 4};\n") + r"""
#if defined(__HIPCC__)
#define ROSENNA_FS_BOUNDS __launch_bounds__(""" + str(THREADS) + r""")
#else
#define ROSENNA_FS_BOUNDS __launch_bounds__(""" + f"{THREADS}, {MIN_BLOCKS}" + r""")
#endif
/* cp.async (sm_80+) copies 16 bytes global -> shared without passing through registers, so the
   next stage loads while this one is multiplied; elsewhere the copy goes through registers. The
   wide tensor-core kernel (-DROSENNA_TF32_WIDE) streams its stages through these three too. */
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define ROSENNA_CP_ASYNC 1
#endif

/* One stage of STAGE4 float4 global -> shared by THREADS threads, 16 bytes per thread and step. */
template <int STAGE4, int THREADS>
__device__ __forceinline__ void rosenna_stage_copy(float4 *dst, const float4 *ROSENNA_RESTRICT src)
{
    static_assert(STAGE4 % THREADS == 0, "a stage splits evenly over the threads");
#pragma unroll
    for (int i = 0; i < STAGE4 / THREADS; ++i) {
        const int e = i * THREADS + threadIdx.x;
#if defined(ROSENNA_CP_ASYNC)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst + e)),
                     "l"(src + e) : "memory");
#else
        dst[e] = __ldg(src + e);
#endif
    }
}

__device__ __forceinline__ void rosenna_stage_commit()
{
#if defined(ROSENNA_CP_ASYNC)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* Every group but the newest has landed: the newest is the stage being prefetched. */
__device__ __forceinline__ void rosenna_stage_wait_prev()
{
#if defined(ROSENNA_CP_ASYNC)
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#endif
}

/* Stage g of the STAGES-stage stream (16 rows of a hidden layer, the first at row k0 of
   act[k][LDA]) multiplied into the thread's 8 x 8 tile. On entry stage g is in flight in buffer
   g & 1; this prefetches stage g + 1 (the next layer's first at a layer's last) into the other.
   W: the hidden layers' weights, stage g at W + g * ROSENNA_FS_STAGE4. */
template <int STAGES>
__device__ __forceinline__ void rosenna_fs_stage(float (&acc)[8][8], const float *act, float4 *stage,
                                                 const float4 *ROSENNA_RESTRICT W, int g, int k0)
{
    constexpr int LDA = ROSENNA_FS_LDA;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    if (g + 1 < STAGES)
        rosenna_stage_copy<ROSENNA_FS_STAGE4, ROSENNA_FS_THREADS>(stage + ((g + 1) & 1) * ROSENNA_FS_STAGE4,
                                                             W + (g + 1) * ROSENNA_FS_STAGE4);
    rosenna_stage_commit();  /* possibly empty: keeps "all but the newest group" meaning stage g */
    rosenna_stage_wait_prev();
    __syncthreads();  /* stage g and the last epilogue's act are visible to every thread */
    const float *sw = reinterpret_cast<const float *>(stage + (g & 1) * ROSENNA_FS_STAGE4);
    const float *sa = act + k0 * LDA + ty * 8;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const float4 a0 = *reinterpret_cast<const float4 *>(sa + k * LDA);
        const float4 a1 = *reinterpret_cast<const float4 *>(sa + k * LDA + 4);
        const float4 w0 = *reinterpret_cast<const float4 *>(sw + k * 128 + tx * 4);
        const float4 w1 = *reinterpret_cast<const float4 *>(sw + k * 128 + 64 + tx * 4);
        const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[i][j] = fmaf(w[j], a[i], acc[i][j]);
    }
    __syncthreads();  /* buffer g & 1 is refilled next stage, and an epilogue may overwrite act */
}

/* A hidden layer's end: bias and activation written over act[k][LDA] as the next layer's input
   (every thread has read this layer's: rosenna_fs_stage ends on a barrier); the accumulators
   start again from zero. bias: the layer's, padded to 128. */
template <float (*ACT)(float)>
__device__ __forceinline__ void rosenna_fs_epilogue(float (&acc)[8][8], float *act, const float *ROSENNA_RESTRICT bias)
{
    constexpr int LDA = ROSENNA_FS_LDA;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const float4 b0 = __ldg(reinterpret_cast<const float4 *>(bias + tx * 4));
    const float4 b1 = __ldg(reinterpret_cast<const float4 *>(bias + 64 + tx * 4));
    const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            v[i] = ACT(acc[i][j] + b[j]);
            acc[i][j] = 0.0f;
        }
        float *o = act + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4) * LDA + ty * 8;
        *reinterpret_cast<float4 *>(o) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4 *>(o + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
}

/* The output layer (K -> N, W [K][NP] input-major, NP = N rounded up to 4) from act[k][LDA]: a
   point's outputs in NP / 4 groups of 4 columns, one thread per group, weights through L1. */
template <int K, int N, int NP, int BM, float (*ACT)(float)>
__device__ __forceinline__ void rosenna_fs_out(const float *ROSENNA_RESTRICT W, const float *ROSENNA_RESTRICT bias,
                                               const float *act, float *ROSENNA_RESTRICT y, long p0, int n)
{
    constexpr int CG = NP / 4, LDA = ROSENNA_FS_LDA;
    static_assert(ROSENNA_FS_THREADS % CG == 0, "whole points per pass");
    const int c = (threadIdx.x % CG) * 4;
    for (int pp = threadIdx.x / CG; pp < BM; pp += ROSENNA_FS_THREADS / CG) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
        for (int k = 0; k < K; ++k) {
            const float a = act[k * LDA + pp];
            const float4 w = __ldg(reinterpret_cast<const float4 *>(W + k * NP + c));
            acc[0] = fmaf(w.x, a, acc[0]);
            acc[1] = fmaf(w.y, a, acc[1]);
            acc[2] = fmaf(w.z, a, acc[2]);
            acc[3] = fmaf(w.w, a, acc[3]);
        }
        const float4 b4 = __ldg(reinterpret_cast<const float4 *>(bias + c));
        const float b[4] = {b4.x, b4.y, b4.z, b4.w};
        const long p = p0 + pp;
        if (p < n) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (c + j < N)
                    y[p * N + c + j] = ACT(acc[j] + b[j]);
        }
    }
}
"""


def kernel(plan, layers, acts):
    """``<name>_batch_kernel`` (the staged kernel), its launch statement and the one-time setup
    (the shared-memory opt-in), as :func:`rosenna.emit.cuda._wide_kernel` returns them."""
    n, nx = plan.name, plan.nx
    layout = StagedLayout(layers)
    k0p = layout.kp[0]
    out = layers[-1]
    last = len(layers) - 1
    ow, ob, onp = layout.offsets[-1]
    lines = ["/* Per stage of the weight stream: its first row within its layer (the act row it reads). */",
             f"static __constant__ int {n}_fs_k0[{layout.stages}] = {{{', '.join(map(str, layout.k0))}}};",
             "",
             f"/* Staged FP32 wide MLP: {POINTS} points per block, their activations act[k][{LDA}] in shared memory, the "
             f"{layout.stages}",
             f"   stages of 16 weight rows (8 KB) streamed through two buffers; the output layer ({out.k} -> {out.n}) reads",
             f"   its weights through L1. {SMEM} bytes of dynamic shared memory. */",
             f"__global__ void ROSENNA_FS_BOUNDS {n}_batch_kernel(int n, const float *ROSENNA_RESTRICT x, float *ROSENNA_RESTRICT y)",
             "{",
             "    extern __shared__ float4 rosenna_smem[];",
             "    float *act = reinterpret_cast<float *>(rosenna_smem);  /* act[k][LDA]: input-major, points contiguous */",
             f"    float4 *stage = rosenna_smem + {WIDTH * LDA // 4};  /* after act: two stages of 8 KB */",
             f"    const float4 *W = reinterpret_cast<const float4 *>({n}_packed);",
             f"    const long p0 = (long)blockIdx.x * {POINTS};",
             "    rosenna_stage_copy<ROSENNA_FS_STAGE4, ROSENNA_FS_THREADS>(stage, W);",
             "    rosenna_stage_commit();",
             f"    /* x into rows 0 .. {k0p - 1}: zeros past {nx} inputs and past the point count (shared memory is not",
             "       zeroed, and a NaN there times a zero weight would not vanish). */",
             f"    for (int e = threadIdx.x; e < {POINTS * k0p}; e += {THREADS}) {{",
             f"        const int p = e / {k0p}, k = e % {k0p};",
             f"        act[k * {LDA} + p] = {f'k < {nx} && ' if nx < k0p else ''}p0 + p < n ? x[(p0 + p) * {nx} + k] : 0.0f;",
             "    }",
             "    float acc[8][8];",
             "#pragma unroll",
             "    for (int i = 0; i < 8; ++i)",
             "#pragma unroll",
             "        for (int j = 0; j < 8; ++j)",
             "            acc[i][j] = 0.0f;",
             "    /* One loop over the stages of all hidden layers, as the design study's kernel. */",
             "#pragma unroll 1",
             f"    for (int g = 0; g < {layout.stages}; ++g) {{",
             f"        rosenna_fs_stage<{layout.stages}>(acc, act, stage, W, g, {n}_fs_k0[g]);"]
    for i, layer in enumerate(layers[:-1]):
        lines += [f"        {'if' if i == 0 else 'else if'} (g == {layout.ends[i]})  /* layer {i} ends: {layer.k} -> {layer.n}, "
                  f"{layer.act or 'no activation'} */",
                  f"            rosenna_fs_epilogue<{acts[i]}>(acc, act, {n}_packed + {layout.offsets[i][1]});"]
    lines += ["    }",
              "    __syncthreads();  /* the last epilogue's act is visible to every thread */",
              f"    /* layer {last}: {out.k} -> {out.n}, {out.act or 'no activation'} */",
              f"    rosenna_fs_out<{out.k}, {out.n}, {onp}, {POINTS}, {acts[last]}>({n}_packed + {ow}, {n}_packed + {ob}, act, y, p0, n);",
              "}"]
    launch = f"    {n}_batch_kernel<<<(unsigned)(((long)n + {POINTS - 1}) / {POINTS}), {THREADS}, {SMEM}, (rosennaStream_t)stream>>>(n, x, y);"
    setup = (f"    static int configured;\n"
             f"    if (!configured) {{\n"
             f"        if (rosennaFuncSetAttribute((const void *){n}_batch_kernel, rosennaFuncAttributeMaxDynamicSharedMemorySize, {SMEM}) != rosennaSuccess)\n"
             f"            return ROSENNA_STATUS_LAUNCH;\n"
             f"        configured = 1;\n"
             f"    }}\n")
    return "\n".join(lines), launch, setup
