"""The register-blocked direct convolution of the host form of ``<name>_infer_one``, in C: the
blocked form :mod:`rosenna.strategy.field.host_conv` chose for a Conv, rendered.

One worksharing loop over blocks of output rows. A thread copies the input rows its block reads,
every input channel, into a zero-padded tile on its stack (with a stride in W, column ``j`` of
phase ``p`` is padded column ``j*sw + p``, so the outputs of one vector read contiguous tile
elements at every tap), then for each block of output channels runs SIMD loops along the output
row, one vector each (the last one overlapping where the row is not a whole number of vectors;
it stores the same values again): ``channels x rows`` accumulators, the input channels a loop,
the taps unrolled below it, the bias added last; a fused activation is applied in place by a
second SIMD loop over the block's rows while they are in L1 (GCC vectorises a select only in an
innermost loop). The sums are written by the renderer (:class:`rosenna.emit.render.Renderer`),
so the tuning's ``host_fma`` writes them as the other host paths do.
"""

import copy

import numpy as np

from rosenna.emit.lang import C
from rosenna.emit.render import count
from rosenna.loopir import Assign, Bin, Idx, Loop, Num, Ref, Var
from rosenna.ops import activation_expr

#: The tile's name in the generated C (a local array of the worksharing loop's body).
TILE = "tile"
#: The packed weights' buffer name for the renderer (rendered as :func:`packed_symbol`).
PACKED = "packed weights"


def packed_symbol(plan, conv):
    """The C array of a blocked conv's packed weights (embedded weights only)."""
    return C.symbol(plan.name, plan.storage[conv.window["w"]][1] + "_blocked")


def _weight_index(plan, conv):
    ident = plan.storage[conv.window["w"]][1]
    return next(i for i, wt in enumerate(plan.weights) if wt.ident == ident)


def packed(plan, conv):
    """The conv's weights W [K][C][KH][KW] in the order a block reads them: per pass of
    ``channels`` output channels (the last may have fewer), [C][KH*KW][channels], so the weights
    a SIMD iteration broadcasts for one input channel and tap are adjacent."""
    taps = conv.kh * conv.kw
    w = plan.weights[_weight_index(plan, conv)].array.reshape(conv.k, conv.c, taps)
    parts = [w[k0:k0 + conv.channels].transpose(1, 2, 0).reshape(-1) for k0 in range(0, conv.k, conv.channels)]
    return np.concatenate(parts)


def arrays(plan, regions):
    """File-scope C of the blocked convs: their packed weights (``static const``; embedded
    weights only: file-loaded ones are read in place, W's own layout)."""
    if not plan.embed:
        return ""
    out, done = [], set()
    for region in regions:
        # convs sharing one W share its packing too (it depends on the output channels alone)
        if region.kind != "conv" or packed_symbol(plan, region.body) in done:
            continue
        done.add(packed_symbol(plan, region.body))
        conv, values = region.body, packed(plan, region.body)
        lit = C.literals(values, plan.precision)
        rows = [", ".join(lit[i:i + 6]) for i in range(0, len(lit), 6)]
        out.append(f"/* {count(values.size, 'value')} of {conv.note}'s W, as its register blocks read them */\n"
                   f"static const {plan.ctype} {packed_symbol(plan, conv)}[{values.size}] = {{\n    "
                   + ",\n    ".join(rows) + "\n};")
    return "\n".join(out) + "\n" if out else ""


def _acc(q, r):
    return f"acc_{q}_{r}"


