"""The FP32 tile kernel: MLP chains with a hidden layer at least the tuning's ``wide_layer`` wide
that the staged kernel does not take (wider than 128, or an output wider than 8).

A block of the tuning's ``tiled_points`` points (``tiled_threads`` threads) keeps its activations in shared memory input-major, and
each thread computes an 8-point x 8-column tile per pass over the input vector (the output
layer: 1 x 4). Its device code is ``rosenna/data/rosenna_tile.cuh``.
"""

from rosenna.emit import fixed
from rosenna.emit.cuda.base import Kind
from rosenna.emit.cuda.mlp import PackedLayout, round_up

def layout(layers):
    return PackedLayout.dense(layers, 8, 4)


def inplace(layout, tuning):
    """One activation buffer: every hidden layer's 8x8 tiles fit one per thread."""
    return all((tuning.tiled_points // 8) * (npad // 8) <= tuning.tiled_threads for _, _, npad in layout.offsets[:-1])


def rows(layers):
    return max([round_up(layers[0].k, 1)] + [round_up(layer.n, 8) for layer in layers[:-1]])


def smem(layers, tuning):
    """Dynamic shared memory per block (bytes; rosenna.strategy.mlp.tiled_smem decided the kernel
    on it: tests/test_strategy_sweep.py checks the two equal)."""
    buffers = 1 if inplace(layout(layers), tuning) else 2
    return buffers * rows(layers) * (tuning.tiled_points + 4) * 4


class Tiled(Kind):
    label = "mlp-wide"

    def library(self, choice):
        return fixed.load("rosenna_tile.cuh")

    def layout(self, choice):
        return layout(choice.layers)

    def kernel(self, plan, choice, acts):
        n = plan.name
        bm, threads = plan.tuned.tiled_points, plan.tuned.tiled_threads
        lda = bm + 4
        nrows, nbytes, one = rows(choice.layers), smem(choice.layers, plan.tuned), inplace(choice.layout, plan.tuned)
        buffers = "one activation buffer" if one else "two activation buffers"
        lines = [f"/* {bm} points per block, {threads} threads; {buffers} of {nrows} x {lda} floats ({nbytes} bytes). */",
                 f"__global__ void __launch_bounds__({threads}) {n}_batch_kernel(int n, const float *ROSENNA_RESTRICT x, "
                 "float *ROSENNA_RESTRICT y)",
                 "{",
                 "    extern __shared__ float4 rosenna_smem[];",
                 "    float *a = reinterpret_cast<float *>(rosenna_smem);",
                 f"    float *b = {'a' if one else f'a + {nrows * lda}'};",
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
            in_place = "true" if one and not last else "false"
            lines.append(f"    rosenna_tile<{layer.k}, {layer.n}, {npad}, {tm}, {tn}, {acts[li]}, {'true' if last else 'false'}, "
                         f"{in_place}, {bm}, {threads}, {lda}>({n}_packed.v + {woff}, {src}, {dst}, y, p0, n);")
            if not last:
                lines.append("    __syncthreads();")
            src, dst = dst, src
        lines.append("}")
        return "\n".join(lines)

    def launch(self, plan, choice):
        n, nbytes, points = plan.name, smem(choice.layers, plan.tuned), plan.tuned.tiled_points
        return shared_memory_opt_in(n, nbytes), (
            f"    {n}_batch_kernel<<<(unsigned)((n + {points - 1}) / {points}), {plan.tuned.tiled_threads}, {nbytes}, "
            "(rosennaStream_t)stream>>>(n, x, y);")


def shared_memory_opt_in(n, nbytes):
    """Setup lines of ``<name>_infer_batch``: let ``<name>_batch_kernel`` have ``nbytes`` of
    dynamic shared memory, once."""
    return (f"    static int configured;\n"
            f"    if (!configured) {{\n"
            f"        if (rosennaFuncSetAttribute((const void *){n}_batch_kernel, rosennaFuncAttributeMaxDynamicSharedMemorySize, {nbytes}) != rosennaSuccess)\n"
            f"            return ROSENNA_STATUS_LAUNCH;\n"
            f"        configured = 1;\n"
            f"    }}\n")


KIND = Tiled()
