"""Convolutions of the CUDA whole-field path as implicit GEMMs on the tensor cores, in 3xTF32.

A 2-D Conv with ``group == 1`` is the product of the im2col matrix A (rows: the output pixels of
every sample of the call; columns K: the taps x the input channels) and the weights B (K x the
output channels). Which phases are such a Conv, their tiling and from how many samples a call
takes them is the strategy's (:class:`rosenna.strategy.GemmConv`, decided by
rosenna/strategy/field/convs.py under the tuning's ``igemm_*`` fields); ``<name>_phases`` then
launches ``<name>_igemm<k>`` for them instead of the direct kernel when the call has the samples
and the device runs sm_80 code. The persistent kernel (the small calls) keeps the direct loops.

The kernel (``rosenna/data/rosenna_igemm.cuh``): a warp per tile of output pixels of one sample,
``mma.sync.m16n8k8`` TF32 with the 3xTF32 split of :mod:`rosenna.emit.cuda.tf32` (big and small
parts of both operands, three MMAs), so the result stays at fp32 accuracy. K runs tap-major over
the input channels padded to a multiple of 4 (:func:`rosenna.emit.cuda.igemm_pack.k_order`): half
a k8 tile is one tap, so the im2col index of every load is affine with compile-time tap offsets.
The weights are split and put in fragment order once (:mod:`rosenna.emit.cuda.igemm_pack`):
embedded ones when the file is generated, file-loaded ones in ``<name>_device_upload``. Tiles
whose taps all fall inside the input skip the bounds checks (the shape's ``interior``).

Not taken, the direct loops run instead: HIP (no ``mma.sync``; an MFMA form is not written),
``-DROSENNA_NO_TENSOR_CORES``, devices before sm_80, double precision, grouped and depthwise
convs, 1-D and 3-D convs.
"""

from rosenna.emit import fixed
from rosenna.emit.cuda import field_fuse, igemm_pack, tf32
from rosenna.emit.cuda.mlp import array
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, count
from rosenna.emit.whole import sample_resolver
from rosenna.loopir import Idx, Ref, Var, add

def operand(plan, value):
    """``(array, floats per sample, offset)`` of a conv's input or output in the kernel file."""
    kind, ident, offset = plan.storage[value]
    if kind == "t":
        i = int(ident[1:])
        return field_fuse.buffer_symbol(plan, i), plan.scratch[i], offset
    return kind, plan.nx if kind == "x" else plan.ny, offset


def epilogue(plan, conv):
    """The stored value of accumulator ``v`` for output channel ``co``: bias, fused activation."""
    from rosenna.ops import activation_expr

    window = conv.window
    value = add(Var("v"), Ref(window["b"], Idx.of("co"))) if window["b"] else Var("v")
    return Renderer(C, plan.precision, sample_resolver(plan)).expr(activation_expr(window["activation"], value))


def kernel(plan, k, conv):
    """``<name>_igemm<k>``: a warp per tile of output pixels of one sample and group of output channels."""
    n, s, warps = plan.name, conv.shape, plan.tuned.igemm_warps
    xa, xstride, xoff = operand(plan, conv.window["x"])
    ya, ystride, yoff = operand(plan, conv.window["y"])
    ty0, ty1, tx0, tx1 = s.interior
    inside = [f"oy < {s.oh}"] if s.ty * s.wy > s.oh else []
    inside += [f"ox < {s.ow}"] if s.tx * s.wx > s.ow else []
    inside += [f"co < {s.cout}"] if s.ns * 8 > s.cout else []
    store = f"out[co * {s.oh * s.ow} + oy * {s.ow} + ox] = {epilogue(plan, conv)};"
    store = f"if ({' && '.join(inside)})\n                    {store}" if inside else store
    interior = (f"ty >= {ty0} && ty <= {ty1} && tx >= {tx0} && tx <= {tx1}" if ty1 >= ty0 else "false")
    if s.ng == 1:
        where = f"t = (int)(tile - s * {s.tiles}), ty = t / {s.tx}, tx = t % {s.tx}"
        fragments, channel = f"{n}_igemm{k}_b", ""
    else:  # the groups of one pixel tile in consecutive warps, which read the same inputs
        where = (f"t = (int)(tile - s * {s.tiles}), group = t % {s.ng}, ty = t / {s.ng} / {s.tx}, "
                 f"tx = t / {s.ng} % {s.tx}")
        fragments, channel = f"{n}_igemm{k}_b + group * {s.nt * 128}", f"\n                co += group * {8 * s.nt};"
    return f"""/* {conv.note}: [{s.c}, {s.h}, {s.w}] -> [{s.cout}, {s.oh}, {s.ow}], {s.kh}x{s.kw} taps, stride {s.sh}x{s.sw}, pad {s.ph}x{s.pw},
   dilation {s.dh}x{s.dw}, as an implicit GEMM: {s.oh * s.ow} rows per sample in {s.tiles} tiles of {s.wy}x{s.wx} pixels
   x {count(s.ng, 'group')} of {count(8 * s.nt, 'channel')} (one per warp), K = {s.kh * s.kw} taps x {s.cp} channels = {count(s.kt, 'k8 tile')}. */
__global__ void __launch_bounds__({32 * warps}) {n}_igemm{k}(const float *ROSENNA_RESTRICT x, float *ROSENNA_RESTRICT y, int count)
{{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const long tile = (long)blockIdx.x * {warps} + threadIdx.x / 32;
    if (tile >= (long)count * {s.tiles})
        return;  /* the whole warp */
    const long s = tile / {s.tiles};
    const int {where};
    const float *in = {xa} + s * {xstride}l{f" + {xoff}" if xoff else ""};
    float *out = {ya} + s * {ystride}l{f" + {yoff}" if yoff else ""};
    const float4 *F = reinterpret_cast<const float4 *>({fragments});
    float acc[{s.mt}][{s.nt}][4];
    if ({interior})
        rosenna_igemm_tile<{s.params(False)}>(in, ty * {s.wy}, tx * {s.wx}, F, acc);
    else
        rosenna_igemm_tile<{s.params(True)}>(in, ty * {s.wy}, tx * {s.wx}, F, acc);
#pragma unroll
    for (int mt = 0; mt < {s.mt}; ++mt)
#pragma unroll
        for (int nt = 0; nt < {s.nt}; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {{
                int oy, ox, co;
                rosenna_igemm_where<{s.wx}>(mt, nt, r, oy, ox, co);
                oy += ty * {s.wy};
                ox += tx * {s.wx};{channel}
                const float v = acc[mt][nt][r];
                {store}
            }}
#else
    (void)x; (void)y; (void)count;  /* no mma.sync before sm_80: never launched ({n}_igemm_usable) */
#endif
}}"""


