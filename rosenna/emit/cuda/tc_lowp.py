"""The bf16 / fp16 tensor-core chain (``--precision bf16`` / ``fp16``; CUDA sm_80+).

A warp carries 16 or 32 points (one or two 16-row tiles; the tuning's ``lowp_two_tiles_width``)
through every layer in registers: ``mma.sync.aligned.m16n8k16`` with 16-bit A and B and float32
accumulators, started from the float32 bias. The weights were rounded to the type when the model
was generated (rosenna.passes.low_precision); the kernel rounds the input and each hidden layer's
activated output to nearest even as it packs them into A fragments (``__floats2bfloat162_rn``,
``__floats2half2_rn``), which is the Cast the host code runs in front of each Gemm. The last layer's
sums and activation are stored in float32.

Fragment layouts (PTX ISA, ``m16n8k16``, ``.bf16`` / ``.f16``), ``gid = lane / 4``, ``tig = lane % 4``,
two 16-bit values per register, the lower column in the low half:
A 16x16: a0 (gid, 2tig..2tig+1), a1 (gid+8, 2tig..), a2 (gid, 2tig+8..), a3 (gid+8, 2tig+8..);
B 16x8: b0 (rows 2tig, 2tig+1; column gid), b1 (rows 2tig+8, 2tig+9; column gid);
C 16x8: c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig), c3 (gid+8, 2tig+1).
So n8 tiles 2j and 2j+1 of one layer's C fragments, packed in pairs (c0 c1, c2 c3), are k16 tile
j of the next layer's A fragment as they lie: no shuffle, no shared memory between layers, and the
weights in their natural order. Widths are padded (K to 16, N to 8) with zero weights and a zero
bias, so a padded column carries act(0) into rows of the next layer whose weights are zero.

The packed copy ``<name>_tc_packed`` (32-bit words): per layer, per (k16 tile, n8 tile), 32 lanes x
``{b0, b1}`` (one 8-byte shared-memory load per lane and MMA), then every layer's float32 bias padded
to 8 (as its bit pattern). It is packed twice, on purpose: here in numpy for embedded weights, and
as C++ in ``<name>_device_upload`` for file-loaded ones; tests/test_low_precision.py compares the
two bit for bit and replays the kernel's fragment arithmetic lane by lane.
"""

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.cuda import tf32
from rosenna.emit.cuda.base import Kind

#: The C++ type of each precision's 16-bit values, and its header.
TYPES = {"bf16": ("__nv_bfloat16", "cuda_bf16.h"), "fp16": ("__half", "cuda_fp16.h")}


def tiles8(n):
    return (n + 7) // 8


def tiles16(n):
    return (n + 15) // 16


def points_per_warp(layers, tuning):
    """32 (two 16-row tiles) when no layer is wider than ``tuning.lowp_two_tiles_width``, else 16."""
    widest = max(max(layer.k, layer.n) for layer in layers)
    return 32 if widest <= tuning.lowp_two_tiles_width else 16


def offsets(layers):
    """Per layer (word offset of its fragments, word offset of its bias), and the total words."""
    frags, biases, word = [], [], 0
    for layer in layers:
        frags.append(word)
        word += 64 * tiles16(layer.k) * tiles8(layer.n)
    for layer in layers:
        biases.append(word)
        word += 8 * tiles8(layer.n)
    return frags, biases, word


def bits16(values, precision):
    """The 16-bit patterns of ``values`` (float32 values of the type: already rounded, so the
    conversion is exact), as uint32."""
    v = np.asarray(values, np.float32)
    if precision == "fp16":
        return v.astype(np.float16).view(np.uint16).astype(np.uint32)
    return v.view(np.uint32) >> np.uint32(16)


def lane_pairs(w, kt_tiles, nt_tiles):
    """Per (k16 tile, n8 tile), in [kt][nt] order: the four weights lane l holds as
    ``(b0 lo, b0 hi, b1 lo, b1 hi)``, arrays over the 32 lanes. ``w`` is [N][K]."""
    n_out, k_in = w.shape
    full = np.zeros((16 * kt_tiles, 8 * nt_tiles), np.float32)
    full[:k_in, :n_out] = w.T
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    for kt in range(kt_tiles):
        k = kt * 16 + 2 * t
        for nt in range(nt_tiles):
            c = nt * 8 + g
            yield full[k, c], full[k + 1, c], full[k + 8, c], full[k + 9, c]


