"""The native batched kernel: ``<name>_kernel.cu`` for ``ROSENNA_BACKEND=cuda`` or ``hip``.

One file serves CUDA and HIP: they differ only by the runtime names in :data:`RUNTIME_API`,
rendered once into ``rosenna_rt.h`` (``rosennaStream_t`` is ``cudaStream_t`` or ``hipStream_t``,
...). The kernel file owns every CUDA/HIP symbol; ``<name>.c`` is still compiled by the host
compiler, with ``-DROSENNA_NATIVE_KERNEL`` dropping its OpenMP ``<name>_infer_batch`` and making
``<name>_init`` call ``<name>_device_upload``.

What the kernel file holds:

- the plan's weights again, as device data (embedded: ``ROSENNA_CONST`` arrays, ``__constant__``
  when the model's weights fit in ``constant_limit`` bytes, ``__device__ const`` above; file-loaded:
  ``__device__`` storage filled by ``<name>_device_upload``);
- ``<name>_infer`` as a ``__device__`` function, the per-point body rendered from the same loop IR
  as the C file, for the user's own kernels (compile with relocatable device code and link with
  the device linker);
- ``<name>_infer_batch(n, x, y, stream)``: never allocates, copies or synchronises. The batched
  kernel is chosen by the shape of the model (the measurements are in docs/benchmarks.md):

  * ``mlp-narrow``: a chain of Gemm(+Relu/Sigmoid/Tanh) layers all narrower than
    :data:`WIDE_LAYER`: one thread per point, every layer unrolled with activations in registers,
    weights repacked input-major ``[K][N rounded up to 4]`` so that ``__constant__`` weights become
    FFMA operands, and ``__device__`` weights are read as 16-byte ``__ldg`` loads; on CUDA
    devices of sm_80 and later, chains with enough work per point (and every layer at most
    48 wide) run instead on the tensor cores in fp32-accurate 3xTF32, a warp carrying 32 points
    through every layer in registers (:mod:`rosenna.emit.tensor_core`);
  * ``mlp-wide``: such a chain with a hidden layer at least :data:`WIDE_LAYER` wide. Chains whose
    input and hidden layers are at most 128 wide and whose output is at most 8 (mlp128) take the
    staged FP32 kernel (:mod:`rosenna.emit.staged`, the design study's ``k_mlp128_stream<8>``,
    1.60 ns/point for mlp128 on the H200): 64 points per block, activations in shared memory,
    8 x 8 tiles per thread, the weights streamed through shared memory 16 rows at a time
    (``cp.async`` on sm_80+, plain loads on HIP and older GPUs). Compiled with
    ``-DROSENNA_TF32_WIDE``, CUDA sm_80+ runs these on the tensor cores in 3xTF32 instead
    (:mod:`rosenna.emit.tensor_core`): 1.06 vs 1.60 ns/point on the H200, relative L2 error
    1.5e-6 vs 1.1e-7; outside verify's elementwise tolerance on about 1 output in a million, so
    it is not the default. Wider chains take the FP32 tile kernel: a block of
    :data:`WIDE_POINTS` points keeps its activations in shared memory and each thread computes
    an 8-point x 8-column tile per pass over the input vector (the output layer: 1 x 4);
  * ``point``: anything else, one thread per point calling ``<name>_infer``.

  Only single precision takes the MLP paths; double precision takes ``point``.
  ``-DROSENNA_NO_TENSOR_CORES`` on the kernel file's compile line keeps FP32 kernels everywhere
  (it also overrides ``-DROSENNA_TF32_WIDE``).
"""

import numpy as np

from rosenna import ops
from rosenna.emit import c as cemit
from rosenna.emit import staged, tensor_core, whole
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer
from rosenna.kernel import Var

#: Embedded weights up to this many bytes go to __constant__ memory (the toolchain profile's
#: ``constant_limit_bytes`` overrides it). Measured on the H200 (docs/benchmarks.md, run 1):
#: __constant__ was 1.2-2.2x faster than global loads up to 5.7 KB of weights and 2-5x slower from
#: 9.6 KB, where the per-SM constant cache no longer holds them.
CONSTANT_LIMIT = 6144

#: A hidden layer at least this wide sends an MLP to the tiled (shared-memory) kernel.
WIDE_LAYER = 96
#: Points per block and threads per block of the tiled kernel.
WIDE_POINTS = 64
WIDE_THREADS = 128
#: Threads per block of the one-point-per-thread kernels.
POINT_THREADS = 256
#: __device__ weights of the one-thread-per-point MLP kernel up to this many bytes are copied into
#: shared memory once per block.
NARROW_SHARED_LIMIT = 32 * 1024
#: Shared memory the tiled kernel may ask for, per block.
WIDE_SMEM_LIMIT = 100 * 1024

#: Activations the MLP paths fuse (attribute-free: their formula comes from the op module).
MLP_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh")

#: The runtime API as CUDA and HIP spell it: name used in generated code -> (CUDA, HIP).
RUNTIME_API = (
    ("rosennaStream_t", "cudaStream_t", "hipStream_t"),
    ("rosennaError_t", "cudaError_t", "hipError_t"),
    ("rosennaSuccess", "cudaSuccess", "hipSuccess"),
    ("rosennaGetLastError", "cudaGetLastError", "hipGetLastError"),
    ("rosennaMemcpyToSymbol", "cudaMemcpyToSymbol", "hipMemcpyToSymbol"),
    ("rosennaMemcpyHostToDevice", "cudaMemcpyHostToDevice", "hipMemcpyHostToDevice"),
    ("rosennaFuncSetAttribute", "cudaFuncSetAttribute", "hipFuncSetAttribute"),
    ("rosennaGetDevice", "cudaGetDevice", "hipGetDevice"),
    ("rosennaDeviceGetAttribute", "cudaDeviceGetAttribute", "hipDeviceGetAttribute"),
    ("rosennaDevAttrMultiProcessorCount", "cudaDevAttrMultiProcessorCount", "hipDeviceAttributeMultiprocessorCount"),
    ("rosennaFuncAttributeMaxDynamicSharedMemorySize", "cudaFuncAttributeMaxDynamicSharedMemorySize",
     "hipFuncAttributeMaxDynamicSharedMemorySize"),
)