def _sums(conv, first, channels, rows, start, packing):
    """The statements of one SIMD iteration: ``channels`` x ``rows`` sums over every input
    channel (a loop) and tap (unrolled), stored with the bias; ``first``: the block's first
    output channel (an :class:`Idx`), ``start``: the vector's first column (an :class:`Idx` over
    the SIMD variable ``ox``)."""
    w = conv.window
    sh, sw = w["strides"]
    dh, dw = w["dilations"]
    taps = conv.kh * conv.kw
    row = sw * conv.phase_width  # tile elements of one input row, every phase
    out = [Assign(Var(_acc(q, r)), Num(0.0)) for q in range(channels) for r in range(rows)]
    inner = []
    for ky in range(conv.kh):
        for kx in range(conv.kw):
            phase, shift = divmod(kx * dw, sw)[::-1]
            for r in range(rows):
                at = Idx.of("c") * (conv.tile_rows * row) + (r * sh + ky * dh) * row + phase * conv.phase_width + start + shift
                for q in range(channels):
                    if packing:  # the pass's block [C][taps][channels], after the full passes before it
                        weight = Ref(PACKED, first * (conv.c * taps) + Idx.of("c") * (taps * channels)
                                     + (ky * conv.kw + kx) * channels + q)
                    else:
                        weight = Ref(w["w"], (first + q) * (conv.c * taps) + Idx.of("c") * taps + (ky * conv.kw + kx))
                    inner.append(Assign(Var(_acc(q, r)), Bin("*", weight, Ref(TILE, at)), accumulate=True))
    out.append(Loop("c", conv.c, inner))
    for q in range(channels):
        for r in range(rows):
            value = Var(_acc(q, r))
            if w["b"]:
                value = Bin("+", value, Ref(w["b"], first + q))
            out.append(Assign(Ref(w["y"], _out(conv, first + q, r, start)), value))
    return out


def _out(conv, channel, r, column):
    """Output element (channel, the block's row r, column): an :class:`Idx`."""
    return channel * (conv.oh * conv.ow) + (Idx.of("rb") * conv.rows + r) * conv.ow + column


def _block(conv, renderer, depth, first, channels, rows, lanes, simd, t, packing):
    """The lines of one block of ``channels`` x ``rows``: its SIMD loops along the row, then the
    activation's."""
    pad = "    "
    lines = []
    vectors, left = divmod(conv.ow, lanes)
    loops = []  # (outer vector loop or None, extent, start of the vector)
    if not vectors:
        loops.append((None, conv.ow, Idx.of("ox")))
    else:
        loops.append(("v" if vectors > 1 else None, lanes, Idx.of("ox") + (Idx.of("v") * lanes if vectors > 1 else 0)))
        if left:
            loops.append((None, lanes, Idx.of("ox") + (conv.ow - lanes)))
    names = [_acc(q, r) for q in range(channels) for r in range(rows)]
    for outer, extent, start in loops:
        level = depth
        if outer:
            lines.append(pad * level + f"for (int v = 0; v < {vectors}; ++v) {{")
            level += 1
        lines.append(simd)
        lines.append(pad * level + f"for (int ox = 0; ox < {extent}; ++ox) {{")
        lines.append(pad * (level + 1) + f"{t} {', '.join(names)};")
        lines += renderer.lines(_sums(conv, first, channels, rows, start, packing), level + 1)
        lines.append(pad * level + "}")
        if outer:
            lines.append(pad * depth + "}")
    act = conv.window["activation"]
    if act is not None:  # the block's rows of a channel are contiguous: one SIMD loop over them
        lines.append(pad * depth + f"for (int q = 0; q < {channels}; ++q) {{")
        lines.append(simd.replace(f" simdlen({lanes})", ""))
        lines.append(pad * (depth + 1) + f"for (int ox = 0; ox < {rows * conv.ow}; ++ox)")
        ref = Ref(conv.window["y"], _out(conv, first + Idx.of("q"), 0, Idx.of("ox")))
        lines += renderer.lines([Assign(ref, activation_expr(act, ref))], depth + 2)
        lines.append(pad * depth + "}")
    return lines


