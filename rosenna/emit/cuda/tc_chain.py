"""The narrow 3xTF32 tensor-core chain (CUDA sm_80+), beside the FP32 narrow kernel.

The ``chain`` kernel (MLPs whose layers are all at most 64 wide: rosenna.strategy.mlp.TensorChain says
which; 64 columns = 8 n8 tiles, one 16-row tile of 8 x 4 accumulators plus the input fragments;
ptxas, sm_90: a 5-64-64-3 SiLU MLP 105 registers, no spill): a warp runs
32 points (two 16-row tiles), or 16 where a layer is wider than the tuning's ``chain_two_tiles_width``,
through every layer in registers. The C fragment of one layer, with
its activation applied, is the A fragment of the next once that layer's weight rows are stored
in the order the C fragment leaves them (``paired`` below); no shared memory between layers.
Widths are padded to 8 with zero weights and zero bias, so a padded column carries act(0) into
rows of the next layer whose weights are zero.

The 3xTF32 split and the fragment layouts: :mod:`rosenna.emit.cuda.tf32`.
"""

import numpy as np

from rosenna.emit.cuda import tf32
from rosenna.emit.cuda.base import Kind
from rosenna.emit.cuda.tf32 import tiles as _tiles
from rosenna.strategy import Tuning


# Threads per block of the chain kernel: the tuning's chain_warps, 32 each.
def points_per_warp(layers, tuning=Tuning()):
    """Points a warp carries through the chain kernel: 32, or 16 for layers over the tuning's
    ``chain_two_tiles_width``."""
    widest = max(max(layer.k, layer.n) for layer in layers)
    return 16 if widest > tuning.chain_two_tiles_width else 32


def chain_offsets(layers, compact=False):
    """Per layer: (float4 offset of its fragments, float offset of its bias in the bias block),
    and the sizes (float4 of fragments, floats of biases). ``compact``: 8-byte fragments
    (tf32.pack_compact; the per-point warp body, rosenna/emit/cuda/routine.py)."""
    frags, biases, f, b = [], [], 0, 0
    for layer in layers:
        frags.append(f)
        biases.append(b)
        f += (16 if compact else 32) * _tiles(layer.k) * _tiles(layer.n)
        b += 8 * _tiles(layer.n)
    return frags, biases, f, b


def chain_bytes(layers, compact=False):
    _, _, frag4, bias = chain_offsets(layers, compact)
    return 16 * frag4 + 4 * bias


def chain_packed(layers, compact=False, form="sum"):
    """Fragments of every layer (float4 units, flattened), then every layer's bias padded to 8
    (``form``: what compact fragments hold, tf32.pack_compact)."""
    frags, biases = [], []
    for i, layer in enumerate(layers):
        kp, npad = 8 * _tiles(layer.k), 8 * _tiles(layer.n)
        frags.append(tf32.pack_compact(layer.w, kp, npad, i > 0, form) if compact else
                     tf32.pack_layer(layer.w, kp, npad, paired=i > 0))
        bias = np.zeros(npad, np.float32)
        bias[:layer.n] = layer.b
        biases.append(bias)
    return np.concatenate(frags + biases).astype(np.float32)


