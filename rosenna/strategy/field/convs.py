"""The convolutions of the whole-field phases that a kernel of their own computes: which phases
are one Conv (:func:`conv_phases`), and how each is tiled.

- **3xTF32 implicit GEMMs** (rendered by rosenna/emit/cuda/conv_igemm.py): a 2-D Conv with
  ``group == 1`` in float32 as the product of the im2col matrix (rows: the output pixels of every
  sample of the call; columns K: the taps x the input channels) and the weights, taken where
  :func:`igemm_eligible` (the tuning's ``igemm_min_k`` and ``igemm_min_cout``) and, per call,
  from :func:`min_samples` samples (``igemm_min_rows``). :class:`Shape` is its tiling, from the
  tuning's ``igemm_max_nt``, ``igemm_max_mt``, ``igemm_tile_fragments``, ``igemm_partial`` and
  ``igemm_unroll_kt``.
- **shared-memory tiled direct convolutions** (rendered by rosenna/emit/cuda/conv_smem.py): 2-D
  convs with more than one tap, ``group == 1`` or depthwise (:func:`smem_eligible`), under the
  tuning's ``smem_conv`` rule, tiled per form of ``<name>_run`` (:class:`Tiling`,
  :func:`tiling_of`).
"""

from dataclasses import dataclass

from rosenna.loopir import Comment
from rosenna.strategy.tuning import Tuning

_DEFAULT = Tuning()

#: The forms of ``<name>_run``, each of which may take the tiled convs (the tuning's
#: ``smem_<form>``): "launched" (``<name>_phases``), "persistent" (``<name>_field``), "cluster"
#: (``<name>_cluster``; only plans of many phases have one: the tuning's ``cluster_min_phases``).
FORMS = ("launched", "persistent", "cluster")


def _divisor(n, most):
    """The largest divisor of n up to ``most`` (at least 1)."""
    return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)


