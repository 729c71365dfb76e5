"""The float64 MLP chain on the FP64 tensor cores (DMMA ``mma.sync.m8n8k4.f64``, CUDA sm_80+).

A double-precision chain of Gemm(+activation) layers (the strategy's analysis, rosenna.strategy.mlp),
every layer at most 128 wide (M tiles x (KT + 2 NT) doubles within 255 registers), takes the ``dmma``
kernel beside the generic FP64-FMA point kernel (HIP, GPUs before sm_80 and
``-DROSENNA_NO_TENSOR_CORES`` keep that one). A warp carries ``M`` tiles of 8 points through all
layers in registers, fp64 throughout (the DMMA unit multiplies and adds in IEEE double), so the
result differs from the FMA loops only by the order of the additions. Built for sm_90, pairs of
tiles go through ``m16n8k16`` / ``m16n8k4`` from the same fragments (rosenna_dmma.cuh,
``ROSENNA_DMMA_KS``); Tanh layers use rosenna_dtanh.cuh (:data:`DEVICE_FORMS`).

Fragment layouts (PTX ISA, ``m8n8k4`` ``.f64``), ``gid = lane / 4``, ``tig = lane % 4``: A 8x4:
(gid, tig); B 4x8: (tig, gid); C 8x8: c0 (gid, 2tig), c1 (gid, 2tig+1). The C fragment of n8 tile
nt is, as it stands, the A fragment of two k4 tiles of the next layer, 2nt (columns 8nt + 2tig)
and 2nt + 1 (8nt + 2tig + 1), once that layer's weight rows are packed in that order (``paired``);
no data moves between layers. Layer 0 reads x in the natural order (k4 tile kt, slot tig = input
4kt + tig). Widths are padded with zero weights and zero bias: a padded column carries act(0),
finite, into rows of the next layer whose weights are zero.

``<name>_tc_packed`` (doubles): per layer its B fragments ``[kt][nt][32 lanes]``, then every
layer's bias padded to 8. Packed twice on purpose, in numpy for embedded weights and in C++ at
init for file-loaded ones; tests compare the two bit for bit and emulate the kernel lane by lane.
"""

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.cuda import tf32
from rosenna.emit.cuda.base import Kind
from rosenna.emit.cuda.mlp import activation_fn, chunks
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, resolver

# Tiles of 8 points a warp carries, by the widest layer (the tuning's dmma_tiles_32, _64, _128), the
# blocks per SM asked of ptxas (dmma_blocks_32, _128), the threads per block (dmma_threads) and the
# shared memory the weights may take (dmma_smem_limit).
#: Activations computed by ``rosenna/data/rosenna_dtanh.cuh`` instead of libdevice (its header says why).
DEVICE_FORMS = {"Tanh": "rosenna_tanh"}


def _ktiles(layer, first):
    return (layer.k + 3) // 4 if first else 2 * ((layer.k + 7) // 8)


def _ntiles(layer):
    return (layer.n + 7) // 8


def _width(layers):
    return max(max(8 * _ntiles(layer) for layer in layers), 4 * _ktiles(layers[0], True))


def m_tiles(layers, tuning):
    """Tiles of 8 points a warp carries: the tuning's for the widest layer (padded to 8)."""
    width = _width(layers)
    return tuning.dmma_tiles_32 if width <= 32 else tuning.dmma_tiles_64 if width <= 64 else tuning.dmma_tiles_128


def min_blocks(layers, tuning):
    """Blocks per SM asked of ptxas (``__launch_bounds__``' second argument): the tuning's for the widest layer."""
    return tuning.dmma_blocks_32 if _width(layers) <= 32 else tuning.dmma_blocks_128


def offsets(layers):
    """Per layer (fragment offset, bias offset) in doubles from the start of the array, and the
    array's size."""
    frags, f = [], 0
    for i, layer in enumerate(layers):
        frags.append(f)
        f += 32 * _ktiles(layer, i == 0) * _ntiles(layer)
    biases, b = [], f
    for layer in layers:
        biases.append(b)
        b += 8 * _ntiles(layer)
    return frags, biases, b