#: The CUDA/HIP storage classes ROSENNA_CONST maps to in the kernel file.
CONSTANT_MEMORY = "__constant__"
GLOBAL_MEMORY = "__device__ const"


def runtime_mapping():
    """The CUDA/HIP block of ``rosenna_rt.h`` (identical for every model)."""
    width = max(len(name) for name, _, _ in RUNTIME_API)
    hip = "\n".join(f"#define {name:<{width}} {h}" for name, _, h in RUNTIME_API)
    cuda = "\n".join(f"#define {name:<{width}} {c}" for name, c, _ in RUNTIME_API)
    return f"""/* The native kernel (<name>_kernel.cu, ROSENNA_BACKEND=cuda|hip) names the runtime through
   these; hipcc on NVIDIA defines __CUDACC__ too, so HIP is tested first. */
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
{hip}
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
{cuda}
#endif
#if defined(__CUDACC__) || defined(__HIPCC__)
#define ROSENNA_CONSTANT_MEMORY {CONSTANT_MEMORY}
#define ROSENNA_GLOBAL_MEMORY {GLOBAL_MEMORY}
#endif"""


# -- the model's shape --------------------------------------------------------------------------

class Layer:
    """One dense layer of an MLP chain: ``y[n] = act(sum_k W[n][k] x[k] + b[n])``."""

    def __init__(self, k, n, act, w, b):
        self.k, self.n, self.act, self.w, self.b = k, n, act, w, b


def mlp_layers(plan):
    """The layers when ``plan`` is a single-precision chain of Gemm(+activation) layers from x to
    y, each with a bias; ``None`` otherwise (the generic kernel serves it)."""
    if plan.precision != "single" or len(plan.inputs) != 1 or len(plan.outputs) != 1:
        return None
    computed = [op for op, _ in plan.ops if not op.endswith("(alias)")]
    if not computed or len(plan.weights) != 2 * len(computed):
        return None
    layers, k = [], plan.nx
    for i, op in enumerate(computed):
        base, _, act = op.partition("+")
        if base != "Gemm" or (act and act not in MLP_ACTIVATIONS):
            return None
        w, b = plan.weights[2 * i].array, plan.weights[2 * i + 1].array
        n = b.size
        if w.size != n * k:
            return None
        layers.append(Layer(k, n, act or None, w.reshape(n, k), b))
        k = n
    return layers if k == plan.ny else None


def _round_up(n, m):
    return (n + m - 1) // m * m