def source(plan, convs):
    """The kernel file's part for the chosen convs, under :data:`tf32.GUARD`: the split and MMA
    helpers, the igemm tile, each conv's B fragments and kernel, and ``<name>_igemm_usable``."""
    if not convs:
        return ""
    n = plan.name
    arrays = "\n".join(array("__device__ const", f"{n}_igemm{k}_b", igemm_pack.packed(plan, conv) if plan.embed else None,
                             conv.shape.kt * conv.shape.ns * 128) for k, conv in convs.items())
    kernels = "\n\n".join(kernel(plan, k, conv) for k, conv in convs.items())
    first = min(convs)
    return f"""{tf32.GUARD}
/* The convolutions computed as implicit GEMMs on the tensor cores (3xTF32; rosenna/emit/cuda/conv_igemm.py). */
namespace {{
{tf32.device_lib()}
{fixed.load("rosenna_igemm.cuh")}}}  // namespace

/* Their weights as 3xTF32 B fragments: per k8 tile and n8 tile, 32 lanes x (big b0, big b1, small b0, small b1). */
{arrays}

{kernels}

/* Whether this device runs the implicit-GEMM kernels: their binary for it is sm_80+. */
static bool {n}_igemm_usable()
{{
    static int usable = -1;
    if (usable < 0) {{
        cudaFuncAttributes attributes;
        usable = cudaFuncGetAttributes(&attributes, {n}_igemm{first}) == cudaSuccess && attributes.binaryVersion >= 80;
        if (!usable)
            (void)cudaGetLastError();
    }}
    return usable == 1;
}}
#endif
"""


def launch(plan, k, conv):
    """The lines of ``<name>_phases`` that run phase k as the implicit GEMM when the call has the
    rows and the device the code; an ``else`` follows them (the direct launch)."""
    n, s, warps = plan.name, conv.shape, plan.tuned.igemm_warps
    return (f"{tf32.GUARD}\n"
            f"    if (count >= {conv.min_samples} && {n}_igemm_usable())\n"
            f"        {n}_igemm{k}<<<(unsigned)((count * {s.tiles}l + {warps - 1}) / {warps}), {32 * warps}, 0, s>>>(x, y, count);\n"
            f"    else\n#endif\n")


def upload(plan, field, helper):
    """``(helper, lines)`` for ``<name>_device_upload`` of a file-loaded plan: the TF32 rounding on the
    host (``helper``: when no other part of the file brings it) and the packing and copy of each
    implicit-GEMM conv's B fragments (``field``: the strategy's :class:`rosenna.strategy.Field`,
    None when the plan has no whole-field kernels), under :data:`tf32.GUARD`. ``("", "")`` when
    there is none."""
    if plan.embed or field is None:
        return "", ""
    convs = field.igemm
    if not convs:
        return "", ""
    lines = [tf32.GUARD]
    for k, conv in convs.items():
        size = conv.shape.kt * conv.shape.ns * 128
        lines += [f"    {{  /* {conv.note}: B fragments of the implicit GEMM */",
                  f"        float *b = (float *)calloc({size}, sizeof(float));",
                  "        if (b == NULL)\n            return ROSENNA_STATUS_DEVICE;",
                  igemm_pack.host_packing(plan, conv),
                  f"        const int failed = cudaMemcpyToSymbol({plan.name}_igemm{k}_b, b, sizeof(float) * {size}, 0, "
                  "cudaMemcpyHostToDevice) != cudaSuccess;",
                  "        free(b);",
                  "        if (failed)\n            return ROSENNA_STATUS_DEVICE;",
                  "    }"]
    lines.append("#endif")
    code = "\n".join(lines) + "\n"
    return (f"{tf32.GUARD}\n{tf32.host_tf32(code)}#endif\n" if helper else ""), code


def prefer(plan, convs):
    """Lines of ``<name>_run`` before its choice of form: with the tuning's ``igemm_prefer_launches``, a call in
    which an implicit GEMM takes a phase runs the launched phases ("" otherwise)."""
    if not convs or not plan.tuned.igemm_prefer_launches:
        return ""
    first = min(conv.min_samples for conv in convs.values())
    return (f"{tf32.GUARD}\n"
            f"    if (count >= {first} && {plan.name}_igemm_usable())  /* an implicit-GEMM conv takes the call */\n"
            f"        return {plan.name}_phases(count, x, y, s);\n#endif\n")
