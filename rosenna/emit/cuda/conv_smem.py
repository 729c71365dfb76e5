"""Convolutions of the CUDA/HIP whole-field path as shared-memory tiled direct convolutions.

A block computes a tile of TH x TW output pixels of one sample for a group of COB output channels
(its tiling). For each chunk of CC input channels it stages the input tile and its halo (CC x
IH x IW floats) in shared memory with coalesced loads, zero-filling what lies outside the image
(the padding), so the sums that follow have no bounds tests: the interior/border split is made
once per tile, by the loads. After a ``__syncthreads`` each thread sums PY output rows of one column
for COT output channels from shared memory (register blocking: an input value feeds COT FMAs, a
weight PY), reading the weights from where the kernel file keeps them (``__constant__`` when they
fit: a block's threads read one weight at a time, a broadcast). Bias and the fused activation in
the epilogue, as the loops have them; the sum of each output keeps the loops' order (channels, then
rows, then columns of taps; a padded tap adds w x 0), so the results equal the direct kernels'.

The same tile function runs in the launched form (``<name>_smem<k>_kernel``, a block per tile), the
persistent kernel (each block loops over the phase's tiles) and the clustered one (a cluster's
blocks over its sample's): the block barriers stay uniform. Which convs take the tiles in which
form, and their tiling (:class:`rosenna.strategy.TiledConv`), is the strategy's
(rosenna/strategy/field/convs.py: 2-D convs with more than one tap, ``group == 1`` or depthwise,
under the tuning's ``smem_conv`` rule and tile shapes); others keep the direct loops. The
implicit GEMM (:mod:`conv_igemm`) takes precedence on the calls it takes.

The tile's code is three functions (load a chunk, sum a chunk, store), plain C but for the
qualifiers: a host harness runs them thread by thread (tests/test_conv_smem.py).
"""

from rosenna.emit.cuda import conv_igemm
from rosenna.emit.lang import C
from rosenna.emit.render import count

def name(plan, k, conv):
    """The tile functions' prefix: the phase and the tiling (a conv may have one per form)."""
    return f"{plan.name}_smem{k}{conv.tag}_c{conv.tiling.cot}r{conv.tiling.py}"