class KernelChoice:
    """Which batched kernel a plan gets, with the packed weight layout it reads."""

    def __init__(self, plan, constant_limit):
        self.layers = mlp_layers(plan)
        self.weight_bytes = plan.parameters * plan.itemsize
        self.constant = plan.embed and self.weight_bytes <= constant_limit
        self.constant_limit = constant_limit
        self.kind = "point"
        self.offsets = []  # per layer: (w offset, b offset, padded width) into the packed array
        self.packed_size = 0
        if self.layers:
            hidden = [layer.n for layer in self.layers[:-1]]
            self._layout("mlp-wide" if hidden and max(hidden) >= WIDE_LAYER else "mlp-narrow")
            if self.kind == "mlp-wide" and self.wide_smem() > WIDE_SMEM_LIMIT:
                self._layout("mlp-narrow")
        # Wide MLPs up to 128 wide (output <= 8) take the staged FP32 kernel, everywhere.
        self.staged = self.kind == "mlp-wide" and staged.fits(self.layers)
        if self.staged:
            layout = staged.StagedLayout(self.layers)
            self.offsets, self.packed_size = layout.offsets, layout.size
        # CUDA on sm_80+ runs narrow chains on the tensor cores (3xTF32) unless the kernel file is
        # compiled with -DROSENNA_NO_TENSOR_CORES; the wide 3xTF32 kernel is there too for the
        # models the staged kernel takes, but compiled in only with -DROSENNA_TF32_WIDE (faster,
        # less accurate: see the module docstring).
        self.tensor_chain = self.kind == "mlp-narrow" and tensor_core.chain_fits(self.layers)
        self.tensor_wide = self.staged
        self.tc_guard = ""
        if self.tensor_chain:
            self.tc_guard = "#if !defined(__HIPCC__) && !defined(ROSENNA_NO_TENSOR_CORES)"
        elif self.tensor_wide:
            self.tc_guard = ("#if !defined(__HIPCC__) && !defined(ROSENNA_NO_TENSOR_CORES) && "
                             "defined(ROSENNA_TF32_WIDE)")

    def tensor_packed_size(self):
        """Floats in ``<name>_tc_packed`` (0 without a tensor-core kernel)."""
        if self.tensor_chain:
            return tensor_core.chain_bytes(self.layers) // 4
        if self.tensor_wide:
            return tensor_core.WideLayout(self.layers).size
        return 0

    def tensor_packed(self):
        """``<name>_tc_packed`` for embedded weights."""
        if self.tensor_chain:
            return tensor_core.chain_packed(self.layers)
        return tensor_core.wide_packed(self.layers)

    def tensor_host_packing(self):
        """C++ filling ``float *tc`` from ``host`` in ``<name>_device_upload`` (file-loaded)."""
        if self.tensor_chain:
            return tensor_core.host_packing(self.layers)
        return tensor_core.wide_host_packing(self.layers)

    def _layout(self, kind):
        self.kind, self.offsets, off = kind, [], 0
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            npad = _round_up(layer.n, 8 if kind == "mlp-wide" and not last else 4)
            self.offsets.append((off, off + layer.k * npad, npad))
            off += layer.k * npad + npad
        self.packed_size = off

    def wide_inplace(self):
        """One activation buffer: every hidden layer's 8x8 tiles fit one per thread."""
        return all((WIDE_POINTS // 8) * (npad // 8) <= WIDE_THREADS for _, _, npad in self.offsets[:-1])

    def wide_rows(self):
        return max([_round_up(self.layers[0].k, 1)] + [_round_up(l.n, 8) for l in self.layers[:-1]])

    def wide_smem(self):
        buffers = 1 if self.wide_inplace() else 2
        return buffers * self.wide_rows() * (WIDE_POINTS + 4) * 4

    def packed(self):
        """The packed weights: per layer W as [K][npad] (input-major) then the bias [npad]; the
        staged kernel's layout (:class:`rosenna.emit.staged.StagedLayout`) pads K and keeps the
        biases apart, so only the layer's own K rows are written here (the rest stays zero)."""
        out = np.zeros(self.packed_size, dtype=np.float32)
        for layer, (woff, boff, npad) in zip(self.layers, self.offsets):
            block = np.zeros((layer.k, npad), dtype=np.float32)
            block[:, :layer.n] = layer.w.T
            out[woff:woff + layer.k * npad] = block.reshape(-1)
            out[boff:boff + layer.n] = layer.b
        return out


# -- rendering ----------------------------------------------------------------------------------

VALUES_PER_LINE = 6


def _literals(values):
    lits = C.literals(np.asarray(values, np.float32), "single")
    rows = [", ".join(lits[i:i + VALUES_PER_LINE]) for i in range(0, len(lits), VALUES_PER_LINE)]
    return ",\n    ".join(rows)


def _plan_weights(plan):
    t = plan.ctype
    out = []
    for w in plan.weights:
        if plan.embed:
            values = ",\n    ".join(", ".join(row) for row in _chunks(C.weight_literals(w, plan.precision)))
            out.append(f"static ROSENNA_CONST {t} {cemit.symbol(plan, w.ident)}[{w.size}] = {{\n    {values}\n}};")
        else:
            out.append(f"static __device__ {t} {cemit.symbol(plan, w.ident)}[{w.size}];")
    return "\n".join(out)


def _chunks(items):
    return [items[i:i + VALUES_PER_LINE] for i in range(0, len(items), VALUES_PER_LINE)]


def _activation_fn(plan, name, act, renderer):
    expr = ops.get(act).expr({}, Var("v")) if act else Var("v")
    return (f"__device__ __forceinline__ float {name}(float v)\n{{\n"
            f"    return {renderer.expr(expr)};\n}}")


_NARROW_LIB = r"""/* 16 bytes from shared memory in one load (a plain float4 dereference was split into four). */
__device__ __forceinline__ float4 rosenna_lds4(const float *p)
{
#if defined(__HIPCC__)
    return *reinterpret_cast<const float4 *>(p);
#else
    float4 v;
    asm("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
#endif
}

/* One dense layer for one point, every index a constant once unrolled: K inputs in registers,
   N outputs in registers. W is [K][NP] input-major, then the bias [NP]. LD 0 reads scalars (from
   __constant__ they become FFMA operands), LD 1 reads 16 bytes at a time through __ldg, LD 2 16
   bytes from shared memory. The bias is added after the dot product, as in the C routine. */
template <int K, int N, int NP, int LD, float (*ACT)(float)>
__device__ __forceinline__ void rosenna_dense(const float *ROSENNA_RESTRICT W, const float (&in)[K], float (&out)[N])
{
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += 4) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            float w[4];
            if (LD == 1 || LD == 2) {
                const float4 v = LD == 1 ? __ldg(reinterpret_cast<const float4 *>(W + k * NP + n0))
                                         : rosenna_lds4(W + k * NP + n0);
                w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    w[j] = W[k * NP + n0 + j];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j)
                acc[j] = fmaf(w[j], in[k], acc[j]);
        }
        float b[4];
        if (LD == 1 || LD == 2) {
            const float4 v = LD == 1 ? __ldg(reinterpret_cast<const float4 *>(W + K * NP + n0))
                                     : rosenna_lds4(W + K * NP + n0);
            b[0] = v.x; b[1] = v.y; b[2] = v.z; b[3] = v.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                b[j] = W[K * NP + n0 + j];
        }
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (n0 + j < N)
                out[n0 + j] = ACT(acc[j] + b[j]);
    }
}
"""

_WIDE_LIB = r"""/* One dense layer for a block of BM points whose activations sit in shared memory input-major,
   act[k][LDA]. Work items are TM-point x TN-column tiles; a thread keeps its tile's TM*TN sums in
   registers over one pass through the K inputs (TM + TN loads feed TM*TN FMAs). W is [K][NP]
   input-major, then the bias [NP]. TO_Y writes the result to y[p][N] instead of shared memory.
   INPLACE (at most one item per thread): every thread finishes reading `in` before a barrier,
   then the results overwrite it, so one buffer serves all layers. */
template <int K, int NP, int TM, int TN, int LDA>
__device__ __forceinline__ void rosenna_tile_sums(const float *ROSENNA_RESTRICT W, const float *in, int item,
                                                  float (&acc)[TM][TN])
{
    constexpr int CG = NP / TN;
    const int cg = item % CG, pg = item / CG;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
        float a[TM], w[TN];
        if (TM % 4 == 0) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4 *>(in + k * LDA + pg * TM + i);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < TM; ++i)
                a[i] = in[k * LDA + pg * TM + i];
        }
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(W + k * NP + cg * TN + j));
            w[j] = v.x; w[j + 1] = v.y; w[j + 2] = v.z; w[j + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j)
                acc[i][j] = fmaf(w[j], a[i], acc[i][j]);
    }
}

template <int K, int N, int NP, int TM, int TN, float (*ACT)(float), bool TO_Y, int LDA>
__device__ __forceinline__ void rosenna_tile_store(const float *ROSENNA_RESTRICT W, int item, const float (&acc)[TM][TN],
                                                   float *out, float *ROSENNA_RESTRICT y, long p0, int n)
{
    constexpr int CG = NP / TN;
    const int cg = item % CG, pg = item / CG;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int col = cg * TN + j;
        const float bias = __ldg(W + K * NP + col);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const float v = ACT(acc[i][j] + bias);
            if (TO_Y) {
                const long p = p0 + pg * TM + i;
                if (p < n && col < N)
                    y[p * N + col] = v;
            } else {
                out[col * LDA + pg * TM + i] = v;
            }
        }
    }
}

template <int K, int N, int NP, int TM, int TN, float (*ACT)(float), bool TO_Y, bool INPLACE, int BM, int THREADS, int LDA>
__device__ __forceinline__ void rosenna_tile(const float *ROSENNA_RESTRICT W, const float *in, float *out,
                                             float *ROSENNA_RESTRICT y, long p0, int n)
{
    constexpr int ITEMS = (BM / TM) * (NP / TN);
    float acc[TM][TN];
    if (INPLACE) {
        static_assert(!INPLACE || ITEMS <= THREADS, "in place: at most one item per thread");
        const int item = threadIdx.x;
        if (item < ITEMS)
            rosenna_tile_sums<K, NP, TM, TN, LDA>(W, in, item, acc);
        __syncthreads();
        if (item < ITEMS)
            rosenna_tile_store<K, N, NP, TM, TN, ACT, TO_Y, LDA>(W, item, acc, out, y, p0, n);
    } else {
        for (int item = threadIdx.x; item < ITEMS; item += THREADS) {
            rosenna_tile_sums<K, NP, TM, TN, LDA>(W, in, item, acc);
            rosenna_tile_store<K, N, NP, TM, TN, ACT, TO_Y, LDA>(W, item, acc, out, y, p0, n);
        }
    }
}
"""


def _narrow_kernel(plan, choice, acts):
    n = plan.name
    shared = not choice.constant and choice.packed_size * 4 <= NARROW_SHARED_LIMIT
    ld = 0 if choice.constant else (2 if shared else 1)
    weights = f"{n}_packed"


    lines = [f"__global__ void __launch_bounds__({POINT_THREADS}) {n}_batch_kernel(int n, const float *ROSENNA_RESTRICT x, float *ROSENNA_RESTRICT y)",
             "{"]
    if shared:
        quads = choice.packed_size // 4
        weights = "w"
        lines += ["    /* The weights, copied once per block: broadcast 16-byte reads (run 2: 0.279 vs 0.357 ns for gemm_big). */",
                  f"    __shared__ float4 w4[{quads}];",
                  f"    for (int e = threadIdx.x; e < {quads}; e += {POINT_THREADS})",
                  f"        w4[e] = __ldg(reinterpret_cast<const float4 *>({n}_packed) + e);",
                  "    __syncthreads();",
                  "    const float *w = reinterpret_cast<const float *>(w4);",
                  f"    for (long i = (long)blockIdx.x * {POINT_THREADS} + threadIdx.x; i < n; i += (long)gridDim.x * {POINT_THREADS}) {{"]
    else:
        lines += [f"    const long i = (long)blockIdx.x * {POINT_THREADS} + threadIdx.x;",
                  "    if (i < n) {"]
    lines += [f"    float h0[{plan.nx}];",
             "#pragma unroll",
             f"    for (int e = 0; e < {plan.nx}; ++e)",
             f"        h0[e] = x[i * {plan.nx} + e];"]
    for li, (layer, (woff, _, npad)) in enumerate(zip(choice.layers, choice.offsets)):
        lines.append(f"    float h{li + 1}[{layer.n}];  /* layer {li}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */")
        lines.append(f"    rosenna_dense<{layer.k}, {layer.n}, {npad}, {ld}, {acts[li]}>({weights} + {woff}, h{li}, h{li + 1});")
    last = len(choice.layers)
    lines += ["#pragma unroll",
              f"    for (int e = 0; e < {plan.ny}; ++e)",
              f"        y[i * {plan.ny} + e] = h{last}[e];",
              "    }",
              "}"]
    # Indent the per-point body one level inside the point loop.
    head = lines.index("    float h0[%d];" % plan.nx)
    lines[head:-2] = ["    " + line if line.startswith("    ") else line for line in lines[head:-2]]
    blocks = f"(unsigned)((n + {POINT_THREADS - 1}) / {POINT_THREADS})"
    setup = ""
    if shared:
        # A persistent grid: each block copies the weights once, then loops over points.
        setup = ("    static int sms;\n"
                 "    if (!sms) {\n"
                 "        int device = 0;\n"
                 "        if (rosennaGetDevice(&device) != rosennaSuccess ||\n"
                 "            rosennaDeviceGetAttribute(&sms, rosennaDevAttrMultiProcessorCount, device) != rosennaSuccess)\n"
                 "            return ROSENNA_STATUS_LAUNCH;\n"
                 "    }\n"
                 f"    const long wanted = ((long)n + {POINT_THREADS - 1}) / {POINT_THREADS};\n")
        blocks = "(unsigned)(wanted < 4L * sms ? wanted : 4L * sms)"
    launch = f"    {n}_batch_kernel<<<{blocks}, {POINT_THREADS}, 0, (rosennaStream_t)stream>>>(n, x, y);"
    return "\n".join(lines), launch, setup


def _wide_kernel(plan, choice, acts):
    n = plan.name
    bm, threads, lda = WIDE_POINTS, WIDE_THREADS, WIDE_POINTS + 4
    rows = choice.wide_rows()
    smem = choice.wide_smem()
    inplace = choice.wide_inplace()
    buffers = "one activation buffer" if inplace else "two activation buffers"
    lines = [f"/* {bm} points per block, {threads} threads; {buffers} of {rows} x {lda} floats ({smem} bytes). */",
             f"__global__ void __launch_bounds__({threads}) {n}_batch_kernel(int n, const float *ROSENNA_RESTRICT x, float *ROSENNA_RESTRICT y)",
             "{",
             "    extern __shared__ float4 rosenna_smem[];",
             "    float *a = reinterpret_cast<float *>(rosenna_smem);",
             f"    float *b = {'a' if inplace else f'a + {rows * lda}'};",
             f"    const long p0 = (long)blockIdx.x * {bm};",
             f"    for (int e = threadIdx.x; e < {bm * plan.nx}; e += {threads}) {{",
             f"        const int p = e / {plan.nx}, k = e % {plan.nx};",
             f"        a[k * {lda} + p] = p0 + p < n ? x[(p0 + p) * {plan.nx} + k] : 0.0f;",
             "    }",
             "    __syncthreads();"]
    src, dst = "a", "b"
    for li, (layer, (woff, _, npad)) in enumerate(zip(choice.layers, choice.offsets)):
        last = li == len(choice.layers) - 1
        tm, tn = (1, 4) if last else (8, 8)
        lines.append(f"    /* layer {li}: {layer.k} -> {layer.n}, {layer.act or 'no activation'}; {tm} x {tn} tiles */")
        in_place = "true" if inplace and not last else "false"
        lines.append(f"    rosenna_tile<{layer.k}, {layer.n}, {npad}, {tm}, {tn}, {acts[li]}, {'true' if last else 'false'}, "
                     f"{in_place}, {bm}, {threads}, {lda}>({n}_packed + {woff}, {src}, {dst}, y, p0, n);")
        if not last:
            lines.append("    __syncthreads();")
        src, dst = dst, src
    lines.append("}")
    launch = (f"    {n}_batch_kernel<<<(unsigned)((n + {bm - 1}) / {bm}), {threads}, {smem}, (rosennaStream_t)stream>>>(n, x, y);")
    setup = (f"    static int configured;\n"
             f"    if (!configured) {{\n"
             f"        if (rosennaFuncSetAttribute((const void *){n}_batch_kernel, rosennaFuncAttributeMaxDynamicSharedMemorySize, {smem}) != rosennaSuccess)\n"
             f"            return ROSENNA_STATUS_LAUNCH;\n"
             f"        configured = 1;\n"
             f"    }}\n")
    return "\n".join(lines), launch, setup


def _point_kernel(plan):
    n, t = plan.name, plan.ctype
    nxm, nym = plan.nx, plan.ny
    text = (f"__global__ void __launch_bounds__({POINT_THREADS}) {n}_batch_kernel(int n, const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y)\n"
            "{\n"
            f"    const long i = (long)blockIdx.x * {POINT_THREADS} + threadIdx.x;\n"
            "    if (i < n)\n"
            f"        {n}_point(x + i * {nxm}, y + i * {nym});\n"
            "}")
    launch = (f"    {n}_batch_kernel<<<(unsigned)((n + {POINT_THREADS - 1}) / {POINT_THREADS}), {POINT_THREADS}, 0, "
              f"(rosennaStream_t)stream>>>(n, x, y);")
    return text, launch, ""


def kernel_source(plan, stamp, constant_limit=CONSTANT_LIMIT):
    """The text of ``<name>_kernel.cu``.

    The file is compiled twice (see :func:`makefile_rules`): plainly into ``<name>_kernel.o`` (the
    batched kernel and ``<name>_infer_batch``: whole-program code, and no device link needed), and
    with ``-DROSENNA_DEVICE_ROUTINE`` as relocatable device code into ``<name>_device.o`` (the
    ``__device__`` ``<name>_infer`` for the user's kernels). Relocatable code for the batched
    kernel cost registers: ptxas gave gemm_big's kernel 255 of them under -rdc, 111 without.

    Macros on the kernel file's compile line: ``-DROSENNA_TF32_WIDE`` makes CUDA sm_80+ run wide
    MLPs that the staged FP32 kernel takes on the 3xTF32 tensor-core kernel instead (1.06 vs 1.60
    ns/point on the H200, relative L2 error 1.5e-6 vs 1.1e-7; outside verify's elementwise
    tolerance on about 1 output in a million); ``-DROSENNA_NO_TENSOR_CORES`` keeps FP32 kernels
    everywhere (the narrow chain's tensor-core path too, and it overrides the former).
    """
    n, t = plan.name, plan.ctype
    choice = KernelChoice(plan, constant_limit)
    renderer = Renderer(C, plan.precision, cemit._resolver(plan))
    storage = CONSTANT_MEMORY if choice.constant else GLOBAL_MEMORY
    if plan.embed:
        why = (f"{choice.weight_bytes} bytes of weights, {'at or under' if choice.constant else 'over'} the "
               f"{constant_limit}-byte __constant__ limit")
        const_note = f"ROSENNA_CONST is {storage} here: {why}."
    else:
        const_note = f"File-loaded: the weights live in __device__ storage that {plan.name}_init fills."
    tc_note = ""
    if choice.tensor_chain:
        tc_note = (" (on CUDA sm_80+: the 3xTF32 tensor-core chain; compile with -DROSENNA_NO_TENSOR_CORES for the\n"
                   " * FP32 kernel everywhere)")
    elif choice.staged:
        tc_note = (", the staged FP32 kernel (rosenna/emit/staged.py). Compiled with -DROSENNA_TF32_WIDE, CUDA\n"
                   " * sm_80+ runs the wide 3xTF32 tensor-core kernel instead: 1.06 vs 1.60 ns/point on the H200 for mlp128,\n"
                   " * relative L2 error 1.5e-6 vs 1.1e-7; outside verify's elementwise tolerance (rtol 1e-5, atol 1e-6) on\n"
                   " * about 1 output in a million, hence not the default (-DROSENNA_NO_TENSOR_CORES overrides it)")
    body = "\n".join(cemit._body(plan, renderer))
    # The plan's own weight layout serves the per-point routine, the point kernel and infer_one;
    # the per-point function serves the first two.
    point_kernel = choice.kind == "point" and plan.path != "whole"
    point_fn_needed = "1" if point_kernel else "defined(ROSENNA_DEVICE_ROUTINE)"
    weights_needed = "1" if (point_kernel or whole.available(plan)) else "defined(ROSENNA_DEVICE_ROUTINE)"

    parts = [f"""/* {stamp}
 * {n}_kernel.cu: the native batched kernel ({n}_infer_batch) and, compiled with
 * -DROSENNA_DEVICE_ROUTINE as relocatable device code, the __device__ {n}_infer for the user's own
 * kernels. Built only by `make -f {n}.mk ROSENNA_BACKEND=cuda` (nvcc) or `hip` (hipcc); {n}.c
 * then drops its OpenMP {n}_infer_batch (-DROSENNA_NATIVE_KERNEL).
{cemit._layout_comment(plan)}
 * Batched kernel: {choice.kind}{tc_note}.{chr(10) + ' *' if choice.staged else ''} {const_note}
 */
#include "rosenna_rt.h"

#undef ROSENNA_CONST
#define ROSENNA_CONST {'ROSENNA_CONSTANT_MEMORY' if choice.constant else 'ROSENNA_GLOBAL_MEMORY'}
"""]
    if plan.weights:
        parts.append(f"#if {weights_needed}\n/* The weights as the per-point routine reads them (the C file's layout). */")
        parts.append(_plan_weights(plan))
        parts.append("#endif")
    parts.append(f"#if {point_fn_needed}\n/* One point: the same loops as {n}.c's {n}_infer. */\n"
                 f"static __device__ void {n}_point(const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y)\n"
                 f"{{\n{body}\n}}\n#endif\n")
    parts.append(f"""#if defined(ROSENNA_DEVICE_ROUTINE)
/* The per-point routine for the user's own kernels (link them with the device linker). */
extern "C" __device__ void {n}_infer(const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y)
{{
    {n}_point(x, y);
}}
{_routine_upload(plan) if not plan.embed else ''}#else /* the batched kernel */
""")
    if choice.layers:
        parts.append("/* The batched kernel's copy: per layer W input-major [K][NP], then the bias [NP]. */")
        if plan.embed:
            # The staged kernel's cp.async reads global memory: never the constant bank.
            storage_class = "__device__ const" if choice.staged else "ROSENNA_CONST"
            parts.append(f"static {storage_class} __align__(16) float {n}_packed[{choice.packed_size}] = {{\n"
                         f"    {_literals(choice.packed())}\n}};")
        else:
            parts.append(f"static __device__ __align__(16) float {n}_packed[{choice.packed_size}];")
    tc_size = choice.tensor_packed_size()
    if tc_size:
        which = "chain" if choice.tensor_chain else "wide kernel"
        parts.append(f"{choice.tc_guard}\n/* The tensor-core {which}'s copy: 3xTF32 B fragments per layer, then the "
                     "biases (rosenna/emit/tensor_core.py). */")
        if plan.embed:
            parts.append(f"static __device__ const __align__(16) float {n}_tc_packed[{tc_size}] = {{\n"
                         f"    {_literals(choice.tensor_packed())}\n}};")
        else:
            parts.append(f"static __device__ __align__(16) float {n}_tc_packed[{tc_size}];")
        parts.append("#endif")
    if not plan.embed:
        parts.append("static int ready;")
    acts = []
    if choice.layers:
        parts.append("\nnamespace {")
        for li, layer in enumerate(choice.layers):
            name = f"act{li}"
            parts.append(_activation_fn(plan, name, layer.act, renderer))
            acts.append(name)
        if choice.staged:
            parts.append(staged.LIB)
        else:
            parts.append(_WIDE_LIB if choice.kind == "mlp-wide" else _NARROW_LIB)
        parts.append("}  // namespace\n")
    parts.append(whole.cuda_source(plan))
    if plan.path == "whole":  # per-point locals too large for a thread: one sample at a time
        kernel, setup = "", ""
        launch = (f"    for (int i = 0; i < n; ++i) {{\n"
                  f"        const int status = {n}_infer_one(x + (long)i * {plan.nx}, y + (long)i * {plan.ny}, stream);\n"
                  f"        if (status != ROSENNA_STATUS_OK)\n            return status;\n    }}")
    elif choice.kind == "mlp-narrow":
        kernel, launch, setup = _narrow_kernel(plan, choice, acts)
    elif choice.staged:
        kernel, launch, setup = staged.kernel(plan, choice.layers, acts)
    elif choice.kind == "mlp-wide":
        kernel, launch, setup = _wide_kernel(plan, choice, acts)
    else:
        kernel, launch, setup = _point_kernel(plan)
    parts.append(kernel)
    if choice.tensor_chain:
        parts.append(choice.tc_guard + "\n" + tensor_core.DEVICE_LIB + "\n"
                     + tensor_core.chain_kernel(plan, choice.layers, acts) + "\n#endif /* tensor cores */")
        setup = choice.tc_guard + "\n" + tensor_core.chain_launch(plan) + "#endif\n" + setup
    elif choice.tensor_wide:
        parts.append("/* The wide 3xTF32 tensor-core kernel, only with -DROSENNA_TF32_WIDE (see the header). */\n"
                     + choice.tc_guard + "\n" + tensor_core.DEVICE_LIB + "\n" + tensor_core.WIDE_LIB + "\n"
                     + tensor_core.wide_kernel(plan, choice.layers, acts) + "\n#endif /* ROSENNA_TF32_WIDE */")
        setup = choice.tc_guard + "\n" + tensor_core.wide_launch(plan) + "#endif\n" + setup
    ready_check = "    if (!ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    parts.append(f"""
/* n points on the caller's stream: x[n][{plan.nx}] and y[n][{plan.ny}] are device pointers. Never
   allocates, copies or synchronises. */
extern "C" int {n}_infer_batch(int n, const {t} *x, {t} *y, void *stream)
{{
{ready_check}    if (n <= 0)
        return ROSENNA_STATUS_OK;
{setup}{launch}
    return rosennaGetLastError() == rosennaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
}}
""")
    if not plan.embed:
        parts.append(_upload(plan, choice))
    parts.append("#endif /* ROSENNA_DEVICE_ROUTINE */\n")
    return "\n".join(parts)


def _copies(plan):
    t = plan.ctype
    return "\n".join(f"    if (rosennaMemcpyToSymbol({cemit.symbol(plan, w.ident)}, host[{i}], sizeof({t}) * {w.size}, 0, "
                     f"rosennaMemcpyHostToDevice) != rosennaSuccess)\n        return ROSENNA_STATUS_DEVICE;"
                     for i, w in enumerate(plan.weights))


def _routine_upload(plan):
    n, t = plan.name, plan.ctype
    return f"""
/* Called by {n}_device_upload when this object is linked: fills the per-point routine's copy. */
extern "C" int {n}_routine_upload(const {t} *const *host)
{{
{_copies(plan)}
    return ROSENNA_STATUS_OK;
}}
"""


def _upload(plan, choice):
    n, t = plan.name, plan.ctype
    copies = _copies(plan) if (choice.kind == "point" or whole.available(plan)) else ""  # see weights_needed
    pack = ""
    if choice.layers:
        steps = []
        for li, (layer, (woff, boff, npad)) in enumerate(zip(choice.layers, choice.offsets)):
            steps.append(f"    for (int k = 0; k < {layer.k}; ++k)\n"
                         f"        for (int o = 0; o < {layer.n}; ++o)\n"
                         f"            packed[{woff} + k * {npad} + o] = host[{2 * li}][o * {layer.k} + k];\n"
                         f"    for (int o = 0; o < {layer.n}; ++o)\n"
                         f"        packed[{boff} + o] = host[{2 * li + 1}][o];")
        pack = (f"    float *packed = (float *)calloc({choice.packed_size}, sizeof(float));\n"
                f"    if (packed == NULL)\n        return ROSENNA_STATUS_DEVICE;\n"
                + "\n".join(steps) + "\n"
                f"    const int failed = rosennaMemcpyToSymbol({n}_packed, packed, sizeof(float) * {choice.packed_size}, 0, "
                f"rosennaMemcpyHostToDevice) != rosennaSuccess;\n"
                f"    free(packed);\n"
                f"    if (failed)\n        return ROSENNA_STATUS_DEVICE;\n")
    tc_pack, tc_helper = "", ""
    if choice.tensor_packed_size():
        size = choice.tensor_packed_size()
        tc_helper = choice.tc_guard + "\n" + tensor_core.HOST_TF32 + "#endif\n"
        tc_pack = (f"{choice.tc_guard}\n"
                   f"    float *tc = (float *)calloc({size}, sizeof(float));\n"
                   f"    if (tc == NULL)\n        return ROSENNA_STATUS_DEVICE;\n"
                   f"{choice.tensor_host_packing()}\n"
                   f"    const int tc_failed = cudaMemcpyToSymbol({n}_tc_packed, tc, sizeof(float) * {size}, 0, "
                   f"cudaMemcpyHostToDevice) != cudaSuccess;\n"
                   f"    free(tc);\n"
                   f"    if (tc_failed)\n        return ROSENNA_STATUS_DEVICE;\n"
                   f"#endif\n")
    return f"""#include <stdlib.h>
{tc_helper}
/* In <name>_device.o (lib{n}_device.a) when the program links it: a weak reference, so that a
   program that only calls {n}_infer_batch needs no device link. */
extern "C" int {n}_routine_upload(const {t} *const *host) __attribute__((weak));

/* Called by {n}_init (in {n}.c, built with -DROSENNA_NATIVE_KERNEL) once the weights file is read:
   host[i] is the i-th weight in the file's order. Copies them to the device, synchronously,
   outside any time-step loop. */
extern "C" int {n}_device_upload(const {t} *const *host)
{{
    ready = 0;
{copies}
{pack}{tc_pack}    if ({n}_routine_upload != NULL && {n}_routine_upload(host) != ROSENNA_STATUS_OK)
        return ROSENNA_STATUS_DEVICE;
    ready = 1;
    return ROSENNA_STATUS_OK;
}}
"""


def kernel_filename(plan):
    return f"{plan.name}_kernel.cu"


#: Per backend: default device compiler, its flags, the flag for relocatable device code, and the
#: runtime library a host-compiler link needs.
BACKENDS = {
    "cuda": {"DEVCC": "nvcc", "DEVFLAGS": "-O2 -arch=sm_80", "RDC": "-rdc=true",
             "LIBS": "-L$(ROSENNA_DEVICE_LIBDIR) -Wl,-rpath,$(ROSENNA_DEVICE_LIBDIR) -lcudart -lstdc++",
             # nvcc names its installation in its dry run (a wrapper script on PATH may hide it).
             "LIBDIR": "$(shell $(DEVCC) -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^\\#\\$$ TOP=//p')/lib64"},
    "hip": {"DEVCC": "hipcc", "DEVFLAGS": "-O2 --offload-arch=gfx90a", "RDC": "-fgpu-rdc",
            "LIBS": "-L$(ROSENNA_DEVICE_LIBDIR) -Wl,-rpath,$(ROSENNA_DEVICE_LIBDIR) -lamdhip64 -lstdc++",
            "LIBDIR": "$(or $(ROCM_PATH),/opt/rocm)/lib"},
}


def makefile_rules(name, defaults):
    """The backend switch of ``<name>.mk``: which objects lib<name>.a holds, and the kernel rules."""
    n = name
    lines = ["# ROSENNA_BACKEND=omp builds only <name>.c with CC. cuda|hip also compile <name>_kernel.cu",
             f"# with DEVCC and DEVFLAGS: {n}_kernel.o (the batched kernel, in lib{n}.a; a host compiler can",
             "# link it, adding ROSENNA_DEVICE_LIBS) and, as relocatable device code, " + f"{n}_device.o in",
             f"# lib{n}_device.a: the __device__ {n}_infer for your own kernels (link those with DEVCC).",
             ".DEFAULT_GOAL := all",
             "OBJCOPY ?= objcopy",
             "ROSENNA_OBJS = $(ROSENNA_DIR)/" + f"{n}.o"]
    for backend, conf in BACKENDS.items():
        devcc = defaults.get("DEVCC") if defaults.get("ROSENNA_BACKEND") == backend and defaults.get("DEVCC") else conf["DEVCC"]
        devflags = (defaults.get("DEVFLAGS") if defaults.get("ROSENNA_BACKEND") == backend and defaults.get("DEVFLAGS")
                    else conf["DEVFLAGS"])
        keyword = "ifeq" if backend == "cuda" else "else ifeq"
        lines += [f"{keyword} ($(ROSENNA_BACKEND),{backend})",
                  f"DEVCC ?= {devcc}",
                  f"DEVFLAGS ?= {devflags}",
                  f"ROSENNA_RDC = {conf['RDC']}",
                  f"ROSENNA_DEVICE_LIBDIR ?= {conf['LIBDIR']}",
                  f"ROSENNA_DEVICE_LIBS ?= {conf['LIBS']}"]
    lines += ["else ifneq ($(ROSENNA_BACKEND),omp)",
              "$(error ROSENNA_BACKEND=$(ROSENNA_BACKEND): choose omp, cuda or hip)",
              "endif",
              "ifneq ($(ROSENNA_BACKEND),omp)",
              "ROSENNA_NATIVE = -DROSENNA_NATIVE_KERNEL",
              f"ROSENNA_OBJS += $(ROSENNA_DIR)/{n}_kernel.o",
              f"ROSENNA_EXTRA = $(ROSENNA_DIR)/lib{n}_device.a",
              "endif",
              "",
              f"$(ROSENNA_DIR)/{n}_kernel.o: $(ROSENNA_DIR)/{n}_kernel.cu $(ROSENNA_DIR)/rosenna_rt.h",
              "\t$(DEVCC) $(DEVFLAGS) -c $< -o $@",
              "",
              f"$(ROSENNA_DIR)/{n}_device.o: $(ROSENNA_DIR)/{n}_kernel.cu $(ROSENNA_DIR)/rosenna_rt.h",
              "\t$(DEVCC) $(DEVFLAGS) $(ROSENNA_RDC) -DROSENNA_DEVICE_ROUTINE -c $< -o $@",
              f"\t$(OBJCOPY) --weaken-symbol={n}_infer $@  # its host stub yields to {n}.c's host routine",
              "",
              f"$(ROSENNA_DIR)/lib{n}_device.a: $(ROSENNA_DIR)/{n}_device.o",
              "\t$(AR) rcs $@ $^",
              "",
              "# The link flags a host-compiler link of lib" + f"{n}.a needs: LIBS=$$(make -s -f {n}.mk print-libs)",
              "print-libs:",
              "\t@echo $(ROSENNA_DEVICE_LIBS)",
              ""]
    return "\n".join(lines)