@dataclass(frozen=True)
class Tiling:
    """One conv's geometry (C input channels of H x W, COUT output channels of OH x OW, KH x KW
    taps, strides, begin pads, dilations, depthwise or not) and its tiling: TW x TH output pixels
    (RT rows of TW threads, PY rows each) x COB output channels (CGS groups of COT, one per thread)
    per block, NG channel groups, TX x TY tiles per sample; the input tile IH x IW in chunks of CC
    of the CS channels a block reads."""

    c: int; h: int; w: int; cout: int; oh: int; ow: int; kh: int; kw: int  # noqa: E702
    sh: int; sw: int; ph: int; pw: int; dh: int; dw: int; depthwise: bool  # noqa: E702
    threads: int; channels: int; rows: int; smem_bytes: int  # noqa: E702

    @property
    def tw(self):
        tw = 1
        while tw < min(32, self.ow):
            tw *= 2
        return tw

    @property
    def cot(self):
        return 1 if self.depthwise else _divisor(self.cout, self.channels)

    @property
    def py(self):
        return max(1, min(self.rows, self.oh))

    @property
    def cgs(self):
        """Channel groups of COT in a block: all the conv's channels while two rows of threads fit."""
        return _divisor(self.cout // self.cot, max(1, self.threads // (2 * self.tw)))

    @property
    def rt(self):
        return max(1, min(-(-self.oh // self.py), self.threads // (self.tw * self.cgs)))

    @property
    def used(self):
        """Threads of a block that compute (a multiple of TW; the rest only help to load)."""
        return self.tw * self.rt * self.cgs

    @property
    def block(self):
        """Threads of the launched form's block: the used ones, in whole warps."""
        return -(-self.used // 32) * 32

    @property
    def th(self):
        return self.rt * self.py

    @property
    def cob(self):
        return self.cgs * self.cot

    @property
    def ng(self):
        return self.cout // self.cob

    @property
    def tx(self):
        return -(-self.ow // self.tw)

    @property
    def ty(self):
        return -(-self.oh // self.th)

    @property
    def tiles(self):
        return self.tx * self.ty * self.ng

    @property
    def ih(self):
        return (self.th - 1) * self.sh + (self.kh - 1) * self.dh + 1

    @property
    def iw(self):
        return (self.tw - 1) * self.sw + (self.kw - 1) * self.dw + 1

    @property
    def cs(self):
        """Input channels a block reads: all of them, or (depthwise) its own COB."""
        return self.cob if self.depthwise else self.c

    @property
    def cc(self):
        return _divisor(self.cs, max(1, self.smem_bytes // (4 * self.ih * self.iw)))

    @property
    def floats(self):
        """Shared-memory floats of a block."""
        return self.cc * self.ih * self.iw


@dataclass(frozen=True)
class TiledConv:
    """One phase computed in shared-memory tiles: the plan's Conv (its ``window``) and its tiling."""

    window: dict
    tiling: Tiling
    note: str
    tag: str = ""  # in the functions' names: a form whose phases are another schedule's


def smem_eligible(window):
    """Why a Conv keeps the direct loops ("" when the tiled kernel may take it)."""
    if len(window["x_shape"]) != 4:
        return "not 2-D"
    if window["x_shape"][0] != 1:
        return "a batch axis over 1"
    cout, cpg, kh, kw = window["w_shape"]
    group, c = window["group"], window["x_shape"][1]
    if group != 1 and not (cpg == 1 and group == c and cout == c):
        return "grouped (neither group 1 nor depthwise)"
    if kh * kw < 2:
        return "one tap (nothing to share between neighbouring outputs)"
    return ""


def tiling_of(window, form="launched", tuning=_DEFAULT):
    """The conv's :class:`Tiling` in ``form`` (one of :data:`FORMS`): the tuning's
    ``smem_channels_<form>``, ``smem_rows_<form>`` and ``smem_depthwise_rows_<form>``, its
    ``smem_threads`` and ``smem_chunk_bytes``."""
    channels, rows, depthwise_rows = (getattr(tuning, f"smem_{what}_{form}") for what in ("channels", "rows", "depthwise_rows"))
    x, w, y = window["x_shape"], window["w_shape"], window["y_shape"]
    return Tiling(x[1], x[2], x[3], w[0], y[2], y[3], w[2], w[3], *window["strides"], *window["pads"],
                  *window["dilations"], window["group"] != 1, tuning.smem_threads, channels,
                  depthwise_rows if window["group"] != 1 else rows, tuning.smem_chunk_bytes)


def smem_refusal(window, tiling, form, tuning):
    """Why the tuning keeps an :func:`smem_eligible` conv off the tiles in ``form`` ("" when it
    takes them): its ``smem_conv`` rule, its ``smem_<form>`` switch, and in the persistent and clustered forms a tile that
    needs more threads than their blocks have (``field_persistent_threads``, ``cluster_threads``)."""
    rule = tuning.smem_conv
    if not rule:
        return "smem_conv is ''"
    if not getattr(tuning, f"smem_{form}"):
        return f"smem_{form} is false"
    if rule == "depthwise" and not tiling.depthwise:
        return "smem_conv is 'depthwise'"
    block = {"persistent": tuning.field_persistent_threads, "cluster": tuning.cluster_threads}.get(form)
    if block is not None and tiling.used > block:
        name = "field_persistent_threads" if form == "persistent" else "cluster_threads"
        return f"a tile of {tiling.used} threads, over {name} {block}"
    return ""


def choose_tiles(sched, form="launched", tag=""):
    """``{phase index: TiledConv}``: the phases of ``sched`` that are one :func:`smem_eligible`
    Conv (:func:`conv_phases`) and that :func:`smem_refusal` lets take the tiles in ``form`` (one
    of :data:`FORMS`); ``tag``: the functions' name part of a
    form whose phases are another schedule's."""
    tuning = sched.plan.tuned
    if not tuning.smem_conv or not getattr(tuning, f"smem_{form}"):
        return {}
    out = {}
    for k, (window, note) in conv_phases(sched).items():
        if smem_eligible(window):
            continue
        tiling = tiling_of(window, form, tuning)
        if not smem_refusal(window, tiling, form, tuning):
            out[k] = TiledConv(window, tiling, note, tag)
    return out


@dataclass(frozen=True)
class Shape:
    """How one conv is tiled. The geometry (C input channels of H x W, COUT output channels of OH
    x OW, KH x KW taps, strides, begin pads, dilations), the padded channels CP and K (KT k8 tiles),
    the output channels in NG groups of NT n8 tiles (NS = NG x NT, padded), a warp tile of WY x WX
    pixels (MT m16 tiles) and one group, TY x TX x NG tiles per sample."""

    c: int
    h: int
    w: int
    cout: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    max_nt: int = _DEFAULT.igemm_max_nt
    max_mt: int = _DEFAULT.igemm_max_mt
    tile_fragments: int = _DEFAULT.igemm_tile_fragments
    partial: int = _DEFAULT.igemm_partial
    unroll_kt: int = _DEFAULT.igemm_unroll_kt

    @property
    def cp(self):
        return -(-self.c // 4) * 4

    @property
    def kt(self):
        return -(-self.kh * self.kw * self.cp // 8)

    @property
    def nt(self):
        return min(self.max_nt, -(-self.cout // 8))

    @property
    def ng(self):
        return -(-self.cout // (8 * self.nt))

    @property
    def ns(self):
        return self.ng * self.nt

    @property
    def wx(self):
        """Tile width: the output width up to 8, a power of two (row and column by shifts)."""
        wx = 1
        while wx < min(8, self.ow):
            wx *= 2
        return wx

    @property
    def mt(self):
        return max(1, min(self.max_mt, self.tile_fragments // self.nt, -(-self.oh * self.wx // 16)))

    @property
    def wy(self):
        return 16 * self.mt // self.wx

    @property
    def tx(self):
        return -(-self.ow // self.wx)

    @property
    def ty(self):
        return -(-self.oh // self.wy)

    @property
    def tiles(self):
        return self.tx * self.ty * self.ng

    @property
    def interior(self):
        """``(ty0, ty1, tx0, tx1)``: the tiles ty0 <= ty <= ty1, tx0 <= tx <= tx1 lie inside the output
        and read inside the input at every tap (an empty range when none do)."""
        def inside(t, tile, out, size, stride, pad, taps, dil):
            first, last = t * tile, t * tile + tile - 1
            return last < out and first * stride - pad >= 0 and last * stride - pad + (taps - 1) * dil < size

        ys = [t for t in range(self.ty) if inside(t, self.wy, self.oh, self.h, self.sh, self.ph, self.kh, self.dh)]
        xs = [t for t in range(self.tx) if inside(t, self.wx, self.ow, self.w, self.sw, self.pw, self.kw, self.dw)]
        if not ys or not xs:
            return 0, -1, 0, -1
        return ys[0], ys[-1], xs[0], xs[-1]

    def params(self, check):
        """The template arguments of ``rosenna_igemm_tile``."""
        return ", ".join(str(v) for v in (
            self.c, self.cp, self.h, self.w, self.kh, self.kw, self.sh, self.sw, self.ph, self.pw, self.dh, self.dw,
            self.oh, self.ow, self.kt, self.nt, self.ns, self.mt, self.wx)) + \
            f", {'true' if check else 'false'}, {self.partial}, {-(-self.kt // self.partial) if self.kt <= self.unroll_kt else 1}"


@dataclass(frozen=True)
class GemmConv:
    """One phase computed by ``<name>_igemm<k>``: the plan's Conv (its ``window``), its tiling and
    the samples a call needs before the implicit GEMM takes it (:func:`min_samples`)."""

    window: dict
    shape: Shape
    note: str
    min_samples: int = 1


def shape_of(window, tuning=_DEFAULT):
    x, w, y = window["x_shape"], window["w_shape"], window["y_shape"]
    return Shape(x[1], x[2], x[3], w[0], y[2], y[3], w[2], w[3], *window["strides"], *window["pads"],
                 *window["dilations"], tuning.igemm_max_nt, tuning.igemm_max_mt, tuning.igemm_tile_fragments,
                 tuning.igemm_partial, tuning.igemm_unroll_kt)


def igemm_eligible(window, tuning=_DEFAULT):
    """Why a Conv's geometry keeps the direct loops ("" when the implicit GEMM may take it):
    ``tuning.igemm_min_k`` and ``igemm_min_cout``."""
    if len(window["x_shape"]) != 4:
        return "not 2-D"
    if window["group"] != 1:
        return "grouped"
    if window["x_shape"][0] != 1:
        return "a batch axis over 1"
    _, c, kh, kw = window["w_shape"]
    if c * kh * kw < tuning.igemm_min_k:
        return f"K = {c * kh * kw} under igemm_min_k {tuning.igemm_min_k}"
    if window["w_shape"][0] < tuning.igemm_min_cout:
        return f"{window['w_shape'][0]} output channels, under igemm_min_cout {tuning.igemm_min_cout}"
    return ""


def min_samples(shape, tuning=_DEFAULT):
    """The samples a call needs before the implicit GEMM takes a conv of this shape (``tuning.igemm_min_rows``)."""
    pixels = shape.oh * shape.ow
    return max(1, -(-tuning.igemm_min_rows // pixels))


def _ops_of(plan):
    """Each top-level statement of the plan's body -> the Comment before it."""
    out, last = {}, None
    for stmt in plan.field_body:
        if isinstance(stmt, Comment):
            last = stmt
        else:
            out[id(stmt)] = last
    return out


def conv_phases(sched):
    """``{phase index: (window, note)}``: the phases of ``sched`` whose regions are exactly one
    Conv's loops, its input and output in device buffers (not computed in place), in a float32
    plan: those a conv kernel of its own may compute (the implicit GEMM, the shared-memory tiles)."""
    plan = sched.plan
    if plan.precision != "single":
        return {}
    comment_of, out = _ops_of(plan), {}
    for k, launch in enumerate(sched.phases):
        # the top-level statements of its regions: a parallel region's outer loop, a serial one's body
        tops = {id(stmt) for m in launch.members for stmt in ([m.chain[0]] if m.chain else m.body)}
        comment = comment_of.get(next(iter(tops)))
        if comment is None or comment.op is None or comment.op.op != "Conv":
            continue
        if tops != {id(stmt) for stmt in plan.field_body if comment_of.get(id(stmt)) is comment}:
            continue
        window = comment.op.window
        if any(plan.storage[window[v]][0] not in ("x", "y", "t") for v in ("x", "y")):
            continue
        out[k] = window, comment.text
    return out


def choose_igemm(sched):
    """``{phase index: GemmConv}``: the phases of ``sched`` computed by the implicit GEMM: the
    :func:`conv_phases` whose Conv is :func:`igemm_eligible`."""
    tuning, out = sched.plan.tuned, {}
    for k, (window, note) in conv_phases(sched).items():
        if not igemm_eligible(window, tuning):
            shape = shape_of(window, tuning)
            out[k] = GemmConv(window, shape, note, min_samples(shape, tuning))
    return out