def functions(plan, k, conv):
    """The tile's three functions ``<name>_smem<k>_load``, ``_sum`` and ``_store``, each what one
    thread of a block does, plain C but for the qualifiers (:func:`tile` calls them)."""
    s, f = conv.tiling, name(plan, k, conv)
    xa, xstride, xoff = conv_igemm.operand(plan, conv.window["x"])
    ya, ystride, yoff = conv_igemm.operand(plan, conv.window["y"])
    _, ident, woff = plan.storage[conv.window["w"]]
    wsym = C.symbol(plan.name, ident)
    taps = s.kh * s.kw

    def where(*names):  # the tile's indices a function uses: sample s, channel group, tile row and column
        lines = [f"    const long s = tile / {s.tiles};"] if "s" in names else []
        t = "(int)(tile - s * " + str(s.tiles) + ")" if "s" in names else f"(int)(tile % {s.tiles})"
        parts = {"group": f"group = t % {s.ng}", "tx": f"tx = t / {s.ng} % {s.tx}", "ty": f"ty = t / {s.ng} / {s.tx}"}
        lines.append(f"    const int t = {t}, " + ", ".join(parts[v] for v in ("group", "tx", "ty") if v in names) + ";")
        return "\n".join(lines) + "\n"

    thread = f"    const int col = thread % {s.tw}, row = thread / {s.tw} % {s.rt}" + \
        (f", cg = thread / {s.tw * s.rt};\n" if s.cgs > 1 else ";\n")
    cg = "cg" if s.cgs > 1 else "0"  # the thread's channel group in the block
    # the block's first output channel and the thread's: literals where there is one group (the
    # weights' addresses are then compile-time constants, operands of the FMAs in __constant__)
    block = f"group * {s.cob} + " if s.ng > 1 else ""
    co0 = block + (f"cg * {s.cot}" if s.cgs > 1 else "0")
    channel = f"{block}c0 + c" if s.depthwise else "c0 + c"
    # the sums: per input channel of the chunk, tap rows, tap columns, the thread's rows and channels
    if s.depthwise:
        w_index = f"(co0 + j) * {taps} + {{ky}} * {s.kw} + {{kx}}"
        sm_channel = f"({cg} - c0)"
    else:
        w_index = f"((co0 + j) * {s.c} + c0 + c) * {taps} + {{ky}} * {s.kw} + {{kx}}"
        sm_channel = "c"
    woffset = f"{woff} + " if woff else ""
    sum_body = [
        f"    const int co0 = {co0}, r0 = row * {s.py * s.sh}, q0 = col * {s.sw};"]
    if s.depthwise:  # a thread's channel is its own input channel: the chunk is the block's channels
        sum_body += [
            f"    if ({cg} < c0 || {cg} >= c0 + {s.cc})  /* the thread's input channel is in another chunk */",
            "        return;",
            "    const int j = 0;",
            "#pragma unroll",
            f"    for (int ky = 0; ky < {s.kh}; ++ky)",
            "#pragma unroll",
            f"        for (int kx = 0; kx < {s.kw}; ++kx) {{",
            f"            const float w = {wsym}[{woffset}{w_index.format(ky='ky', kx='kx')}];",
            "#pragma unroll",
            f"            for (int p = 0; p < {s.py}; ++p)",
            f"                acc[0][p] += w * sm[({sm_channel} * {s.ih} + r0 + p * {s.sh} + ky * {s.dh}) * {s.iw} + q0 + kx * {s.dw}];",
            "        }"]
    else:
        sum_body += [
            "#pragma unroll",
            f"    for (int c = 0; c < {s.cc}; ++c)",
            "#pragma unroll",
            f"        for (int ky = 0; ky < {s.kh}; ++ky)",
            "#pragma unroll",
            f"            for (int kx = 0; kx < {s.kw}; ++kx) {{",
            f"                float v[{s.py}];",
            "#pragma unroll",
            f"                for (int p = 0; p < {s.py}; ++p)",
            f"                    v[p] = sm[(c * {s.ih} + r0 + p * {s.sh} + ky * {s.dh}) * {s.iw} + q0 + kx * {s.dw}];",
            "#pragma unroll",
            f"                for (int j = 0; j < {s.cot}; ++j) {{",
            f"                    const float w = {wsym}[{woffset}{w_index.format(ky='ky', kx='kx')}];",
            "#pragma unroll",
            f"                    for (int p = 0; p < {s.py}; ++p)",
            "                        acc[j][p] += w * v[p];",
            "                }",
            "            }"]
    guard = f"    if (thread >= {s.used})  /* the block's other threads only load */\n        return;\n"
    inside = [f"oy < {s.oh}"] if s.ty * s.th > s.oh else []
    inside += [f"ox < {s.ow}"] if s.tx * s.tw > s.ow else []
    store = f"out[co * {s.oh * s.ow} + oy * {s.ow} + ox] = {conv_igemm.epilogue(plan, conv)};"
    store = f"if ({' && '.join(inside)})\n                {store}" if inside else store
    xp = f"{xa} + s * {xstride}l{f' + {xoff}' if xoff else ''}"
    yp = f"{ya} + s * {ystride}l{f' + {yoff}' if yoff else ''}"
    return f"""/* {conv.note}: [{s.c}, {s.h}, {s.w}] -> [{s.cout}, {s.oh}, {s.ow}], {s.kh}x{s.kw} taps, stride {s.sh}x{s.sw}, pad {s.ph}x{s.pw},
   dilation {s.dh}x{s.dw}{', depthwise' if s.depthwise else ''}, in shared-memory tiles: {count(s.tiles, 'tile')} per sample of {s.th}x{s.tw} pixels x
   {count(s.cob, 'channel')} ({count(s.ng, 'group')}), {s.used} threads each {count(s.py, 'row')} x {count(s.cot, 'channel')}; the input tile
   {s.ih}x{s.iw} in chunks of {count(s.cc, 'channel')} ({s.floats * 4} bytes). */
static __device__ __forceinline__ void {f}_load(const float *ROSENNA_RESTRICT x, long tile, int c0, float *sm, int thread,
                                                 int threads)
{{
{where("s", "tx", "ty", *(("group",) if s.depthwise and s.ng > 1 else ()))}    const float *in = {xp};
    const int y0 = ty * {s.th * s.sh} - {s.ph}, x0 = tx * {s.tw * s.sw} - {s.pw};
    (void)x;
    for (int i = thread; i < {s.floats}; i += threads) {{
        const int c = i / {s.ih * s.iw}, gy = y0 + i / {s.iw} % {s.ih}, gx = x0 + i % {s.iw};
        sm[i] = gy >= 0 && gy < {s.h} && gx >= 0 && gx < {s.w} ? in[({channel}) * {s.h * s.w} + gy * {s.w} + gx] : 0.0f;
    }}
}}

static __device__ __forceinline__ void {f}_sum(const float *sm, long tile, int c0, float acc[{s.cot}][{s.py}], int thread)
{{
{guard}{where("group") if s.ng > 1 else ""}{thread}""" + "\n".join(sum_body) + f"""
}}

static __device__ __forceinline__ void {f}_store(float *ROSENNA_RESTRICT y, long tile, float acc[{s.cot}][{s.py}], int thread)
{{
{guard}{where("s", *(("group",) if s.ng > 1 else ()), "tx", "ty")}{thread}    float *out = {yp};
    (void)y;
    const int ox = tx * {s.tw} + col;
#pragma unroll
    for (int j = 0; j < {s.cot}; ++j)
#pragma unroll
        for (int p = 0; p < {s.py}; ++p) {{
            const int co = {co0} + j, oy = ty * {s.th} + row * {s.py} + p;
            const float v = acc[j][p];
            {store}
        }}
}}"""