def packed(layers, precision):
    """``<name>_tc_packed`` as uint32 words (see the module docstring)."""
    frags, biases, size = offsets(layers)
    out = np.zeros(size, np.uint32)
    for layer, f, b in zip(layers, frags, biases):
        words = []
        for lo0, hi0, lo1, hi1 in lane_pairs(np.asarray(layer.w, np.float32), tiles16(layer.k), tiles8(layer.n)):
            b0 = bits16(lo0, precision) | (bits16(hi0, precision) << np.uint32(16))
            b1 = bits16(lo1, precision) | (bits16(hi1, precision) << np.uint32(16))
            words.append(np.stack([b0, b1], axis=1).reshape(-1))
        block = np.concatenate(words)
        out[f:f + block.size] = block
        out[b:b + layer.n] = np.asarray(layer.b, np.float32).view(np.uint32)
    return out


def host_packing(layers, precision, dest="tc"):
    """C++ for ``<name>_device_upload``: :func:`packed` from the weights as the file holds them
    (``host[layer.w_index]`` W as [N][K], ``host[layer.b_index]`` the bias) into ``unsigned *{dest}``
    (zeroed beforehand), each weight rounded to the type (``rosenna_host_<precision>``: a no-op on the
    generated weights file, whose values are the type's already)."""
    frags, biases, _ = offsets(layers)
    parts = []
    for layer, f, b in zip(layers, frags, biases):
        w = f"host[{layer.w_index}]"
        parts.append(f"""    for (int kt = 0; kt < {tiles16(layer.k)}; ++kt)
        for (int nt = 0; nt < {tiles8(layer.n)}; ++nt)
            for (int lane = 0; lane < 32; ++lane) {{
                const int c = nt * 8 + lane / 4, k = kt * 16 + 2 * (lane % 4);
                unsigned *f = {dest} + {f} + 2 * ((kt * {tiles8(layer.n)} + nt) * 32 + lane);
                for (int half = 0; half < 2; ++half)
                    for (int j = 0; j < 2; ++j) {{
                        const int kk = k + 8 * half + j;
                        const float v = c < {layer.n} && kk < {layer.k} ? {w}[c * {layer.k} + kk] : 0.0f;
                        f[half] |= rosenna_host_{precision}(v) << (16 * j);
                    }}
            }}
    for (int o = 0; o < {layer.n}; ++o)
        memcpy({dest} + {b} + o, host[{layer.b_index}] + o, sizeof(float));""")
    return "\n".join(parts)


def host_helper(precision):
    """``rosenna_host_<precision>``: a float's 16-bit pattern in the type, rounded to nearest even (the
    CUDA headers' host conversions)."""
    ctype, _ = TYPES[precision]
    convert = "__float2bfloat16_rn" if precision == "bf16" else "__float2half_rn"
    return f"""#include <string.h>
#include <{TYPES[precision][1]}>
/* A float as the bits of the nearest {ctype} (ties to even), for the packed B fragments. */
static unsigned rosenna_host_{precision}(float v)
{{
    const {ctype} h = {convert}(v);
    unsigned short bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}}
"""