def chain_kernel(plan, layers, acts):
    """The register-chain kernel ``<name>_tc_kernel`` (its body only where the device code is
    compiled for sm_80 or later) and the lines that launch it; the host side picks it when the
    kernel's binary for the current device is sm_80+ (``<name>_tc_usable``)."""
    n = plan.name
    frags, biases, frag4, nbias = chain_offsets(layers)
    size4 = frag4 + nbias // 4
    warps = plan.tuned.chain_warps
    threads = 32 * warps
    kt0 = _tiles(layers[0].k)
    points = points_per_warp(layers, plan.tuned)
    mt = points // 16
    lines = [f"/* Tensor-core chain: a warp carries {points} points through all {len(layers)} layers in "
             f"registers; {16 * frag4} bytes of",
             f"   fragments and {4 * nbias} of biases in shared memory once per block (persistent grid). */",
             f"__global__ void __launch_bounds__({threads}) {n}_tc_kernel(int n, const float *ROSENNA_RESTRICT x, "
             "float *ROSENNA_RESTRICT y)",
             "{",
             "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800",
             f"    __shared__ float4 s[{size4}];",
             f"    for (int e = threadIdx.x; e < {size4}; e += {threads})",
             f"        s[e] = __ldg(reinterpret_cast<const float4 *>({n}_tc_packed.v) + e);",
             "    __syncthreads();",
             f"    const float *bias = reinterpret_cast<const float *>(s + {frag4});",
             "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;",
             f"    for (long base = ((long)blockIdx.x * {warps} + warp) * {points}; base < n; "
             f"base += (long)gridDim.x * {warps * points}) {{",
             f"        /* Layer 0's A fragments: x[p][k], zeros past the point count and past {plan.nx} inputs. */",
             f"        float h0[{mt}][{kt0}][4];",
             "#pragma unroll",
             f"        for (int mi = 0; mi < {mt}; ++mi) {{",
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
        lines += [f"        float h{i + 1}[{mt}][{nt}][4];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */",
                  f"        rosenna_tc_layer<{kt}, {nt}, {acts[i]}, {mt}>(s + {frags[i]}, bias + {biases[i]}, h{i}, h{i + 1});"]
    last, ny = len(layers), plan.ny
    nt_last = _tiles(layers[-1].n)
    lines += ["        /* Output columns 2tig and 2tig+1 of each n8 tile, rows gid and gid+8. */",
              "#pragma unroll",
              f"        for (int mi = 0; mi < {mt}; ++mi) {{",
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
              *tf32.kernel_end(n)]
    return "\n".join(lines)


def chain_launch(plan, layers):
    """Statements of ``<name>_infer_batch`` that run the chain kernel and return, when usable: a
    persistent grid of as many blocks as the GPU holds at once, each copying the weights once."""
    n, threads = plan.name, 32 * plan.tuned.chain_warps
    per_block = plan.tuned.chain_warps * points_per_warp(layers, plan.tuned)
    return tf32.persistent_launch(n, threads, 0, f"((long)n + {per_block - 1}) / {per_block}")


def host_packing(layers, dest="tc", compact=False, form="sum"):
    """C++ for ``<name>_device_upload``: the same packing as :func:`chain_packed`, from the weights
    as the file holds them (``host[layer.w_index]`` is its W as [N][K], ``host[layer.b_index]`` its bias), into
    ``float *{dest}`` (zeroed beforehand)."""
    frags, biases, frag4, _ = chain_offsets(layers, compact)
    return "\n".join(tf32.host_layer(i, layer, _tiles(layer.k), _tiles(layer.n), frags[i], 4 * frag4 + biases[i], i > 0, dest,
                                     compact, form) for i, layer in enumerate(layers))


class Chain(Kind):
    label = "3xTF32 chain"
    #: What the kernel file calls its copy of the weights.
    copy = "chain"
    note = (" (on CUDA sm_80+: the 3xTF32 tensor-core chain; compile with -DROSENNA_NO_TENSOR_CORES for the\n"
            " * FP32 kernel everywhere)")
    guard = tf32.GUARD

    def layout(self, choice):
        return ChainLayout(choice.layers)

    def kernel(self, plan, choice, acts):
        return (self.guard + "\n" + tf32.device_lib() + "\n" + chain_kernel(plan, choice.layers, acts)
                + "\n#endif /* tensor cores */")

    def launch(self, plan, choice):
        return self.guard + "\n" + chain_launch(plan, choice.layers) + "#endif\n"


class ChainLayout:
    """``<name>_tc_packed`` of the chain kernel (floats); ``compact``: 8-byte fragments holding
    ``form`` (tf32.pack_compact)."""

    def __init__(self, layers, compact=False, form="sum"):
        self.layers = layers
        self.compact, self.form = compact, form
        self.size = chain_bytes(layers, compact) // 4

    def packed(self):
        return chain_packed(self.layers, self.compact, self.form)

    def host_packing(self, dest="tc"):
        return host_packing(self.layers, dest, self.compact, self.form)


KIND = Chain()
