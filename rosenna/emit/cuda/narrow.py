"""The FP32 narrow MLP kernel: chains of Gemm(+Relu/Sigmoid/Tanh) layers all narrower than
the tuning's ``wide_layer`` (or too wide for a tiled block's shared memory), at most
``narrow_max_width`` wide (rosenna.strategy.mlp.Narrow).

One thread per point, every layer unrolled with its activations in registers; the weights
repacked input-major ``[K][N rounded up to 4]`` so that ``__constant__`` weights become FFMA
operands, ``__device__`` weights up to the tuning's ``narrow_shared_limit`` bytes are copied into shared
memory once per block (a persistent grid), larger ones read as 16-byte ``__ldg`` loads. Its
device code is ``rosenna/data/rosenna_narrow.cuh``. On CUDA sm_80+ the tensor-core chain
(:mod:`rosenna.emit.cuda.tc_chain`) takes the chains it fits.
"""

from rosenna.emit import fixed
from rosenna.emit.cuda import copies
from rosenna.emit.cuda.base import Kind
from rosenna.emit.cuda.mlp import PackedLayout



class Narrow(Kind):
    label = "mlp-narrow"

    def library(self, choice):
        return fixed.load("rosenna_narrow.cuh")

    def layout(self, choice):
        return PackedLayout.dense(choice.layers, 4, 4)

    @staticmethod
    def shared(choice):
        return not choice.constant and choice.packed_size * 4 <= choice.strategy.tuning.narrow_shared_limit

    def kernel(self, plan, choice, acts):
        n, threads = plan.name, plan.tuned.point_threads
        shared = self.shared(choice)
        ld = 0 if choice.constant else (2 if shared else 1)
        weights = copies.ref(f"{n}_packed")
        lines = [f"__global__ void __launch_bounds__({threads}) {n}_batch_kernel(int n, const float *ROSENNA_RESTRICT x, "
                 "float *ROSENNA_RESTRICT y)",
                 "{"]
        if shared:
            quads = choice.packed_size // 4
            weights = "w"
            lines += ["    /* The weights, copied once per block: broadcast 16-byte reads (the second kernel study: 0.279 vs 0.357 ns for gemm_big). */",
                      f"    __shared__ float4 w4[{quads}];",
                      f"    for (int e = threadIdx.x; e < {quads}; e += {threads})",
                      f"        w4[e] = __ldg(reinterpret_cast<const float4 *>({copies.ref(n + '_packed')}) + e);",
                      "    __syncthreads();",
                      "    const float *w = reinterpret_cast<const float *>(w4);",
                      f"    for (long i = (long)blockIdx.x * {threads} + threadIdx.x; i < n; i += (long)gridDim.x * {threads}) {{"]
        else:
            lines += [f"    const long i = (long)blockIdx.x * {threads} + threadIdx.x;",
                      "    if (i < n) {"]
        # The per-point body, one level inside the point loop.
        body = [f"float h0[{plan.nx}];",
                "#pragma unroll",
                f"for (int e = 0; e < {plan.nx}; ++e)",
                f"    h0[e] = x[i * {plan.nx} + e];"]
        for li, (layer, (woff, _, npad)) in enumerate(zip(choice.layers, choice.offsets)):
            body.append(f"float h{li + 1}[{layer.n}];  /* layer {li}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */")
            body.append(f"rosenna_dense<{layer.k}, {layer.n}, {npad}, {ld}, {acts[li]}>({weights} + {woff}, h{li}, h{li + 1});")
        last = len(choice.layers)
        body += ["#pragma unroll",
                 f"for (int e = 0; e < {plan.ny}; ++e)",
                 f"    y[i * {plan.ny} + e] = h{last}[e];"]
        lines += [line if line.startswith("#") else "        " + line for line in body]
        lines += ["    }", "}"]
        return "\n".join(lines)

    def launch(self, plan, choice):
        n, threads = plan.name, plan.tuned.point_threads
        launch = "    {n}_batch_kernel<<<{blocks}, {threads}, 0, (rosennaStream_t)stream>>>(n, x, y);"
        if not self.shared(choice):
            blocks = f"(unsigned)((n + {threads - 1}) / {threads})"
            return "", launch.format(n=n, blocks=blocks, threads=threads)
        # A persistent grid: each block copies the weights once, then loops over points.
        setup = ("    static int sms;\n"
                 "    if (!sms) {\n"
                 "        int device = 0;\n"
                 "        if (rosennaGetDevice(&device) != rosennaSuccess ||\n"
                 "            rosennaDeviceGetAttribute(&sms, rosennaDevAttrMultiProcessorCount, device) != rosennaSuccess)\n"
                 "            return ROSENNA_STATUS_LAUNCH;\n"
                 "    }\n"
                 f"    const long wanted = ((long)n + {threads - 1}) / {threads};\n")
        return setup, launch.format(n=n, blocks="(unsigned)(wanted < 4L * sms ? wanted : 4L * sms)", threads=threads)


KIND = Narrow()