def kernel(plan, layers, acts, precision):
    """``<name>_tc_kernel`` (its body only where the device code is compiled for sm_80 or later)
    and ``<name>_tc_usable``."""
    n, ctype = plan.name, TYPES[precision][0]
    frags, biases, size = offsets(layers)
    warps = plan.tuned.lowp_warps
    threads = 32 * warps
    points = points_per_warp(layers, plan.tuned)
    mt = points // 16
    kt0, nx, ny = tiles16(layers[0].k), plan.nx, plan.ny
    last = len(layers) - 1
    lines = [f"/* {precision} tensor-core chain: a warp carries {points} points through all {len(layers)} layers in "
             f"registers ({precision} weights and inputs,",
             f"   float32 sums); {4 * size} bytes of fragments and biases in shared memory once per block (persistent "
             "grid). */",
             f"__global__ void __launch_bounds__({threads}, 1) {n}_tc_kernel(int n, const float *ROSENNA_RESTRICT x, "
             "float *ROSENNA_RESTRICT y)",
             "{",
             "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800",
             "    extern __shared__ uint4 s[];",
             f"    for (int e = threadIdx.x; e < {size // 4}; e += {threads})",
             f"        s[e] = __ldg(reinterpret_cast<const uint4 *>({n}_tc_packed) + e);",
             "    __syncthreads();",
             "    const unsigned *words = reinterpret_cast<const unsigned *>(s);",
             "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;",
             f"    for (long base = ((long)blockIdx.x * {warps} + warp) * {points}; base < n; "
             f"base += (long)gridDim.x * {warps * points}) {{",
             f"        /* Layer 0's A fragments: x[p][k] rounded to {precision}, zeros past the point count and past "
             f"{nx} inputs. */",
             f"        unsigned h0[{mt}][{kt0}][4];",
             "#pragma unroll",
             f"        for (int mi = 0; mi < {mt}; ++mi) {{",
             "            const long r = base + mi * 16 + gid;",
             "#pragma unroll",
             f"            for (int kt = 0; kt < {kt0}; ++kt) {{",
             "                const int k = kt * 16 + 2 * tig;",
             "                float v[4][2];",
             "#pragma unroll",
             "                for (int q = 0; q < 4; ++q)",
             "#pragma unroll",
             "                    for (int j = 0; j < 2; ++j) {",
             "                        const long row = r + 8 * (q % 2);",
             "                        const int col = k + 8 * (q / 2) + j;",
             f"                        v[q][j] = col < {nx} && row < n ? x[row * {nx} + col] : 0.0f;",
             "                    }",
             "#pragma unroll",
             "                for (int q = 0; q < 4; ++q)",
             f"                    h0[mi][kt][q] = rosenna_lowp_ops<{ctype}>::pack(v[q][0], v[q][1]);",
             "            }",
             "        }"]
    for i, layer in enumerate(layers[:-1]):
        kt, nt = tiles16(layer.k), tiles8(layer.n)
        lines += [f"        unsigned h{i + 1}[{mt}][{(nt + 1) // 2}][4];  /* layer {i}: {layer.k} -> {layer.n}, "
                  f"{layer.act or 'no activation'} */",
                  f"        rosenna_lowp_layer<{ctype}, {kt}, {nt}, {acts[i]}, {mt}>(reinterpret_cast<const uint2 *>"
                  f"(words + {frags[i]}), reinterpret_cast<const float *>(words + {biases[i]}), h{i}, h{i + 1});"]
    out = layers[-1]
    nt_last = tiles8(out.n)
    lines += [f"        float acc[{mt}][{nt_last}][4];  /* layer {last}: {out.k} -> {out.n}, "
              f"{out.act or 'no activation'}, stored in float32 */",
              f"        rosenna_lowp_sums<{ctype}, {tiles16(out.k)}, {nt_last}, {mt}>(reinterpret_cast<const uint2 *>"
              f"(words + {frags[last]}), reinterpret_cast<const float *>(words + {biases[last]}), h{last}, acc);",
              "        /* Output columns 2tig and 2tig+1 of each n8 tile, rows gid and gid+8. */",
              "#pragma unroll",
              f"        for (int mi = 0; mi < {mt}; ++mi) {{",
              "            const long r = base + mi * 16 + gid;",
              "#pragma unroll",
              f"            for (int nt = 0; nt < {nt_last}; ++nt) {{",
              "                const int c = nt * 8 + 2 * tig;",
              f"                if (c < {ny} && r < n)\n                    y[r * {ny} + c] = {acts[last]}(acc[mi][nt][0]);",
              f"                if (c + 1 < {ny} && r < n)\n                    y[r * {ny} + c + 1] = {acts[last]}(acc[mi][nt][1]);",
              f"                if (c < {ny} && r + 8 < n)\n                    y[(r + 8) * {ny} + c] = {acts[last]}(acc[mi][nt][2]);",
              f"                if (c + 1 < {ny} && r + 8 < n)\n                    y[(r + 8) * {ny} + c + 1] = "
              f"{acts[last]}(acc[mi][nt][3]);",
              "            }",
              "        }",
              "    }",
              "#else",
              "    (void)n; (void)x; (void)y;  /* no mma.sync before sm_80: never launched (see the host side) */",
              "#endif",
              "}",
              "",
              *tf32.usable(n, 4 * size)]
    return "\n".join(lines)


