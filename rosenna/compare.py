"""One rule for "the generated code computed the same numbers": used by verify, the gate and
conformance.

An element of ``got`` matches the element of ``want`` at the same index when

    |got - want| <= atol + rtol * |want|

or both are NaN, or ``want`` is +Inf / -Inf and ``got`` is the same infinity. Every element must
match; the tolerance is keyed on an element type (:data:`TOLERANCE`), or given. The 16-bit builds
(``--precision bf16`` / ``fp16``, :func:`low_precision_tolerance`) take ``atol`` as a fraction of
the output's largest ``|want|`` (:attr:`Tolerance.scaled`). verify judges a
build by the precision it computes in (:data:`PRECISIONS`, :func:`judging_tolerance`): a float32
build of a float64 model at float32's tolerance, never tighter than the model's own type allows.
On a mismatch :meth:`Comparison.message` names the output, the worst index, both values and the
tolerance at that element.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    #: ``atol`` is a fraction of the output's largest finite ``|want|`` (the 16-bit precisions: their
    #: error near a zero of an output is a fraction of the output's scale, not of the value there).
    scaled: bool = False

    def at(self, want):
        """The allowed ``|got - want|`` for a reference value ``want``."""
        return self.atol + self.rtol * np.abs(want)

    def for_output(self, want):
        """The tolerance with a :attr:`scaled` atol made absolute for the output ``want`` (all of it)."""
        if not self.scaled:
            return self
        finite = np.abs(np.asarray(want, np.float64))
        finite = finite[np.isfinite(finite)]
        top = float(finite.max()) if finite.size else 0.0
        return Tolerance(self.rtol, self.atol * (top if top > 0 else 1.0))

    def __str__(self):
        return f"atol {self.atol:g}{'*max|want|' if self.scaled else ''} + rtol {self.rtol:g}*|want|"


#: The tolerance per element type: of the reference's values (the ONNX model's type) or of the
#: arithmetic (the precision built); rendered into the benchmarks' headers by bench/bench_header.py.
TOLERANCE = {"float32": Tolerance(rtol=1e-5, atol=1e-6), "float64": Tolerance(rtol=1e-9, atol=1e-12)}

#: Relative error allowed per layer of depth, in units of the type's epsilon, for a precision with
#: no measured tolerance: each layer rounds its sums once more (float32's 1e-5 is ~84 epsilons).
EPS_PER_LAYER = 8


@dataclass(frozen=True)
class Precision:
    """A precision the generated code computes in (``--precision``) and how closely it matches.

    ``tolerance`` is the measured one (float32's and float64's, held over every model the tests and
    the gate run); a precision without one gets :meth:`tolerance_at` from its epsilon and the
    model's depth, so a low-precision option is one entry here.
    """

    name: str  # as --precision names it
    dtype: str  # the element type of the arithmetic
    eps: float  # machine epsilon: the gap between 1 and the next value
    tolerance: Tolerance = None

    def tolerance_at(self, depth=1):
        """The tolerance for a model ``depth`` layers deep (the longest chain of nodes)."""
        if self.tolerance is not None:
            return self.tolerance
        rtol = EPS_PER_LAYER * self.eps * max(int(depth), 1)
        return Tolerance(rtol=rtol, atol=rtol)


#: Every precision verify can judge: those generate builds, and the narrow ones by formula.
PRECISIONS = {
    "double": Precision("double", "float64", float(np.finfo(np.float64).eps), TOLERANCE["float64"]),
    "single": Precision("single", "float32", float(np.finfo(np.float32).eps), TOLERANCE["float32"]),
    "half": Precision("half", "float16", float(np.finfo(np.float16).eps)),
    "bfloat16": Precision("bfloat16", "bfloat16", 2.0 ** -7),
}

#: ``--precision bf16`` / ``fp16`` -> its :data:`PRECISIONS` entry.
LOW_PRECISIONS = {"bf16": "bfloat16", "fp16": "half"}


def low_precision_tolerance(precision, layers=1, reduction=1):
    """``(tolerance, why)`` for code built with ``--precision bf16`` or ``fp16`` (``precision``):
    rtol = eps * layers, and atol the same fraction of the output's largest |want| (scaled), times
    sqrt(reduction / REDUCTION_REFERENCE) past that length, as :func:`judging_tolerance` does.
    ``layers``: the dense layers on the longest path, each of which rounds its inputs and weights
    to the type (unit roundoff eps / 2 each). docs/low-precision.md derives it and compares it
    with the errors measured, rosenna's and PyTorch's at the same precision."""
    built = PRECISIONS[LOW_PRECISIONS[precision]]
    rtol = built.eps * max(int(layers), 1)
    atol, why = rtol, (f"{built.dtype}'s: eps {built.eps:g} x {max(int(layers), 1)} dense layer(s) "
                       "(docs/low-precision.md)")
    if reduction > REDUCTION_REFERENCE:
        scale = float(np.sqrt(reduction / REDUCTION_REFERENCE))
        atol *= scale
        why += f"; atol x{scale:.3g} for sums of {reduction} terms"
    return Tolerance(rtol=rtol, atol=atol, scaled=True), why


#: The rule in words, as verify and the gate print it.
RULE = "each element |got - want| <= atol + rtol*|want|; NaN matches NaN, an Inf the same Inf"


def tolerance_for(dtype):
    """The :class:`Tolerance` for a dtype name or numpy dtype (float32 unless it is float64)."""
    return TOLERANCE["float64" if np.dtype(dtype) == np.float64 else "float32"]


#: Terms of the longest sum up to which the absolute tolerance stands as written; beyond, it grows
#: with the square root of the length, as the rounding error of a sum of terms of mixed signs does
#: (a one-layer Linear(1100, 1100) in float32, summed in another order than onnxruntime's, differs
#: from it by up to 2.7e-6 on outputs of order 1 over 1.1 million elements, against an atol of 1e-6).
REDUCTION_REFERENCE = 64


def judging_tolerance(precision, model_dtype, depth=1, reduction=1):
    """``(tolerance, why)`` for code computed in ``precision`` (a :data:`PRECISIONS` key) from a
    model of element type ``model_dtype``: the precision's tolerance, or the model type's when that
    is looser (the reference's own values are rounded to the model's type); ``why`` says which.
    ``reduction``: the longest sum an output element takes (a Gemm's inner dimension): past
    :data:`REDUCTION_REFERENCE` terms the absolute part grows with its square root."""
    built = PRECISIONS[precision]
    own = tolerance_for(model_dtype)
    model = "float64" if np.dtype(model_dtype) == np.float64 else "float32"
    arithmetic = built.tolerance_at(depth)
    if own.rtol > arithmetic.rtol:
        tolerance, why = own, f"{model}'s: the reference computes in the model's {model} (built in {precision} precision)"
    elif built.dtype == model:
        tolerance, why = arithmetic, f"{model}'s: the model's type, built in {precision} precision"
    else:
        tolerance, why = arithmetic, f"{built.dtype}'s: built in {precision} precision from a {model} model"
    if reduction > REDUCTION_REFERENCE:
        scale = float(np.sqrt(reduction / REDUCTION_REFERENCE))
        tolerance = Tolerance(rtol=tolerance.rtol, atol=tolerance.atol * scale)
        why += f"; atol x{scale:.3g} for sums of {reduction} terms"
    return tolerance, why


@dataclass
class Comparison:
    """The outcome of :func:`compare` for one output.

    ``worst_index`` is the index (a tuple over ``want``'s shape) of the element furthest outside
    its tolerance, or closest to it when all match; ``got``/``want`` are the values there.
    """

    output: str
    count: int
    mismatches: int
    worst_index: tuple
    got: float
    want: float
    abs_err: float  # largest |got - want| over finite pairs
    rel_err: float  # largest |got - want| / |want| over finite pairs
    rtol: float
    atol: float
    shape_error: str = ""

    @property
    def passed(self):
        return not self.shape_error and self.mismatches == 0

    @property
    def allowed(self):
        """The tolerance at the worst element."""
        return float(self.atol + self.rtol * abs(self.want)) if np.isfinite(self.want) else 0.0

    def where(self):
        return "[" + ", ".join(str(i) for i in self.worst_index) + "]"

    def message(self, got_label="got", want_label="want"):
        """One line: what differs, where, both values and the tolerance."""
        if self.shape_error:
            return f"output {self.output!r}: {self.shape_error}"
        state = "matches" if self.passed else f"{self.mismatches} of {self.count} elements out of tolerance"
        return (f"output {self.output!r}: {state}; worst at {self.where()}: {got_label} {self.got!r}, "
                f"{want_label} {self.want!r}, |diff| {abs(self.got - self.want):.3g}, "
                f"tolerance {self.allowed:.3g} (atol {self.atol:g} + rtol {self.rtol:g}*|want|)")


def compare(got, want, dtype="float32", *, output="", tolerance=None):
    """Compare ``got`` with the reference ``want`` element by element.

    Args:
        got: the computed array (any float type; compared in float64).
        want: the reference array; ``got`` must hold as many elements (it is reshaped to ``want``).
        dtype: the model's element type, which picks the tolerance from :data:`TOLERANCE`.
        output: the output's name, for messages.
        tolerance: a :class:`Tolerance` overriding the one ``dtype`` picks.

    Returns:
        A :class:`Comparison`; its ``passed`` is True exactly when every element matches.
    """
    want, got = np.asarray(want), np.asarray(got)
    tol = (tolerance or tolerance_for(dtype)).for_output(want)
    if got.size != want.size:
        return Comparison(output, want.size, want.size, (), float("nan"), float("nan"), float("inf"),
                          float("inf"), tol.rtol, tol.atol,
                          shape_error=f"{got.size} values computed, the reference has {want.size}")
    shape, got, want = want.shape, got.reshape(-1), want.reshape(-1)
    tally = _Tally()
    for start in range(0, want.size, CHUNK):  # in slices that stay in cache: verify compares millions
        tally.add(got[start:start + CHUNK], want[start:start + CHUNK], tol, start)
    flat = tally.worst()
    if want.size:
        index = tuple(int(i) for i in np.unravel_index(flat, shape))
        got_at, want_at = float(got[flat]), float(want[flat])
    else:
        index, got_at, want_at = (), 0.0, 0.0
    return Comparison(output, int(want.size), tally.mismatches, index, got_at, want_at, tally.abs_err,
                      tally.rel_err, tol.rtol, tol.atol)


#: Elements compared at a time (float64 temporaries of 512 KiB).
CHUNK = 1 << 16


class _Tally:
    """What :func:`compare` gathers slice by slice: the mismatch count, the largest errors over
    finite pairs, and two worst candidates: the element furthest outside its tolerance (a
    non-finite mismatch first), and the one closest to it (over finite errors) for when all match."""

    def __init__(self):
        self.mismatches, self.abs_err, self.rel_err = 0, 0.0, 0.0
        self.bad = (-np.inf, None)  # (excess, flat index) over mismatches
        self.near = (-np.inf, 0)  # over every element with a finite error

    def add(self, got, want, tol, start):
        got, want = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(got - want)
            size = np.abs(want)
            allowed = size * tol.rtol
            allowed += tol.atol
            ok = err <= allowed
            special = ~np.isfinite(want)
            if special.any():  # NaN matches NaN, an Inf the same Inf; nothing else matches them
                g, w = got[special], want[special]
                ok[special] = (np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w))
            finite = np.isfinite(err)
            every = bool(finite.all())
            np.maximum(size, np.finfo(np.float64).tiny, out=size)
            rel = np.divide(err, size, out=size)
            self.abs_err = max(self.abs_err, float((err if every else err[finite]).max(initial=0.0)))
            self.rel_err = max(self.rel_err, float((rel if every else rel[finite]).max(initial=0.0)))
            excess = np.subtract(err, allowed, out=allowed)
            if not every:
                excess[~finite] = -np.inf
            k = int(np.argmax(excess))
            if excess[k] > self.near[0]:
                self.near = (float(excess[k]), start + k)
            wrong = int(ok.size - np.count_nonzero(ok))
            if wrong:
                self.mismatches += wrong
                excess[ok] = -np.inf
                excess[~ok & ~finite] = np.inf  # a non-finite mismatch ranks first
                k = int(np.argmax(excess))
                if self.bad[1] is None or excess[k] > self.bad[0]:
                    self.bad = (float(excess[k]), start + k)

    def worst(self):
        return self.bad[1] if self.mismatches else self.near[1]
