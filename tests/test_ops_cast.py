"""Cast to the narrow types rosenna holds in its float type (float16, bfloat16, the four float8
types with and without ``saturate``, int4/uint4/int2/uint2), bit for bit against ml_dtypes (the
ONNX reference implementation's arithmetic) on the values where rounding is hard: every tie between
neighbours, one ulp either side of it, subnormals, the largest value and just past it, infinities,
NaN and signed zeros. One float32 model and one float64 model, each compiled once in C and Fortran."""

import os

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import devflags
from rosenna import conformance

FLOATS = {  # ONNX type -> (ml_dtypes type, whether Cast's saturate applies)
    TensorProto.FLOAT16: (np.float16, False),
    TensorProto.BFLOAT16: (ml_dtypes.bfloat16, False),
    TensorProto.FLOAT8E4M3FN: (ml_dtypes.float8_e4m3fn, True),
    TensorProto.FLOAT8E4M3FNUZ: (ml_dtypes.float8_e4m3fnuz, True),
    TensorProto.FLOAT8E5M2: (ml_dtypes.float8_e5m2, True),
    TensorProto.FLOAT8E5M2FNUZ: (ml_dtypes.float8_e5m2fnuz, True),
}
INTS = {TensorProto.INT4: (-8, 7), TensorProto.UINT4: (0, 15), TensorProto.INT2: (-2, 1), TensorProto.UINT2: (0, 3)}


def hard_values():
    """float32 values that test every rounding rule of every format above."""
    values = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e30, -1e30, 3.4e38, -3.4e38]
    for onnx_type, (dtype, _) in FLOATS.items():
        finfo = ml_dtypes.finfo(dtype)
        bits = np.arange(2 ** (8 * np.dtype(dtype).itemsize), dtype=np.uint16 if np.dtype(dtype).itemsize == 2
                         else np.uint8)
        every = bits.view(dtype).astype(np.float32)
        every = np.unique(every[np.isfinite(every)])
        if every.size > 600:  # float16, bfloat16: the subnormals, the ends, a stride through the rest
            every = np.unique(np.concatenate([every[:200], every[-200:], every[::97]]))
        ties = (every[:-1].astype(np.float64) + every[1:]) / 2
        largest = float(finfo.max)
        past = [largest + (largest - float(np.nextafter(dtype(largest), dtype(0)))) * k for k in (0.25, 0.5, 0.75, 1, 2)]
        candidates = np.concatenate([every, ties, past, [-v for v in past], [float(finfo.smallest_subnormal) / 2]])
        with np.errstate(over="ignore"):
            candidates = candidates.astype(np.float32)
        values.extend(candidates)
        values.extend(np.nextafter(candidates, np.float32(np.inf)))
        values.extend(np.nextafter(candidates, np.float32(-np.inf)))
    values.extend(np.arange(-20, 20, 0.25))
    return np.array(values, np.float32)


def expected(x, onnx_type, saturate):
    if onnx_type in INTS:  # trunc, and 0 out of range (the ONNX reference's result; ONNX: undefined)
        low, high = INTS[onnx_type]
        t = np.trunc(x.astype(np.float64))
        return np.where((t < low) | (t > high), 0.0, t)
    dtype, saturates = FLOATS[onnx_type]
    if saturates and saturate:
        return numpy_helper.saturate_cast(x, dtype).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype).astype(np.float64)


def cast_model(x, elem):
    nodes, outputs, wants = [], [], []
    targets = [(t, s) for t, (_, sat) in FLOATS.items() for s in ((0, 1) if sat else (1,))]
    targets += [(t, 1) for t in INTS if elem == TensorProto.FLOAT]
    for k, (to, saturate) in enumerate(targets):
        attrs = {"saturate": saturate} if FLOATS.get(to, (None, False))[1] else {}
        nodes.append(helper.make_node("Cast", ["x"], [f"y{k}"], to=to, **attrs))
        outputs.append(helper.make_tensor_value_info(f"y{k}", to, [x.size]))
        wants.append(expected(x, to, saturate))
    graph = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", elem, [x.size])], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    model.ir_version = 12
    return model, wants