def launch(plan, layers):
    """Statements of ``<name>_infer_batch`` that run the kernel and return, when usable: a
    persistent grid of as many blocks as the GPU holds at once, each copying the weights once."""
    n, threads = plan.name, 32 * plan.tuned.lowp_warps
    smem = 4 * offsets(layers)[2]
    per_block = plan.tuned.lowp_warps * points_per_warp(layers, plan.tuned)
    return f"""    if ({n}_tc_usable()) {{
        static int resident;
        if (!resident) {{
            int device = 0, sms = 0, per_sm = 0;
            if (cudaGetDevice(&device) != cudaSuccess ||
                cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {n}_tc_kernel, {threads}, {smem}) != cudaSuccess)
                return ROSENNA_STATUS_LAUNCH;
            resident = sms * (per_sm > 0 ? per_sm : 1);
        }}
        const long wanted = ((long)n + {per_block - 1}) / {per_block};
        {n}_tc_kernel<<<(unsigned)(wanted < resident ? wanted : resident), {threads}, {smem}, (cudaStream_t)stream>>>(n, x, y);
        return cudaGetLastError() == cudaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
    }}
"""


class LowLayout:
    """``<name>_tc_packed`` of the 16-bit chain (32-bit words)."""

    def __init__(self, layers, precision):
        self.layers, self.precision = layers, precision
        self.size = offsets(layers)[2]

    def packed(self):
        return packed(self.layers, self.precision)

    def host_packing(self, dest="tc"):
        return host_packing(self.layers, self.precision, dest)


class LowChain(Kind):
    label = "bf16/fp16 tensor-core chain"
    copy = "16-bit chain"
    note = (" (on CUDA sm_80+: the 16-bit tensor-core chain of --precision bf16/fp16; elsewhere, or with\n"
            " * -DROSENNA_NO_TENSOR_CORES, the per-point kernel, which rounds as the host code does)")
    guard = tf32.GUARD

    def layout(self, choice):
        return LowLayout(choice.layers, choice.plan.low_precision)

    def kernel(self, plan, choice, acts):
        # Outside the anonymous namespace: the type this file does not use leaves no unused function.
        return (f"{self.guard}\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n{fixed.load('rosenna_lowp.cuh')}\n"
                + kernel(plan, choice.layers, acts, plan.low_precision) + "\n#endif /* tensor cores */")

    def launch(self, plan, choice):
        return self.guard + "\n" + launch(plan, choice.layers) + "#endif\n"

    def arrays(self, plan, choice):
        tc = choice.tensor_layout
        name = f"{plan.name}_tc_packed"
        if not plan.embed:
            body = f"static __device__ __align__(16) unsigned {name}[{tc.size}];"
        else:
            words = [f"0x{int(w):08x}u" for w in tc.packed()]
            rows = ",\n    ".join(", ".join(words[i:i + 8]) for i in range(0, len(words), 8))
            body = f"static __device__ const __align__(16) unsigned {name}[{tc.size}] = {{\n    {rows}\n}};"
        return (f"{self.guard}\n/* The {plan.low_precision} chain's copy: per layer its B fragments (two "
                f"{plan.low_precision} values per word), then the float32 biases' bits (rosenna/emit/cuda/tc_lowp.py). */\n"
                f"{body}\n#endif")

    def upload_helper(self, code):
        found = [p for p in TYPES if f"rosenna_host_{p}(" in code]
        return f"{self.guard}\n{host_helper(found[0])}#endif\n" if found else ""

    def upload(self, plan, choice):
        size = choice.tensor_layout.size
        return (f"{self.guard}\n"
                f"    unsigned *tc = (unsigned *)calloc({size}, sizeof(unsigned));\n"
                f"    if (tc == NULL)\n        return ROSENNA_STATUS_DEVICE;\n"
                f"{choice.tensor_layout.host_packing()}\n"
                f"    const int tc_failed = cudaMemcpyToSymbol({plan.name}_tc_packed, tc, sizeof(unsigned) * {size}, 0, "
                f"cudaMemcpyHostToDevice) != cudaSuccess;\n"
                f"    free(tc);\n"
                f"    if (tc_failed)\n        return ROSENNA_STATUS_DEVICE;\n"
                f"#endif\n")


KIND = LowChain()
