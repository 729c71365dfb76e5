"""The MLP copies of embedded weights in ``<name>_kernel.cu`` (rosenna/emit/cuda/copies.py): the
literals once, every tensor-core copy packed while the file compiles, and the device data byte for
byte what the literals gave."""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import devflags
from rosenna import zoo
from rosenna.emit.cuda import tf32
from rosenna.generate import Options, generate
from rosenna.strategy import Tuning

HERE = Path(__file__).parent
DATA = HERE.parent / "rosenna" / "data"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("form", ["bit_cast", "arithmetic"])
def test_host_tf32_is_the_bit_operation(tmp_path, form):
    """rosenna_host_tf32 (to nearest, ties away) and its truncation give the bits of the operation on
    the bit pattern for every 997th float (every float: tests/tf32_rounding.cpp with stride 1), in
    both forms, and a constant expression can use them (the file's static_asserts)."""
    exe = tmp_path / "tf32"
    flags = ["-DROSENNA_TF32_ARITHMETIC"] if form == "arithmetic" else []
    subprocess.run(["g++", "-O2", "-std=c++14", "-Wall", "-Wextra", "-pedantic", "-Werror", *flags, f"-I{DATA}",
                    str(HERE / "tf32_rounding.cpp"), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), "997"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "4291064 checked, 0 differ", out.stdout


def test_numpy_rounding_keeps_non_finite_values():
    v = np.array([np.inf, -np.inf, np.nan, 1.00048828125, np.float32(3.4028235e38)], np.float32)
    got = tf32.tf32(v)
    assert np.isposinf(got[0]) and np.isneginf(got[1]) and np.isnan(got[2])
    assert got[3] == np.float32(1.0009765625) and np.isposinf(got[4])


def _generate(tmp_path, onnx_path, name, tunes=(), embed=True):
    out = tmp_path / ("_".join([name] + [t.replace("=", "-") for t in tunes]) or name)
    generate(str(onnx_path), str(out), Options(lang="c", embed=embed, tuning=Tuning().parse_overrides(list(tunes))))
    return out / f"{name}_kernel.cu"


def _ptx(kernel, *flags):
    """Both compiles of the kernel file as PTX, the file's hash taken out of the -rdc names."""
    texts = []
    for extra in ([], ["-rdc=true", "-DROSENNA_DEVICE_ROUTINE"]):
        out = kernel.with_suffix(".routine.ptx" if extra else ".ptx")
        subprocess.run(["nvcc", *devflags.NVCC_DEVICE.split(), "-arch=sm_90", "-ptx", *extra, *flags, str(kernel), "-o", str(out)],
                       check=True, capture_output=True)
        text = out.read_text()
        texts.append(re.sub(r"(__nv_static_\d+__|_INTERNAL_)[0-9a-f]{8}", r"\1H", text))
    return texts


#: (model, tunings): the wide kernel and its warp routine (paired copy), the wide kernel's compact
#: fragments read by the routine too (rosenna_host_compact), the paired k order with weight
#: fragments, the 3xTF32 chain (one copy both compiles read).
CASES = [("mlp128", ()), ("mlp128", ("wide_compact_from=1", "routine_layout=wide")),
         ("mlp128", ("wide_k_order=paired", "wide_compact_from=1", "compact_fragments=weight")), ("gemm_big", ())]


@needs_nvcc
@pytest.mark.parametrize("model,tunes", CASES, ids=["-".join((m,) + t) for m, t in CASES])
def test_packed_copies_are_the_literals_bytes(tmp_path, model, tunes):
    """The file packed at compile time and the one with every copy as literals
    (compile_pack_floats=0) give the same PTX, data and code, in both compiles; the packed file
    holds the weights once."""
    path = zoo.save(model, str(tmp_path / f"{model}.onnx"))
    packed = _generate(tmp_path, path, model, tunes)
    literal = _generate(tmp_path, path, model, tunes + ("compile_pack_floats=0",))
    text = packed.read_text()
    assert "ROSENNA_PACKED(" in text and f"namespace {model}_model" in text
    assert "ROSENNA_PACKED(" not in literal.read_text()
    assert text.count(" = {{\n") == 1  # one list of literals: <name>_model::packed
    assert _ptx(packed) == _ptx(literal)
    if not tunes and model == "mlp128":
        assert len(text.encode()) < 1_200_000 < len(literal.read_text().encode())
        # the arithmetic rounding (compilers without __builtin_bit_cast) packs the same bytes
        assert _ptx(packed, "-DROSENNA_TF32_ARITHMETIC") == _ptx(literal)


def _mlp_with(tmp_path, value):
    model = zoo.mlp("odd", [16, 64, 64, 8], ["Relu", "Relu", None], seed=3)
    for init in model.graph.initializer:
        if init.name.endswith("weight") and "1" in init.name:
            w = onnx.numpy_helper.to_array(init).copy()
            w[0, 0] = value
            init.CopyFrom(onnx.numpy_helper.from_array(w, init.name))
            break
    else:
        raise AssertionError("no second weight")
    onnx.save(model, str(tmp_path / "odd.onnx"))
    return tmp_path / "odd.onnx"


@pytest.mark.parametrize("value,packs", [(np.float32(2.0 ** 127), False), (np.inf, False), (np.nan, False),
                                         (np.float32(1.7e38), True)])
def test_weights_the_packing_cannot_take_are_literals(tmp_path, value, packs):
    """A weight at 2^127 or beyond (its TF32 rounding may reach infinity: no constant expression),
    or not finite: the file writes every copy as literals. Just below 2^127 it packs."""
    kernel = _generate(tmp_path, _mlp_with(tmp_path, value), "odd")
    text = kernel.read_text()
    assert ("ROSENNA_PACKED(odd_model::packed)" in text) is packs and "rosenna_floats<" in text
    assert ("odd_model::tc_packed()" in text or "odd_model::rchain()" in text) is packs
    if shutil.which("nvcc"):
        _ptx(kernel)  # (no constant expression left float range)


def test_file_loaded_copies_have_no_literals(tmp_path):
    kernel = _generate(tmp_path, zoo.save("mlp128", str(tmp_path / "mlp128.onnx")), "mlp128", embed=False)
    text = kernel.read_text()
    assert "mlp128_model" not in text and "ROSENNA_PACKED(" not in text
    assert re.search(r"static __device__ __align__\(16\) rosenna_floats<\d+> mlp128_tc_packed;", text)


def test_a_copy_over_the_limit_is_literals(tmp_path):
    """compile_pack_floats bounds the packed copies: under mlp128's 72,072-float 3xTF32 copies the
    file is as it was, every copy literals and no <name>_model; at 72,072 both are packed."""
    path = zoo.save("mlp128", str(tmp_path / "mlp128.onnx"))
    text = _generate(tmp_path, path, "mlp128", ("compile_pack_floats=72071",)).read_text()
    assert "mlp128_model" not in text and "ROSENNA_PACKED" not in text and text.count(" = {{\n") == 3
    text = _generate(tmp_path, path, "mlp128", ("compile_pack_floats=72072",)).read_text()
    assert "ROSENNA_PACKED(mlp128_model::tc_packed())" in text and "ROSENNA_PACKED(mlp128_model::rchain())" in text