def _fill(conv, renderer, depth, rows, t):
    """The lines that copy the input rows of a block of ``rows`` output rows into the tile,
    zeros where they fall in the padding."""
    w = conv.window
    sh, sw = w["strides"]
    ph, pw = w["pads"]
    pad = "    "
    width = conv.phase_width
    tile_rows = (rows - 1) * sh + (conv.kh - 1) * w["dilations"][0] + 1
    lines = [pad * depth + f"for (int c = 0; c < {conv.c}; ++c) {{",
             pad * (depth + 1) + f"for (int r = 0; r < {tile_rows}; ++r) {{",
             pad * (depth + 2) + f"const int iy = {conv.rows * sh}*rb + r - {ph};",
             pad * (depth + 2) + f"{t} *to = {TILE} + {conv.tile_rows * sw * width}*c + {sw * width}*r;",
             pad * (depth + 2) + f"if (iy < 0 || iy >= {conv.h}) {{",
             pad * (depth + 3) + f"for (int j = 0; j < {sw * width}; ++j)",
             pad * (depth + 4) + f"to[j] = {renderer.literal(0.0)};",
             pad * (depth + 3) + "continue;",
             pad * (depth + 2) + "}"]
    for phase in range(sw):
        # column j of this phase reads input column j*sw + phase - pw: inside for j in [lo, hi)
        lo = max(0, -(-(pw - phase) // sw))
        hi = min(width, max(lo, -(-(conv.w + pw - phase) // sw)))
        base = phase * width
        source = Ref(w["x"], Idx.of("c") * (conv.h * conv.w) + Idx.of("iy") * conv.w + Idx.of("j") * sw + (phase - pw))
        for a, b, value in ((0, lo, None), (lo, hi, source), (hi, width, None)):
            if a >= b:
                continue
            text = renderer.expr(value) if value is not None else renderer.literal(0.0)
            lines += [pad * (depth + 2) + f"for (int j = {a}; j < {b}; ++j)",
                      pad * (depth + 3) + f"to[{base} + j] = {text};" if base else pad * (depth + 3) + f"to[j] = {text};"]
    lines += [pad * (depth + 1) + "}", pad * depth + "}"]
    return lines


def _with_tile(plan, conv, renderer):
    """A copy of ``renderer`` (its math names, its multiply-adds: whatever the host form's
    renderer writes) that also names the tile and the packed weights."""
    plain = renderer.resolve

    def resolve(buf):
        if buf == PACKED:
            return packed_symbol(plan, conv), 0, False
        return (TILE, 0, True) if buf == TILE else plain(buf)
    out = copy.copy(renderer)
    out.resolve = resolve
    return out


def lines(plan, conv, renderer, depth, nowait, schedule, directive):
    """The C lines of one blocked Conv (:class:`rosenna.strategy.field.host_conv.HostConv`):
    a worksharing loop over its blocks of rows; ``renderer``: the host form's; ``nowait`` and
    ``schedule``: the loop's clauses; ``directive(level, text)``: a directive line."""
    pad = "    "
    renderer = _with_tile(plan, conv, renderer)
    packing = plan.embed
    t, lanes = plan.ctype, conv.lanes
    simd = f"#pragma omp simd simdlen({lanes})" if plan.host_vector > 32 else "#pragma omp simd"
    full, rest = divmod(conv.oh, conv.rows)
    passes = -(-conv.k // conv.channels)
    last = conv.k - (passes - 1) * conv.channels
    out = [directive(depth, f"#pragma omp for{schedule}{nowait}"),
           pad * depth + f"for (int rb = 0; rb < {full + (1 if rest else 0)}; ++rb) {{",
           pad * (depth + 1) + f"{t} {TILE}[{conv.tile_floats}];"]

    def rows_body(rows, level):
        body = _fill(conv, renderer, level, rows, t)
        if passes > 1 and last == conv.channels:  # the channel blocks alike: a loop over them
            body.append(pad * level + f"for (int kb = 0; kb < {passes}; ++kb) {{")
            body += _block(conv, renderer, level + 1, Idx.of("kb") * conv.channels, conv.channels, rows, lanes,
                           directive(level + 1, simd), t, packing)
            body.append(pad * level + "}")
            return body
        for kb in range(passes):
            count = conv.channels if kb < passes - 1 else last
            body += _block(conv, renderer, level, Idx.of(kb * conv.channels), count, rows, lanes,
                           directive(level, simd), t, packing)
        return body

    if rest:  # the last block of rows has fewer
        out.append(pad * (depth + 1) + f"if (rb < {full}) {{")
        out += rows_body(conv.rows, depth + 2)
        out.append(pad * (depth + 1) + "} else {")
        out += rows_body(rest, depth + 2)
        out.append(pad * (depth + 1) + "}")
    else:
        out += rows_body(conv.rows, depth + 1)
    out.append(pad * depth + "}")
    return out
