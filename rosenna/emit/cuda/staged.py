"""The staged FP32 wide kernel of ``<name>_kernel.cu``: the default for mlp-wide chains that fit.

A port of the design study's ``k_mlp128_stream<8>`` (bench/studies/design-mlp128/mlp_bench.cu, kernel family 4,
"stream 64pt 8x8 cp.async": 1.60 ns/point for mlp128 on the H200 at 16M points, 1.62 at 1M, 69% of
the FP32 peak, relative L2 error 1.1e-7), generalised as the wide tensor-core kernel was
(:mod:`rosenna.emit.cuda.tc_wide`), and taking the same models (rosenna.strategy.mlp.Staged: at least
one hidden layer, input and hidden layers at most 128 wide, output at most 8):

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

from rosenna.emit import fixed
from rosenna.emit.cuda import tiled
from rosenna.emit.cuda.base import Kind
from rosenna.emit.cuda.mlp import PackedLayout

# The block's shape is a fact of the fixed device code, rosenna/data/rosenna_staged.cuh: its threads'
# mapping (thread (tx, ty) owns points 8ty .. +8 and columns 4tx .. +4, 64 + 4tx .. +4) is written
# for these numbers, and fixed.load checks that the file spells the same ones.
#: Fact of rosenna_staged.cuh: points per block (8 thread rows of 8 points).
POINTS = 64
#: Fact of rosenna_staged.cuh: threads per block (ROSENNA_FS_THREADS).
THREADS = 128
#: Fact of rosenna_staged.cuh: hidden layers are padded to this many columns; the activation
#: buffer has this many rows.
WIDTH = 128
#: Fact of rosenna_staged.cuh: the row stride of act[k][LDA], 64 points + 4 (16-byte aligned rows,
#: the epilogue's stores spread; ROSENNA_FS_LDA).
LDA = POINTS + 4
#: Fact of rosenna_staged.cuh: rows of a weight stage.
STAGE_ROWS = 16
#: Fact of rosenna_staged.cuh: floats per stage, 16 rows x 128 columns, 8 KB (ROSENNA_FS_STAGE4 x 4).
STAGE = STAGE_ROWS * WIDTH
#: Fact of rosenna_staged.cuh: dynamic shared memory per block, act and two stages, 51,200 bytes
#: (4 blocks = 16 warps per SM; every architecture from sm_70 lets a block opt in to it).
SMEM = (WIDTH * LDA + 2 * STAGE) * 4
#: Default of the tuning's ``staged_min_blocks``, as rosenna_staged.cuh's ROSENNA_FS_BOUNDS spells the
#: blocks per SM __launch_bounds__ asks for on CUDA (the tuning's value replaces it in the text).
FILE_MIN_BLOCKS = 4


#: Fact of rosenna_staged.cuh: the widest output layer, its groups of 4 columns, one thread each.
MAX_OUT = 8


def _round(n, m):
    return (n + m - 1) // m * m


class StagedLayout(PackedLayout):
    """Where the staged kernel finds each layer in ``<name>_packed`` (float offsets).

    Hidden layer i has ``kp[i]`` rows (its input width padded to 16) of 128 columns: stages
    ``first[i]`` .. ``first[i] + count[i] - 1`` of one stream of ``stages`` stages, stage g at
    ``g * STAGE``; ``k0[g]`` is stage g's first row within its layer (the act row it reads), and
    ``ends[i]`` the stage that ends layer i. ``offsets``: per layer (weights, bias, row stride),
    as :class:`rosenna.emit.cuda.mlp.PackedLayout` keeps them for the other kernels."""

    def __init__(self, layers):
        self.layers = layers
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


def library(min_blocks=FILE_MIN_BLOCKS):
    """``rosenna/data/rosenna_staged.cuh``, checked against the constants above, asking ptxas for
    ``min_blocks`` blocks per SM (the tuning's ``staged_min_blocks``)."""
    bounds = f"__launch_bounds__({THREADS}, {FILE_MIN_BLOCKS})"
    text = fixed.load("rosenna_staged.cuh", ROSENNA_FS_THREADS=THREADS, ROSENNA_FS_LDA=LDA, ROSENNA_FS_STAGE4=STAGE // 4,
                      __launch_bounds__=f"{THREADS}, {FILE_MIN_BLOCKS}")
    return fixed.load("rosenna_cp_async.cuh") + "\n" + text.replace(bounds, f"__launch_bounds__({THREADS}, {min_blocks})")


class Staged(Kind):
    label = "mlp-wide"
    note = ", the staged FP32 kernel (rosenna/emit/cuda/staged.py)"

    def library(self, choice):
        return library(choice.strategy.tuning.staged_min_blocks)

    def layout(self, choice):
        return StagedLayout(choice.layers)

    def kernel(self, plan, choice, acts):
        return kernel(plan, choice.layers, acts)

    def launch(self, plan, choice):
        n = plan.name
        return tiled.shared_memory_opt_in(n, SMEM), (
            f"    {n}_batch_kernel<<<(unsigned)(((long)n + {POINTS - 1}) / {POINTS}), {THREADS}, {SMEM}, "
            "(rosennaStream_t)stream>>>(n, x, y);")


KIND = Staged()


def kernel(plan, layers, acts):
    """``<name>_batch_kernel``, the staged kernel."""
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
             f"    const float4 *W = reinterpret_cast<const float4 *>({n}_packed.v);",
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
                  f"            rosenna_fs_epilogue<{acts[i]}>(acc, act, {n}_packed.v + {layout.offsets[i][1]});"]
    lines += ["    }",
              "    __syncthreads();  /* the last epilogue's act is visible to every thread */",
              f"    /* layer {last}: {out.k} -> {out.n}, {out.act or 'no activation'} */",
              f"    rosenna_fs_out<{out.k}, {out.n}, {onp}, {POINTS}, {acts[last]}>({n}_packed.v + {ow}, {n}_packed.v + {ob}, act, y, p0, n);",
              "}"]
    return "\n".join(lines)
