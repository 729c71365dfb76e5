"""What the tensor-core kernels share: fp32-accurate 3xTF32 on ``mma.sync`` (sm_80+).

Each fp32 operand is split into two TF32 numbers, ``a = big + small``; a product is
``big*big' + big*small' + small*big'`` (``small*small'`` lies below fp32 rounding), accumulated in
fp32 by ``mma.sync.m16n8k8.f32.tf32.tf32.f32``. The weights are split once, on the host, rounding
both halves to nearest (:func:`tf32`). The activations are split in the kernel, in three
instructions (:func:`split`; ``rosenna_tf32_split``): big is the value with its low 13 bits
cleared, small the exact remainder rounded by adding half a TF32 ulp to its bits, as the tensor
cores truncate what they read of an fp32 register to its top 19 bits. big + small is within
2^-22 |a| of a (two ``cvt.rna.tf32.f32``, ten instructions on sm_90, gave 2^-23 |a|). The
error stays at fp32 level (6e-8 on gemm_big against a float64 reference, results/measurement-log.md,
"The staged and tensor-core kernel study"), at a fraction of the FP32 pipe's cost: gemm_big 0.18 ns per point against 0.23-0.28 for the
best FP32-FMA kernels measured.

The kernels: :mod:`rosenna.emit.cuda.tc_chain` (narrow chains) and :mod:`rosenna.emit.cuda.tc_wide`
(wide chains). Fragment layouts (PTX ISA, ``m16n8k8`` ``.tf32``), ``gid = lane / 4``, ``tig = lane % 4``:
A 16x8: a0 (gid, tig), a1 (gid+8, tig), a2 (gid, tig+4), a3 (gid+8, tig+4);
B 8x8: b0 (tig, gid), b1 (tig+4, gid); C 16x8: c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig),
c3 (gid+8, 2tig+1). The weights are packed per (k8 tile, n8 tile) as 32 lanes x
``{big(b0), big(b1), small(b0), small(b1)}``: one 16-byte load per lane.

The packing exists twice for each kernel, on purpose: here in numpy for embedded weights (literals
in the kernel file), and as C++ in ``<name>_device_upload`` for file-loaded ones
(:func:`rosenna.emit.cuda.tc_chain.host_packing`,
:func:`rosenna.emit.cuda.tc_wide.host_packing`); tests compile the C++ and compare the two bit
for bit.
"""


import numpy as np

from rosenna.emit import fixed

#: Everything of a tensor-core kind is compiled only where this holds (CUDA, not HIP; not opted out).
GUARD = "#if !defined(__HIPCC__) && !defined(ROSENNA_NO_TENSOR_CORES)"


def tiles(n):
    return (n + 7) // 8


