"""Where the languages differ: one table per language, read by the one renderer in render.py.

Numbers are spelled once (:func:`_number`, over :func:`rosenna.loopir.decimal_texts`); a table's
``literal`` only adds its suffix (``f``, ``_rk``) and its spelling of inf and nan, and
:meth:`Lang.literals` does the same for whole arrays. Every emitter, the CUDA kernels' packed
weights included, takes its literals from here.

A table holds syntax (subscripts, loops, statements, comments), the index base, how literals are
spelled in each precision, and the math-function names. Composite functions (sigmoid) are written
once, in terms of the table's own ``exp`` and literal one.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from rosenna.loopir import decimal_texts


def _number(value, precision):
    """The one decimal spelling of a finite value (:func:`rosenna.loopir.decimal_texts`): 9 or 17
    significant digits, reading back to the same bits; the tables add suffixes and special values."""
    return decimal_texts(np.array([value], np.float32 if precision == "single" else np.float64))[0]


def _c_literal(value, precision):
    if math.isnan(value):
        return "NAN" if precision == "single" else "(double)NAN"
    if math.isinf(value):
        text = "INFINITY" if precision == "single" else "(double)INFINITY"
        return text if value > 0 else f"-{text}"
    return _number(value, precision) + ("f" if precision == "single" else "")


def _f_literal(value, precision):
    kind = "rk"
    if math.isnan(value) or math.isinf(value):
        if precision == "single":
            bits = int(np.array([value], np.float32).view(np.int32)[0])
            return f"transfer({bits}_int32, 1.0_{kind})"
        bits = int(np.array([value], np.float64).view(np.int64)[0])
        return f"transfer({bits}_int64, 1.0_{kind})"
    return f"{_number(value, precision)}_{kind}"


@dataclass(frozen=True)
class Lang:
    name: str
    index_base: int
    subscript: str  # "{buf}[{idx}]"
    loop_open: str  # uses {var}, {extent}, {last}
    loop_close: str
    assign: str  # "{target} = {expr}..."
    accumulate: str
    comment: str
    select: str  # uses {lhs} {cmp} {rhs} {a} {b}
    literal: object  # (value, precision) -> str
    math_single: dict = field(default_factory=dict)
    math_double: dict = field(default_factory=dict)
    simd: str = ""
    #: Whether a directive (``simd``) is indented with the code around it: Fortran's ``!$omp`` is;
    #: C's ``#pragma``, a preprocessor line, starts at the margin like every other in the file.
    indent_directives: bool = True
    indent: str = "    "
    #: How a weight or buffer is named at file or module scope. C symbols are model-prefixed and
    #: externally visible: offload runtimes map declare-target variables by name (clang-16 will
    #: not update a static one, nor map one for a kernel in another translation unit).
    global_name: str = "{ident}"
    #: comparisons this language spells differently from C (see rosenna.loopir.COMPARISONS)
    comparisons: dict = field(default_factory=dict)
    #: a store made only where ``{cond}`` holds (the whole-field form's fault flag, rosenna.loopir.flag_faults)
    store_if: str = "if ({cond}) {target} = {expr};"

    def symbol(self, model, ident):
        return self.global_name.format(model=model, ident=ident)

    def literals(self, values, precision, texts=None):
        """Literals of this language for an array (``texts``: its decimal_texts, if known)."""
        texts = decimal_texts(values) if texts is None else texts
        suffix = self.literal(1.0, precision)[len("1.0"):]
        if np.isfinite(values).all():
            return [text + suffix for text in texts] if suffix else list(texts)
        return [text + suffix if text[-1].isdigit() else self.literal(float(text), precision) for text in texts]

    def weight_literals(self, weight, precision):
        """Every value of a plan weight as a literal of this language (from the decimal texts the
        plan computed once, :attr:`rosenna.plan.Weight.decimals`; nothing is kept on the weight)."""
        return self.literals(weight.array, precision, weight.decimals)

    def comparison(self, cmp):
        return self.comparisons.get(cmp, cmp)

    def fn(self, name, precision):
        table = self.math_single if precision == "single" else self.math_double
        return table[name]


#: Math functions by name. An entry with ``{0}`` (``{1}``, ...) is a template over the arguments
#: (each parenthesised); ``{one}`` is the literal 1 of the generated precision. ``to_single`` rounds to
#: float32 and back (Cast to float32 in a double-precision routine): the ``+ 0`` in float is there
#: because GCC 12's SLP vectoriser drops a bare ``(double)(float)x`` pair (C and Fortran, -O2: the
#: rounding vanishes for the first lanes); it turns -0 into +0, nothing else. ``trunc`` rounds
#: toward zero. For rounding to a narrower format (Cast to float16, bfloat16, float8): ``rint`` rounds
#: to the nearest integer, ties to even; ``exponent`` is floor(log2|x|) as a float (C's logb: -inf
#: for 0, +inf for inf, NaN for NaN; the Cast lowering clamps it); ``scale2(x, k)`` is x * 2**k for an
#: integral k in int range, exact (C's scalbn, Fortran's scale). ``index`` converts a whole number held
#: in the float type to the language's integer, for a run-time offset (rosenna.loopir.Ref.at). C's
#: ``madd`` is rosenna_rt.h's multiply-add, fused where the compiler says fma is fast (the tuning's
#: host_fma="auto"); ``fma`` is C's fma, always fused.
_C_MATH = {"exp": "exp", "tanh": "tanh", "log": "log", "sqrt": "sqrt", "erf": "erf", "abs": "fabs",
           "max": "fmax", "min": "fmin", "pow": "pow", "floor": "floor", "ceil": "ceil", "sin": "sin",
           "cos": "cos", "trunc": "trunc", "rint": "rint", "exponent": "logb", "fmod": "fmod", "fma": "fma",
           **{f: f for f in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")}}
#: Bitwise and, or, xor of integers held in the float type: through a 64-bit integer and back.
_C_BITS = {name: "({t})((long long){{0}} " + op + " (long long){{1}})"
           for name, op in (("bitand", "&"), ("bitor", "|"), ("bitxor", "^"))}

C = Lang(
    name="c",
    index_base=0,
    subscript="{buf}[{idx}]",
    loop_open="for (int {var} = 0; {var} < {extent}; ++{var}) {{",
    loop_close="}",
    assign="{target} = {expr};",
    accumulate="{target} += {expr};",
    comment="/* {text} */",
    select="({lhs} {cmp} {rhs} ? {a} : {b})",
    literal=_c_literal,
    math_single={**{k: v + "f" for k, v in _C_MATH.items()}, "to_single": "{0}", "scale2": "scalbnf({0}, (int){1})",
                 "madd": "ROSENNA_MADDF",
                 **{k: v.format(t="float") for k, v in _C_BITS.items()}, "index": "(int)({0})"},
    math_double={**_C_MATH, "to_single": "(double)((float){0} + 0.0f)", "scale2": "scalbn({0}, (int){1})",
                 "madd": "ROSENNA_MADD",
                 **{k: v.format(t="double") for k, v in _C_BITS.items()}, "index": "(int)({0})"},
    simd="#pragma omp simd",
    indent_directives=False,
    indent="    ",
    global_name="{model}_{ident}",
)

#: Fortran's floor and ceiling return integers, so they are written with aint (real, toward zero);
#: a NaN argument stays NaN because both comparisons are false. Fortran's anint rounds ties away from
#: zero, so ``rint`` takes the even neighbour of a tie (y/2 is exact) without the ieee_arithmetic
#: module; ``exponent`` is Fortran's exponent (fraction in [0.5, 1)) minus one.
_F_MATH = {"exp": "exp", "tanh": "tanh", "log": "log", "sqrt": "sqrt", "erf": "erf", "abs": "abs",
           "max": "max", "min": "min", "pow": "{0}**{1}", "sin": "sin", "cos": "cos", "trunc": "aint",
           "floor": "merge(aint({0}) - {one}, aint({0}), aint({0}) > {0})",
           "ceil": "merge(aint({0}) + {one}, aint({0}), aint({0}) < {0})",
           "rint": "merge({two} * anint({0} / {two}), anint({0}), abs({0} - aint({0})) == {half})",
           "exponent": "real(exponent({0}) - 1, rk)", "scale2": "scale({0}, int({1}))", "fmod": "mod",
           **{f: f for f in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")},
           **{name: f"real({op}(int({{0}}, selected_int_kind(18)), int({{1}}, selected_int_kind(18))), rk)"
              for name, op in (("bitand", "iand"), ("bitor", "ior"), ("bitxor", "ieor"))},
           "index": "int({0})"}

FORTRAN = Lang(
    name="fortran",
    index_base=1,
    subscript="{buf}({idx})",
    loop_open="do {var} = 0, {last}",
    loop_close="end do",
    assign="{target} = {expr}",
    accumulate="{target} = {target} + {expr}",
    store_if="if ({cond}) {target} = {expr}",
    comment="! {text}",
    select="merge({a}, {b}, {lhs} {cmp} {rhs})",
    comparisons={"!=": "/="},
    literal=_f_literal,
    math_single={**_F_MATH, "to_single": "{0}"},
    math_double={**_F_MATH, "to_single": "real(real({0}, kind(1.0)) + 0.0, rk)"},
    simd="!$omp simd",
    indent="  ",
)

#: Functions written once, in terms of a table's own entries: {one} is the literal 1, {exp} the
#: table's exp, {tanh} its tanh, {0} the argument.
COMPOSITE = {
    "sigmoid": "{one} / ({one} + {exp}(-{0}))",
}