def write(root, name, model, x, wants):
    data = os.path.join(root, name, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(root, name, "model.onnx"))
    for j, (kind, array) in enumerate([("input", x)] + [("output", w) for w in wants]):
        with open(os.path.join(data, f"{kind}_{0 if kind == 'input' else j - 1}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(array, f"v{j}").SerializeToString())
    return conformance.Case("Cast", name, os.path.join(root, name))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("casts"))
    x32 = hard_values()
    # float64 inputs: float16 ties nudged by less than a float32 ulp, so that rounding through
    # float32 first (double rounding) would give the other neighbour.
    halfway = (np.arange(1, 2048, dtype=np.float64) + 0.5) * 2.0 ** -10 + 1
    x64 = np.concatenate([halfway + 2.0 ** -40, halfway - 2.0 ** -40, x32.astype(np.float64)])
    cases = [write(root, "float32", *cast_model(x32, TensorProto.FLOAT)[:1], x32, cast_model(x32, TensorProto.FLOAT)[1]),
             write(root, "float64", *cast_model(x64, TensorProto.DOUBLE)[:1], x64, cast_model(x64, TensorProto.DOUBLE)[1])]
    return {o.case.name: o for o in conformance.run(cases, os.path.join(root, "work"), rtol=0.0, atol=0.0)}


@pytest.mark.parametrize("name", ["float32", "float64"])
def test_casts_bit_for_bit(outcomes, name):
    o = outcomes[name]
    assert o.status == "passed", o.detail


def test_the_hard_values_tell_rounding_modes_apart():
    """A check on the test itself: truncation, ties away from zero or no saturation would change
    some expected output, so the cases above cannot pass by accident."""
    x = hard_values()
    f16 = expected(x, TensorProto.FLOAT16, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        assert (np.trunc(x * 1024) / 1024 != f16)[np.isfinite(f16) & (np.abs(x) < 1)].any()
    sat = expected(x, TensorProto.FLOAT8E4M3FN, 1)
    unsat = expected(x, TensorProto.FLOAT8E4M3FN, 0)
    assert np.nanmax(np.abs(sat)) == 448 and np.isnan(unsat[np.abs(x) > 1000]).all()
    ties = (np.float32(1) + np.float32(2.0 ** -11)) * np.ones(1, np.float32)
    assert expected(ties, TensorProto.FLOAT16, 1)[0] == 1.0  # to even, not away from zero


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.DOUBLE], ids=["float32", "float64"])
def test_rounding_code_compiles_strict_and_for_the_gpu(tmp_path, elem):
    """The rounding's math (logb, scalbn, rint; Fortran's exponent, scale, anint) under C99 and
    Fortran 2008 with every warning an error, and nvcc's device compile of the point routine."""
    import shutil
    import subprocess

    from rosenna.generate import Options, generate

    x = np.linspace(-3, 3, 7)
    model, _ = cast_model(x.astype(np.float32 if elem == TensorProto.FLOAT else np.float64), elem)
    onnx.save(model, str(tmp_path / "casts.onnx"))
    generate(str(tmp_path / "casts.onnx"), str(tmp_path), Options(name="casts", embed=True))
    commands = [["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fopenmp", "-c", "casts.c"],
                ["gfortran", "-std=f2008", "-Wall", "-Werror", "-fopenmp", "-c", "casts_model.F90"]]
    if shutil.which("nvcc"):
        commands.append(["nvcc", *devflags.NVCC.split(), "-arch=sm_90", "-c", "casts_kernel.cu", "-o", "casts_kernel.o"])
    for cmd in commands:
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, " ".join(cmd) + "\n" + proc.stderr[-3000:]


def test_integer_narrowing_to_int4_is_refused(tmp_path):
    """int32 -> int4 wraps in ONNX (fixed to fixed point keeps the low bits); rosenna refuses it
    rather than apply the float rule (0 out of range)."""
    from rosenna.errors import UnsupportedOp
    from rosenna.generate import Options, build_plan

    graph = helper.make_graph([helper.make_node("Cast", ["i"], ["y"], to=TensorProto.INT4)], "g",
                              [helper.make_tensor_value_info("i", TensorProto.INT32, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT4, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "narrow.onnx"))
    with pytest.raises(UnsupportedOp, match="narrows int32 to int4 at run time"):
        build_plan(str(tmp_path / "narrow.onnx"), Options())
