"""The OpenMP offload device body of <name>_infer for MLPs (rosenna/emit/offload_mlp.py).

clang's device passes compile it; here it is compiled on the host with -DROSENNA_OFFLOAD_BODY=1 (the
macro rosenna_rt.h sets to 1 in those passes) and checked against onnxruntime with verify's
tolerance: narrow layers (registers in and out, every activation, widths not a multiple of 4),
wide layers (outputs accumulated over inputs read from local arrays), float64 of both, weights
embedded and read from a file (<name>_init packs the copy). Where
clang-16 with nvptx offload and CUDA's ptxas are installed, the device pass's PTX is read: no local
memory in the narrow form, 16-byte read-only weight loads in the wide one.
"""

import os
import re
import shutil
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
from mlp_reference import ALL_ACTIVATIONS, activation_mlp

from rosenna import ops, zoo
from rosenna.compare import compare
from rosenna.emit import offload_mlp
from rosenna.generate import Options, generate

POINTS = 61

DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include "{n}.h"

int main(int argc, char **argv)
{{
    int n = atoi(argv[1]);
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX}), *y = malloc(sizeof({t}) * (size_t)n * {NY});
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
    {init}
    for (int i = 0; i < n; ++i)
        {n}_infer(x + (size_t)i * {NX}, y + (size_t)i * {NY});
    fwrite(y, sizeof({t}), (size_t)n * {NY}, stdout);
    (void)argc;
    return 0;
}}
"""


def _models(tmp):
    """name -> (model path, precision, input range, whether it has a wide layer)."""
    acts = [a for a in ALL_ACTIVATIONS if ops.get(a[0]) or a[0] in ("SiLU", "Mish", "HardSwishPattern", "GeluErf")]
    widths = [3] + [9 + 2 * (i % 4) for i in range(len(acts))] + [5]
    return {
        "acts": (activation_mlp(tmp / "acts.onnx", widths, list(acts) + [None]), "single", 3.0, False),
        "wide": (activation_mlp(tmp / "wide.onnx", [3, 70, 67, 5], [("Tanh", {}), ("LeakyRelu", {"alpha": 0.2}), None],
                                name="wide"), "single", 2.0, True),
        "narrow64": (activation_mlp(tmp / "narrow64.onnx", [4, 24, 17, 3], [("Tanh", {}), ("SiLU", {}), None],
                                    dtype=np.float64, name="narrow64"), "double", 3.0, False),
        "wide64": (activation_mlp(tmp / "wide64.onnx", [5, 72, 2], [("Tanh", {}), ("Sigmoid", {})],
                                  dtype=np.float64, name="wide64"), "double", 2.0, True),
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("offload_mlp"), {}


def _built(models, name):
    """A model of :func:`_models`; ``<model>_file``: the same with its weights in a file."""
    tmp, cache = models
    if name not in cache:
        base = name[:-len("_file")] if name.endswith("_file") else name
        path, precision, scale, wide = _models(tmp)[base]
        d = tmp / name
        embed = base == name
        plan, _ = generate(path, str(d), Options(name=name, precision=precision, embed=embed))
        dtype = np.float64 if precision == "double" else np.float32
        x = np.random.default_rng(5).uniform(-scale, scale, (POINTS, plan.nx)).astype(dtype)
        x.tofile(d / "x.bin")
        init = "" if embed else f'if ({name}_init("{d / (name + ".rwt")}") != 0) return 5;'
        (d / "drv.c").write_text(DRIVER.format(n=name, t=plan.ctype, NX=plan.nx, NY=plan.ny, init=init))
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
        cache[name] = plan, d, x, want, wide
    return cache[name]


def _run(d, name, x, plan, defines):
    exe = d / ("body" if defines else "loops")
    subprocess.run(["gcc", "-O2", "-Wno-unknown-pragmas", *defines, "-I", str(d), str(d / "drv.c"), str(d / f"{name}.c"),
                    "-o", str(exe), "-lm"], check=True)
    raw = subprocess.run([str(exe), str(POINTS), str(d / "x.bin")], capture_output=True, check=True).stdout
    return np.frombuffer(raw, x.dtype).reshape(POINTS, plan.ny)


@pytest.mark.parametrize("name", ["acts", "wide", "narrow64", "wide64", "wide_file", "narrow64_file"])
def test_offload_body_matches_onnxruntime(models, name):
    plan, d, x, want, wide = _built(models, name)
    src = (d / f"{name}.c").read_text()
    assert offload_mlp.BODY_GUARD in src and f"{name}_opacked" in src
    # the form the layer widths call for: local ping-pong arrays only when a layer is wide
    assert ("a[" in src.split(offload_mlp.BODY_GUARD)[-1].split("#else")[0]) == wide
    assert np.abs(want).max() > 0.01
    for label, defines in (("device body", ["-DROSENNA_OFFLOAD_BODY=1"]), ("plan's loops", [])):
        got = _run(d, name, x, plan, defines)
        result = compare(got, want, x.dtype, output=f"{name} {label}")
        assert result.passed, result.message("rosenna", "onnxruntime")


def test_body_and_copy_only_where_clang_offloads(models):
    """GCC (host, nvptx offload, OpenACC) keeps the plan's loops and never sees the repacked copy."""
    plan, d, _, _, _ = _built(models, "narrow64")
    for flags, present in ((["-fopenmp"], False), (["-DROSENNA_OFFLOAD_BODY=1"], True)):
        obj = d / f"m{present}.o"
        subprocess.run(["gcc", "-O1", "-Wno-unknown-pragmas", *flags, "-c", str(d / "narrow64.c"), "-o", str(obj)],
                       check=True)
        syms = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
        assert ("narrow64_opacked" in syms) == present, syms


