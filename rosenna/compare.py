"""One rule for "the generated code computed the same numbers": used by verify, the gate and
conformance.

An element of ``got`` matches the element of ``want`` at the same index when

    |got - want| <= atol + rtol * |want|

or both are NaN, or ``want`` is +Inf / -Inf and ``got`` is the same infinity. Every element must
match; the tolerance is keyed on the ONNX model's element type (:data:`TOLERANCE`), or given.
On a mismatch :meth:`Comparison.message` names the output, the worst index, both values and the
tolerance at that element.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    def at(self, want):
        """The allowed ``|got - want|`` for a reference value ``want``."""
        return self.atol + self.rtol * np.abs(want)

    def __str__(self):
        return f"atol {self.atol:g} + rtol {self.rtol:g}*|want|"


#: The tolerance per model element type (the ONNX model's, not the generated precision).
TOLERANCE = {"float32": Tolerance(rtol=1e-5, atol=1e-6), "float64": Tolerance(rtol=1e-9, atol=1e-12)}

#: The rule in words, as verify and the gate print it.
RULE = "each element |got - want| <= atol + rtol*|want|; NaN matches NaN, an Inf the same Inf"


def tolerance_for(dtype):
    """The :class:`Tolerance` for a dtype name or numpy dtype (float32 unless it is float64)."""
    return TOLERANCE["float64" if np.dtype(dtype) == np.float64 else "float32"]


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
    tol = tolerance or tolerance_for(dtype)
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.size != want.size:
        return Comparison(output, want.size, want.size, (), float("nan"), float("nan"), float("inf"),
                          float("inf"), tol.rtol, tol.atol,
                          shape_error=f"{got.size} values computed, the reference has {want.size}")
    got = got.reshape(want.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got - want)
        allowed = tol.at(want)
        both_nan = np.isnan(got) & np.isnan(want)
        same_inf = np.isinf(want) & (got == want)
        ok = (np.isfinite(want) & (err <= allowed)) | both_nan | same_inf
        # How far outside the tolerance each element lies; a non-finite mismatch ranks first.
        excess = np.where(ok, -np.inf, err - allowed)
        excess = np.where(~ok & ~np.isfinite(excess), np.inf, excess)
        if ok.all():
            excess = np.where(np.isfinite(err), err - allowed, -np.inf)
        finite = np.isfinite(err)
        abs_err = float(err[finite].max()) if finite.any() else 0.0
        rel = err[finite] / np.maximum(np.abs(want[finite]), np.finfo(np.float64).tiny)
        rel_err = float(rel.max()) if rel.size else 0.0
    if want.size:
        flat = int(np.argmax(excess.reshape(-1)))
        index = tuple(int(i) for i in np.unravel_index(flat, want.shape))
        got_at, want_at = float(got.reshape(-1)[flat]), float(want.reshape(-1)[flat])
    else:
        index, got_at, want_at = (), 0.0, 0.0
    return Comparison(output, int(want.size), int((~ok).sum()), index, got_at, want_at, abs_err, rel_err,
                      tol.rtol, tol.atol)