def tile(plan, k, conv):
    """``<name>_smem<k>``: a tile of the conv by a block, its chunks between block barriers."""
    s, f = conv.tiling, name(plan, k, conv)
    return f"""/* Tile `tile` (sample, channel group, tile row and column) of the conv by a block of `threads` threads. */
static __device__ __forceinline__ void {f}(const float *ROSENNA_RESTRICT x, float *ROSENNA_RESTRICT y, long tile, float *sm,
                                          int threads)
{{
    float acc[{s.cot}][{s.py}];
#pragma unroll
    for (int j = 0; j < {s.cot}; ++j)
#pragma unroll
        for (int p = 0; p < {s.py}; ++p)
            acc[j][p] = 0.0f;
    for (int c0 = 0; c0 < {s.cs}; c0 += {s.cc}) {{
        __syncthreads();  /* the block's threads are done with the last chunk or tile */
        {f}_load(x, tile, c0, sm, threadIdx.x, threads);
        __syncthreads();
        {f}_sum(sm, tile, c0, acc, threadIdx.x);
    }}
    {f}_store(y, tile, acc, threadIdx.x);
}}"""


def source(tiles):
    """The kernel file's part for the tiled convs (``tiles``: form -> (its schedule's plan,
    the strategy's tiled convs, :attr:`rosenna.strategy.Field.tiles`)): each conv's functions per tiling, and the kernels of those the launched
    form takes."""
    convs = {name(plan, k, conv): (plan, k, conv) for plan, chosen in tiles.values() for k, conv in chosen.items()}
    if not convs:
        return ""
    plan, chosen = tiles["launched"]
    launched = {name(plan, k, conv) for k, conv in chosen.items()}
    parts = []
    for f, (plan, k, conv) in sorted(convs.items(), key=lambda item: (item[1][1], item[0])):
        s = conv.tiling
        parts.append(functions(plan, k, conv) + "\n\n" + tile(plan, k, conv) + ("" if f not in launched else f"""

__global__ void __launch_bounds__({s.block}) {f}_kernel(const float *ROSENNA_RESTRICT x, float *ROSENNA_RESTRICT y, int count)
{{
    __shared__ float sm[{s.floats}];
    if (blockIdx.x < (unsigned)count * {s.tiles}u)
        {f}(x, y, blockIdx.x, sm, {s.block});
}}"""))
    return ("/* The convolutions computed in shared-memory tiles (rosenna/emit/cuda/conv_smem.py). */\n"
            + "\n\n".join(parts) + "\n")


def launch(plan, k, conv):
    """The statement of ``<name>_phases`` that launches phase k's tiles."""
    s = conv.tiling
    return f"    {name(plan, k, conv)}_kernel<<<(unsigned)(count * {s.tiles}), {s.block}, 0, s>>>(x, y, count);"


def persistent(plan, k, conv, threads):
    """The lines of ``<name>_field``'s phase k (blocks of ``threads``): each block loops over the tiles."""
    s = conv.tiling
    return [f"    for (long tile = blockIdx.x; tile < count * {s.tiles}l; tile += gridDim.x)",
            f"        {name(plan, k, conv)}(x, y, tile, {plan.name}_sm, {threads});"]


def clustered(plan, k, conv):
    """The lines of ``<name>_cluster``'s phase k: the blocks of sample ``s``'s cluster (``rank`` of
    ``step`` / its threads per block) loop over its tiles."""
    s, threads = conv.tiling, plan.tuned.cluster_threads
    assert s.used <= threads
    return [f"    for (long tile = s * {s.tiles}l + rank; tile < (s + 1) * {s.tiles}l; tile += step / {threads})",
            f"        {name(plan, k, conv)}(x, y, tile, {plan.name}_sm, {threads});"]


def shared(plan, convs):
    """The persistent kernel's shared array: the largest tile's floats (none without tiled convs)."""
    if not convs:
        return ""
    return f"    __shared__ float {plan.name}_sm[{max(c.tiling.floats for c in convs.values())}];\n"