def _kcol(kt, slot, first):
    """The input column that slot ``slot`` of k4 tile ``kt`` holds."""
    return 4 * kt + slot if first else 8 * (kt // 2) + 2 * slot + kt % 2


def packed(layers):
    """``<name>_tc_packed`` (float64): see the module's docstring."""
    frags, biases, size = offsets(layers)
    out = np.zeros(size, np.float64)
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    for i, layer in enumerate(layers):
        kt_n, nt_n = _ktiles(layer, i == 0), _ntiles(layer)
        w = np.zeros((8 * nt_n, 4 * kt_n))
        w[:layer.n, :layer.k] = layer.w
        for kt in range(kt_n):
            for nt in range(nt_n):
                at = frags[i] + (kt * nt_n + nt) * 32
                out[at:at + 32] = w[8 * nt + g, _kcol(kt, t, i == 0)]
        out[biases[i]:biases[i] + layer.n] = layer.b
    return out


def host_packing(layers, dest="tc"):
    """C++ for ``<name>_device_upload``: the same packing as :func:`packed` into ``double *{dest}``
    (zeroed), from ``host[layer.w_index]`` (its W as [N][K]) and ``host[layer.b_index]`` (its bias)."""
    frags, biases, _ = offsets(layers)
    out = []
    for i, layer in enumerate(layers):
        kt_n, nt_n = _ktiles(layer, i == 0), _ntiles(layer)
        k = "4 * kt + t" if i == 0 else "8 * (kt / 2) + 2 * t + kt % 2"
        out.append(f"""    for (int kt = 0; kt < {kt_n}; ++kt)
        for (int nt = 0; nt < {nt_n}; ++nt)
            for (int lane = 0; lane < 32; ++lane) {{
                const int g = lane / 4, t = lane % 4, c = 8 * nt + g, k = {k};
                {dest}[{frags[i]} + (kt * {nt_n} + nt) * 32 + lane] = c < {layer.n} && k < {layer.k} ? host[{layer.w_index}][c * {layer.k} + k] : 0.0;
            }}
    for (int o = 0; o < {layer.n}; ++o)
        {dest}[{biases[i]} + o] = host[{layer.b_index}][o];""")
    return "\n".join(out)


def library(layers):
    """``rosenna_dmma.cuh`` (DMMA, one register layer) and ``rosenna_dtanh.cuh`` if used (inline PTX)."""
    tanh = any(layer.act in DEVICE_FORMS for layer in layers)
    return fixed.load("rosenna_dmma.cuh") + (fixed.load("rosenna_dtanh.cuh") if tanh else "")


def activations(prefix, layers, renderer):
    """``__device__ double <prefix><i>(double v)`` per layer: the op's formula or its :data:`DEVICE_FORMS` function."""
    return [f"__device__ __forceinline__ double {prefix}{i}(double v)\n{{\n    return {DEVICE_FORMS[layer.act]}(v);\n}}"
            if layer.act in DEVICE_FORMS else activation_fn(f"{prefix}{i}", layer, renderer, "double")
            for i, layer in enumerate(layers)]


def shared(layers, tuning):
    """Whether the fragments and biases are copied into (static) shared memory once per block (up
    to the tuning's ``dmma_smem_limit`` bytes); larger ones are read from global memory through L1."""
    return 8 * offsets(layers)[2] <= tuning.dmma_smem_limit


def kernel(plan, layers):
    """``<name>_tc_kernel`` (its body only where the device code is compiled for sm_80 or later),
    its activation functions, and ``<name>_tc_usable``."""
    n, nx, ny = plan.name, plan.nx, plan.ny
    frags, biases, size = offsets(layers)
    m = m_tiles(layers, plan.tuned)
    blocks = min_blocks(layers, plan.tuned)
    threads = plan.tuned.dmma_threads
    warps = threads // 32
    per_warp = 8 * m
    renderer = Renderer(C, plan.precision, resolver(plan, C))
    acts = ["namespace {"] + activations(f"{n}_dact", layers, renderer) + ["}  // namespace"]
    kt0 = _ktiles(layers[0], True)
    if shared(layers, plan.tuned):
        weights = [f"    __shared__ double s[{size}];  /* {8 * size} bytes: fragments, then biases */",
                   f"    for (int e = threadIdx.x; e < {size}; e += {threads})",
                   f"        s[e] = {n}_tc_packed[e];",
                   "    __syncthreads();"]
        where = "in shared memory once per block"
    else:
        weights = [f"    const double *s = {n}_tc_packed;"]
        where = "read through L1"
    lines = acts + [
        f"/* FP64 tensor-core chain: a warp carries {per_warp} points ({m} tile{'s' if m > 1 else ''} of 8) through all "
        f"{len(layers)} layers in registers;",
        f"   {8 * size} bytes of fragments and biases {where} (persistent grid). */",
        f"__global__ void __launch_bounds__({threads}{f', {blocks}' if blocks > 1 else ''}) {n}_tc_kernel(int n, const double *ROSENNA_RESTRICT x, "
        "double *ROSENNA_RESTRICT y)",
        "{",
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800"] + weights + [
        "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;",
        f"    for (long base = ((long)blockIdx.x * {warps} + warp) * {per_warp}; base < n; "
        f"base += (long)gridDim.x * {warps * per_warp}) {{",
        f"        /* Layer 0's A fragments: x[p][4kt + tig], zeros past the point count and past {nx} inputs. */",
        f"        double h0[{m}][{kt0}];",
        "#pragma unroll",
        f"        for (int mi = 0; mi < {m}; ++mi) {{",
        "            const long r = base + 8 * mi + gid;",
        "#pragma unroll",
        f"            for (int kt = 0; kt < {kt0}; ++kt)",
        f"                h0[mi][kt] = {f'4 * kt + tig < {nx} && ' if nx < 4 * kt0 else ''}r < n ? x[r * {nx} + 4 * kt + tig] : 0.0;",
        "        }"]
    for i, layer in enumerate(layers):
        kt, nt = _ktiles(layer, i == 0), _ntiles(layer)
        lines += [f"        double h{i + 1}[{m}][{2 * nt}];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */",
                  f"        rosenna_dmma_layer<{kt}, {nt}, {m}, {n}_dact{i}>(s + {frags[i]}, s + {biases[i]}, h{i}, h{i + 1}, lane);"]
    last = len(layers)
    nt_last = _ntiles(layers[-1])
    lines += ["        /* Output columns 8nt + 2tig and + 1, row gid of each tile. */",
              "#pragma unroll",
              f"        for (int mi = 0; mi < {m}; ++mi) {{",
              "            const long r = base + 8 * mi + gid;",
              "            if (r >= n)",
              "                continue;",
              "#pragma unroll",
              f"            for (int nt = 0; nt < {nt_last}; ++nt) {{",
              "                const int c = 8 * nt + 2 * tig;",
              f"                if (c < {ny})\n                    y[r * {ny} + c] = h{last}[mi][2 * nt];",
              f"                if (c + 1 < {ny})\n                    y[r * {ny} + c + 1] = h{last}[mi][2 * nt + 1];",
              "            }",
              "        }",
              "    }",
              "#else",
              "    (void)n; (void)x; (void)y;  /* no DMMA before sm_80: never launched (see the host side) */",
              "#endif",
              "}",
              "",
              *tf32.usable(n)]
    return "\n".join(lines)


def launch(plan, layers):
    """Statements of ``<name>_infer_batch`` that run the DMMA kernel and return, when usable: a
    persistent grid of as many blocks as the GPU holds at once."""
    n, threads = plan.name, plan.tuned.dmma_threads
    per_block = threads // 32 * 8 * m_tiles(layers, plan.tuned)
    return f"""    if ({n}_tc_usable()) {{
        static int resident;
        if (!resident) {{
            int device = 0, sms = 0, per_sm = 0;
            if (cudaGetDevice(&device) != cudaSuccess ||
                cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {n}_tc_kernel, {threads}, 0) != cudaSuccess)
                return ROSENNA_STATUS_LAUNCH;
            resident = sms * (per_sm > 0 ? per_sm : 1);
        }}
        const long wanted = ((long)n + {per_block - 1}) / {per_block};
        {n}_tc_kernel<<<(unsigned)(wanted < resident ? wanted : resident), {threads}, 0, (cudaStream_t)stream>>>(n, x, y);
        return cudaGetLastError() == cudaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
    }}
"""


class Layout:
    """``<name>_tc_packed`` of the DMMA kernel (doubles)."""

    ctype = "double"

    def __init__(self, layers):
        self.layers = layers
        self.size = offsets(layers)[2]

    def packed(self):
        return packed(self.layers)

    def host_packing(self, dest="tc"):
        return host_packing(self.layers, dest)


def _literals(values):
    return ",\n    ".join(", ".join(row) for row in chunks(C.literals(np.asarray(values, np.float64), "double")))


class Dmma(Kind):
    label = "FP64 DMMA chain"
    copy = "DMMA chain"
    note = (" (on CUDA sm_80+: the float64 chain on the FP64 tensor cores, rosenna/emit/cuda/dmma.py; compile with\n"
            " * -DROSENNA_NO_TENSOR_CORES for the FMA kernel everywhere)")
    guard = tf32.GUARD

    def layout(self, choice):
        return Layout(choice.chain)

    def arrays(self, plan, choice):
        """The kernel file's ``<name>_tc_packed``, under the guard."""
        tc = choice.tensor_layout
        values = f" = {{\n    {_literals(tc.packed())}\n}}" if plan.embed else ""
        storage = "__device__ const" if plan.embed else "__device__"
        return (f"{self.guard}\n/* The FP64 tensor-core chain's copy: DMMA B fragments per layer, then the biases "
                f"(rosenna/emit/cuda/dmma.py). */\nstatic {storage} __align__(16) double {plan.name}_tc_packed[{tc.size}]{values};\n#endif")

    def upload(self, plan, choice):
        """The lines of ``<name>_device_upload`` that pack and copy ``<name>_tc_packed``."""
        size = choice.tensor_layout.size
        return (f"{self.guard}\n"
                f"    double *tc = (double *)calloc({size}, sizeof(double));\n"
                f"    if (tc == NULL)\n        return ROSENNA_STATUS_DEVICE;\n"
                f"{choice.tensor_layout.host_packing()}\n"
                f"    const int tc_failed = cudaMemcpyToSymbol({plan.name}_tc_packed, tc, sizeof(double) * {size}, 0, "
                f"cudaMemcpyHostToDevice) != cudaSuccess;\n"
                f"    free(tc);\n"
                f"    if (tc_failed)\n        return ROSENNA_STATUS_DEVICE;\n"
                f"#endif\n")

    def upload_helper(self, code):
        return ""

    def kernel(self, plan, choice, acts):
        return (self.guard + "\nnamespace {\n" + library(choice.chain) + "}  // namespace\n"
                + kernel(plan, choice.chain) + "\n#endif /* tensor cores */")

    def launch(self, plan, choice):
        return self.guard + "\n" + launch(plan, choice.chain) + "#endif\n"


KIND = Dmma()


def routine_parts(plan, layers, sig):
    """The float64 chain's per-point routines (``-DROSENNA_DEVICE_ROUTINE``): its copy of the
    fragments, ``<name>_infer_warp`` running the batched kernel's warp body for the 32 lanes' points
    (CUDA sm_80+; elsewhere each lane its own point through ``<name>_point``), and ``<name>_infer``
    taking that body when the whole warp calls it. File-loaded weights: :func:`routine_upload`."""
    n, nx, ny = plan.name, plan.nx, plan.ny
    frags, biases, size = offsets(layers)
    m = m_tiles(layers, plan.tuned)
    passes = 32 // (8 * m)
    layout = Layout(layers)
    values = f" = {{\n    {_literals(layout.packed())}\n}}" if plan.embed else ""
    storage = "__device__ const" if plan.embed else "__device__"
    renderer = Renderer(C, plan.precision, resolver(plan, C))
    guard = tf32.GUARD.replace("#if ", "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && ")
    body = [guard,
            "    const int lane = rosenna_lane(), gid = lane / 4, tig = lane % 4;",
            f"    const double *s = {n}_rdmma;",
            "#pragma unroll 1",
            f"    for (int pass = 0; pass < {passes}; ++pass) {{",
            f"        double h0[{m}][{_ktiles(layers[0], True)}];",
            "#pragma unroll",
            f"        for (int mi = 0; mi < {m}; ++mi) {{",
            f"            const double *xp = rosenna_lane_ptr(x, {8 * m} * pass + 8 * mi + gid);",
            "#pragma unroll",
            f"            for (int kt = 0; kt < {_ktiles(layers[0], True)}; ++kt)",
            f"                h0[mi][kt] = 4 * kt + tig < {nx} ? xp[4 * kt + tig] : 0.0;",
            "        }"]
    for i, layer in enumerate(layers):
        kt, nt = _ktiles(layer, i == 0), _ntiles(layer)
        body += [f"        double h{i + 1}[{m}][{2 * nt}];  /* layer {i}: {layer.k} -> {layer.n}, {layer.act or 'no activation'} */",
                 f"        rosenna_dmma_layer<{kt}, {nt}, {m}, rt_dact{i}>(s + {frags[i]}, s + {biases[i]}, h{i}, h{i + 1}, lane);"]
    body += ["#pragma unroll",
             f"        for (int mi = 0; mi < {m}; ++mi) {{",
             f"            double *yp = rosenna_lane_ptr(y, {8 * m} * pass + 8 * mi + gid);",
             "#pragma unroll",
             f"            for (int nt = 0; nt < {_ntiles(layers[-1])}; ++nt) {{",
             "                const int c = 8 * nt + 2 * tig;",
             f"                if (c < {ny})\n                    yp[c] = h{len(layers)}[mi][2 * nt];",
             f"                if (c + 1 < {ny})\n                    yp[c + 1] = h{len(layers)}[mi][2 * nt + 1];",
             "            }",
             "        }",
             "    }",
             "#else",
             f"    {n}_point(x, y);",
             "#endif"]
    return "\n".join([
        f"{tf32.GUARD}\n/* The warp routine's copy: the FP64 tensor-core chain's fragments, then its biases. */",
        f"static {storage} __align__(16) double {n}_rdmma[{size}]{values};", "#endif",
        "namespace {", fixed.load("rosenna_routine.cuh"), tf32.GUARD, fixed.load("rosenna_lane.cuh"), library(layers)]
        + activations("rt_dact", layers, renderer) + ["#endif", "}  // namespace", "",
        f"/* 32 points, one per lane: the FP64 tensor-core chain's warp body, {passes} pass{'es' if passes > 1 else ''} of "
        f"{8 * m} points. */",
        f"static __device__ __forceinline__ void {n}_infer_warp_body{sig}\n{{"] + body + ["}", "",
        "/* The per-point routine for the user's own kernels (link them with the device linker). */",
        f"extern \"C\" __device__ void {n}_infer{sig}\n{{",
        "#if !defined(__HIPCC__)",
        "    if (__activemask() == 0xffffffffu) {  /* the whole warp is here: 32 points at once */",
        "        __syncwarp();",
        f"        {n}_infer_warp_body(x, y);",
        "        return;",
        "    }",
        "#endif",
        f"    {n}_point(x, y);",
        "}", "",
        "/* The warp routine: all 32 lanes of the warp call it together, each with its own point "
        "(rosenna/emit/cuda/routine.py). */",
        f"extern \"C\" __device__ void {n}_infer_warp{sig}\n{{\n    {n}_infer_warp_body(x, y);\n}}\n"])


def routine_upload(plan, layers):
    """The lines of ``<name>_routine_upload`` packing and copying ``<name>_rdmma``."""
    layout = Layout(layers)
    return (f"{tf32.GUARD}\n    {{\n        double *tc = (double *)calloc({layout.size}, sizeof(double));\n"
            f"        if (tc == NULL)\n            return ROSENNA_STATUS_DEVICE;\n{layout.host_packing()}\n"
            f"        const int failed = cudaMemcpyToSymbol({plan.name}_rdmma, tc, sizeof(double) * {layout.size}, 0, "
            "cudaMemcpyHostToDevice) != cudaSuccess;\n        free(tc);\n"
            "        if (failed)\n            return ROSENNA_STATUS_DEVICE;\n    }\n#endif")
