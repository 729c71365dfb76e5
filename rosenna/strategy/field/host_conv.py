"""The register-blocked direct convolution of the host form of ``<name>_infer_one`` (C), chosen
per Conv by :func:`choose` and rendered by :mod:`rosenna.emit.host_conv`.

The plan's loops compute a Conv as an interior and its border pieces (:mod:`rosenna.ops.conv`):
the interior's SIMD loop runs along an output row with up to ``host_jam`` output channels jammed,
so each input vector feeds that many FMAs but each FMA needs its own broadcast weight, and the
border columns are loops down a column that stay scalar (on the 3-conv 16-channel net they took
a third of the time of the interior). The blocked form instead computes a block of
``channels`` output channels x ``rows`` output rows x one vector of output columns in vector
accumulators: each input vector loaded feeds ``channels`` FMAs and each broadcast weight
``rows`` of them, and rows next to each other share the input rows between their taps. A
thread first copies the input rows its block of rows reads into a zero-padded tile on its stack
(``rows`` rows of every input channel, the padding written as zeros, with a stride in W the
columns split by phase so a vector of outputs reads contiguous tile elements), so the whole
output, borders included, runs the one SIMD body without a bounds test.

Each output's sum keeps the plan's terms in the plan's order (channels, then taps row by row,
from 0, the bias added last); a tap in the padding adds ``w * 0``, which leaves any finite sum as
it was, so the values equal the plan's loops bit for bit (with a weight of inf or NaN at a tap
that falls in the padding they would not: such a model keeps the plan's loops only if the tuning
turns the form off, ``host_conv=false``).
"""

from dataclasses import dataclass

#: The form's name, as `rosenna info` shows it.
NAME = "register-blocked"


@dataclass(frozen=True)
class HostConv:
    """One Conv computed by the blocked form. ``window``: the plan's Conv geometry
    (:meth:`rosenna.ops.conv.Conv.window`); ``channels`` x ``rows``: output channels and rows
    per block (the last blocks of each take what is left); ``lanes``: output columns per vector;
    ``note``: the op's comment; ``fallback``: the plan's regions of the Conv (the Fortran module
    renders them)."""

    window: dict
    channels: int
    rows: int
    lanes: int
    note: str
    fallback: tuple

    # the geometry, named as the C reads it
    @property
    def c(self):
        return self.window["x_shape"][1]

    @property
    def h(self):
        return self.window["x_shape"][2]

    @property
    def w(self):
        return self.window["x_shape"][3]

    @property
    def k(self):
        return self.window["w_shape"][0]

    @property
    def oh(self):
        return self.window["y_shape"][2]

    @property
    def ow(self):
        return self.window["y_shape"][3]

    @property
    def kh(self):
        return self.window["w_shape"][2]

    @property
    def kw(self):
        return self.window["w_shape"][3]

    @property
    def tile_rows(self):
        """Input rows a block of ``rows`` output rows reads."""
        sh, dh = self.window["strides"][0], self.window["dilations"][0]
        return (self.rows - 1) * sh + (self.kh - 1) * dh + 1

    @property
    def phase_width(self):
        """Tile columns of one phase (column ``j`` of phase ``p`` is padded column ``j*sw + p``):
        every output column's taps of that phase, and a whole vector past the last one read."""
        sw, dw = self.window["strides"][1], self.window["dilations"][1]
        return self.span + ((self.kw - 1) * dw) // sw

    @property
    def span(self):
        """Output columns the SIMD loops cover: the row, or one vector where the row is shorter."""
        return max(self.ow, self.lanes)

    @property
    def tile_floats(self):
        return self.c * self.tile_rows * self.window["strides"][1] * self.phase_width


def tile_bytes(window, rows, lanes, itemsize):
    """Bytes of the tile of a block of ``rows`` output rows."""
    probe = HostConv(window, 1, rows, lanes, "", ())
    return probe.tile_floats * itemsize


def refusal(plan, window, tuning):
    """Why a Conv keeps the plan's loops on the host ("" when the blocked form takes it)."""
    if not tuning.host_conv:
        return "host_conv is false"
    if len(window["x_shape"]) != 4:
        return "not 2-D"
    if window["x_shape"][0] != 1:
        return "a batch axis over 1"
    if window["group"] != 1:
        return "grouped or depthwise (each output reads its own channels)"
    if window["x"] == window["y"]:
        return "computed in place"
    lanes = plan.host_vector // plan.itemsize
    if window["y_shape"][3] < lanes // 2:
        return f"rows of {window['y_shape'][3]} outputs, under half a vector ({lanes // 2})"
    if tile_bytes(window, 1, lanes, plan.itemsize) > tuning.host_conv_tile_bytes:
        return f"the input rows of one output row take over host_conv_tile_bytes {tuning.host_conv_tile_bytes}"
    return ""


def block(plan, window, tuning):
    """``(channels, rows)`` of a block: the tuning's ``host_conv_channels`` (half as many where
    the host's vectors are 32 bytes: AVX2 has 16 vector registers, AVX-512 32), split as evenly
    as the passes allow (24 channels, 8 per block: 8 + 8 + 8; 20: 7 + 7 + 6), and as many rows
    as keep ``host_conv_channels`` x ``host_conv_rows`` accumulators (a conv of fewer channels
    takes more rows: each weight broadcast then feeds more FMAs), fewer while the tile is over
    ``host_conv_tile_bytes``."""
    lanes = plan.host_vector // plan.itemsize
    cout, oh = window["w_shape"][0], window["y_shape"][2]
    most = tuning.host_conv_channels if plan.host_vector >= 64 else max(1, tuning.host_conv_channels // 2)
    passes = -(-cout // most)
    channels = -(-cout // passes)
    rows = max(1, min(max(tuning.host_conv_rows, most * tuning.host_conv_rows // channels), oh))
    while rows > 1 and tile_bytes(window, rows, lanes, plan.itemsize) > tuning.host_conv_tile_bytes:
        rows -= 1
    return channels, rows