def _clang_offload():
    clang = shutil.which("clang-16")
    ptxas = shutil.which("ptxas") or next((p for p in ("/usr/local/cuda/bin/ptxas",) if os.path.exists(p)), None)
    nvcc = shutil.which("nvcc")
    if not (clang and nvcc):
        return None
    out = subprocess.run([nvcc, "-dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True).stderr
    top = next((line[len("#$ TOP="):].strip() for line in out.splitlines() if line.startswith("#$ TOP=")), None)
    if not top or not os.path.exists(os.path.join(top, "nvvm", "libdevice", "libdevice.10.bc")):
        return None
    return clang, os.path.realpath(top), ptxas or os.path.join(top, "bin", "ptxas")


@pytest.mark.skipif(_clang_offload() is None, reason="needs clang-16 with nvptx OpenMP offload and CUDA")
def test_clang_device_pass_keeps_activations_in_registers(tmp_path):
    """gemm_big's routine in clang-16's sm_90 device pass: no stack frame (the plan's loops kept
    280 bytes of scratch arrays in local memory), its weights folded into the FMAs."""
    clang, cuda, ptxas = _clang_offload()
    generate(zoo.save("gemm_big", str(tmp_path / "g.onnx")), str(tmp_path), Options(name="g", embed=True))
    # -save-temps keeps the device pass's PTX after libdevice is linked in (its math inlined),
    # which is what ptxas sees in a real build; the packaging step after it may be missing here.
    subprocess.run([clang, "-O3", "-fopenmp", "-fopenmp-targets=nvptx64-nvidia-cuda", "--offload-arch=sm_90",
                    f"--cuda-path={cuda}", "-Wno-unknown-cuda-version", "-save-temps", "-c", "g.c", "-o", "g.o"],
                   cwd=tmp_path, capture_output=True)
    ptx = (tmp_path / "g-openmp-nvptx64-nvidia-cuda-sm_90.s").read_text()
    (tmp_path / "g.s").write_text(ptx)
    body = ptx[ptx.index(".visible .func g_infer("):]
    body = body[:body.index("\n}\n")]
    assert "ld.local" not in body and "st.local" not in body and "__local_depot" not in body
    assert len(re.findall(r"\bfma\.rn\.f32", body)) > 2700  # 2780 multiply-adds, unrolled
    info = subprocess.run([ptxas, "-arch=sm_90", "-c", "-v", "g.s", "-o", os.devnull], cwd=tmp_path,
                          capture_output=True, text=True, check=True).stderr
    frame = re.search(r"Function properties for g_infer\n\s*(\d+) bytes stack frame", info)
    assert frame and frame.group(1) == "0", info