def tf32(values):
    """Round to TF32 (10-bit mantissa), to nearest, ties away from zero: ``cvt.rna.tf32.f32`` on
    the bit pattern, as the host packing in C++ (``rosenna_host_tf32``) does it; infinities and NaN
    stay as they are."""
    v = np.asarray(values, np.float32)
    rounded = ((v.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(v), rounded, v).astype(np.float32)


def split(values):
    """The kernels' split of fp32 activations (``rosenna_tf32_split``): (big, small) as the tensor
    cores read them, float32."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    big = (bits & np.uint32(0xFFFFE000)).view(np.float32)
    with np.errstate(invalid="ignore"):
        rest = (np.asarray(values, np.float32) - big).astype(np.float32)
    small = ((rest.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return big, small


def _lane_values(w, kp, npad, paired):
    """Per (k8 tile, n8 tile), in [kt][nt] order: the weights (v0, v1) that lane l holds as b0, b1
    (arrays over the 32 lanes). ``w`` is [N][K] (ONNX Gemm with transB, as the plan holds it).
    ``paired``: physical rows tig and tig+4 of k-tile kt hold logical rows kt*8+2tig and +1."""
    n_out, k_in = w.shape
    full = np.zeros((kp, npad), np.float32)
    full[:k_in, :n_out] = w.T
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    for kt in range(kp // 8):
        k0 = kt * 8 + (2 * t if paired else t)
        k1 = k0 + 1 if paired else k0 + 4
        for nt in range(npad // 8):
            c = nt * 8 + g
            yield full[k0, c], full[k1, c]


def pack_layer(w, kp, npad, paired):
    """One layer's B fragments: per lane ``{big(b0), big(b1), small(b0), small(b1)}``, both halves
    rounded to nearest."""
    out = []
    for v0, v1 in _lane_values(w, kp, npad, paired):
        b0, b1 = tf32(v0), tf32(v1)
        with np.errstate(invalid="ignore"):  # (an infinite weight's rest is NaN, as on the GPU)
            out.append(np.stack([b0, b1, tf32(v0 - b0), tf32(v1 - b1)], axis=1))
    return np.concatenate(out).reshape(-1)


def compact(values):
    """A weight as the fp32 sum big + small of two TF32 numbers that the kernel's split
    (``rosenna_tcw_b``: big = the low 13 bits cleared, small = the rest) gets back exactly:
    big = the value truncated to TF32, small = the rest rounded to nearest (within 2^-22 |v|)."""
    v = np.asarray(values, np.float32)
    big = (v.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return (big + tf32(v - big)).astype(np.float32)


def pack_compact(w, kp, npad, paired, form="sum"):
    """One layer's B fragments, compact: per lane ``{compact(b0), compact(b1)}`` (``form`` "sum",
    the tuning's ``compact_fragments``) or the weights themselves (``form`` "weight"), 8 bytes
    where :func:`pack_layer` has 16."""
    hold = compact if form == "sum" else (lambda v: np.asarray(v, np.float32))
    return np.concatenate([np.stack([hold(v0), hold(v1)], axis=1)
                           for v0, v1 in _lane_values(w, kp, npad, paired)]).reshape(-1)


def unpack_compact(pairs, form="sum"):
    """The kernel's split of compact fragments ([lanes, 2]) -> [lanes, 4] as :func:`pack_layer`
    orders them (big b0, big b1, small b0, small b1), as the tensor cores read them. "sum"
    (``rosenna_tcw_b``): big the number truncated to TF32, small the exact rest (which the cores
    truncate: the rest of a sum is a TF32 number already). "weight" (``rosenna_tcw_w``): big the
    weight rounded to TF32, small the rest with half a TF32 ulp added to its bits, which the cores'
    truncation rounds to nearest: :func:`pack_layer`'s numbers."""
    pairs = np.asarray(pairs, np.float32)
    if form == "weight":
        big = tf32(pairs)
        rest = (pairs - big).astype(np.float32)
        small = ((rest.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
        return np.concatenate([big, small], axis=-1)
    big = (pairs.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.concatenate([big, (pairs - big).astype(np.float32)], axis=-1)


def host_layer(i, layer, kt_tiles, nt_tiles, frag4, bias, paired, dest, compact=False, form="sum"):
    """C++ packing one layer: its fragments at float4 offset ``frag4`` of ``dest`` ([kt][nt][lane],
    as :func:`pack_layer`, or :func:`pack_compact` in ``form``), its bias at float offset ``bias``."""
    k0 = "kt * 8 + 2 * t" if paired else "kt * 8 + t"
    k1 = "k0 + 1" if paired else "k0 + 4"
    if compact:
        hold = "rosenna_host_compact({})" if form == "sum" else "{}"
        store = f"""                float *f = {dest} + 4 * {frag4} + 2 * ((kt * {nt_tiles} + nt) * 32 + lane);
                f[0] = {hold.format("v0")};
                f[1] = {hold.format("v1")};"""
    else:
        store = f"""                float *f = {dest} + 4 * ({frag4} + (kt * {nt_tiles} + nt) * 32 + lane);
                f[0] = rosenna_host_tf32(v0);
                f[1] = rosenna_host_tf32(v1);
                f[2] = rosenna_host_tf32(v0 - f[0]);
                f[3] = rosenna_host_tf32(v1 - f[1]);"""
    return f"""    for (int kt = 0; kt < {kt_tiles}; ++kt)
        for (int nt = 0; nt < {nt_tiles}; ++nt)
            for (int lane = 0; lane < 32; ++lane) {{
                const int g = lane / 4, t = lane % 4, c = nt * 8 + g, k0 = {k0}, k1 = {k1};
                const float v0 = c < {layer.n} && k0 < {layer.k} ? host[{layer.w_index}][c * {layer.k} + k0] : 0.0f;
                const float v1 = c < {layer.n} && k1 < {layer.k} ? host[{layer.w_index}][c * {layer.k} + k1] : 0.0f;
{store}
            }}
    for (int o = 0; o < {layer.n}; ++o)
        {dest}[{bias} + o] = host[{layer.b_index}][o];"""


def device_lib():
    """``rosenna/data/rosenna_tf32.cuh``: the 3xTF32 split and one MMA layer (CUDA only: inline PTX)."""
    return fixed.load("rosenna_tf32.cuh")


def host_tf32(code=""):
    """``rosenna/data/rosenna_host_tf32.h``: TF32 rounding on the host for the C++ packing (the bit
    operation :func:`tf32` does in numpy), and ``rosenna_host_compact.h`` where the packing ``code``
    writes compact fragments."""
    compact = fixed.load("rosenna_host_compact.h") if "rosenna_host_compact(" in code else ""
    return fixed.load("rosenna_host_tf32.h") + compact


def usable(n, smem=0):
    """The lines of ``<name>_tc_usable()``, the one generator of it for every tensor-core kind:
    whether this device runs ``<name>_tc_kernel``'s sm_80+ body (the binary the runtime picked
    for it), and with ``smem`` whether the kernel may have that many bytes of dynamic shared memory
    (else the FP32 kernel runs)."""
    if smem:
        note = [f"/* Whether this device runs {n}_tc_kernel: its binary for the device is sm_80+ (the runtime picked it), and",
                f"   the kernel may have its {smem} bytes of shared memory. Otherwise the FP32 kernel runs. */"]
        test = [f"        usable = cudaFuncGetAttributes(&attributes, {n}_tc_kernel) == cudaSuccess && attributes.binaryVersion >= 80 &&",
                f"                 cudaFuncSetAttribute({n}_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {smem}) == "
                "cudaSuccess;",
                "        if (!usable)",
                "            (void)cudaGetLastError();  /* a refused attribute is no error of the caller's launch */"]
    else:
        note = [f"/* Whether this device runs {n}_tc_kernel's sm_80+ body: the binary the runtime picked for it. */"]
        test = [f"        usable = cudaFuncGetAttributes(&attributes, {n}_tc_kernel) == cudaSuccess && attributes.binaryVersion >= 80;"]
    return note + [f"static bool {n}_tc_usable()", "{", "    static int usable = -1;", "    if (usable < 0) {",
                   "        cudaFuncAttributes attributes;", *test, "    }", "    return usable == 1;", "}"]


def persistent_launch(n, threads, smem, wanted):
    """The statements of ``<name>_infer_batch`` that run ``<name>_tc_kernel`` and return when it is
    usable, the one generator of them for every tensor-core kind: a persistent grid of as many
    blocks of ``threads`` threads (``smem`` bytes of dynamic shared memory) as the GPU holds at
    once, or ``wanted`` (a C expression in ``n``) where that is fewer."""
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
        const long wanted = {wanted};
        {n}_tc_kernel<<<(unsigned)(wanted < resident ? wanted : resident), {threads}, {smem}, (cudaStream_t)stream>>>(n, x, y);
        return cudaGetLastError() == cudaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
    }}
"""


def kernel_end(n, smem=0, what="mma.sync"):
    """The end of ``<name>_tc_kernel``'s body and ``<name>_tc_usable()`` after it (lines), the one
    generator of them for every tensor-core kind: before sm_80 the kernel is an empty body (``what``:
    the instruction it lacks there) that the host side never launches."""
    return ["#else",
            f"    (void)n; (void)x; (void)y;  /* no {what} before sm_80: never launched (see the host side) */",
            "#endif",
            "}",
            "",
            *usable(n, smem)]
