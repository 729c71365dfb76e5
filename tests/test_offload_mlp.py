"""The OpenMP offload device body of <name>_infer for MLPs (rosenna/emit/offload_mlp.py).

clang's device passes compile it; here it is compiled on the host with -DROSENNA_OFFLOAD_BODY=1 (the
macro rosenna_rt.h sets to 1 in those passes) and checked against onnxruntime with verify's
tolerance: narrow layers (registers in and out, every activation, widths not a multiple of 4),
wide layers (outputs accumulated over inputs read from local arrays), float64 of both, weights
embedded and read from a file (<name>_init packs the copy). FP32 chains with a wide layer also
get the warp path (a whole warp's 32 points, inputs passed by shuffles): it runs here in 32 host
threads, rosenna_rt.h's ROSENNA_WARP_* macros defined as shuffles through memory between
barriers (WARP_EMU). Where clang-16 with nvptx offload and CUDA's ptxas are installed, the device
pass's PTX is read: no local memory in the narrow form; the warp path's shuffles, its activemask
test, its read-only 16-byte weight loads and a small stack frame.
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


#: rosenna_rt.h's warp primitives for 32 host threads (one per lane), each shuffle a store, a
#: barrier, a load from the source lane's slot and a barrier; ``emu_shuffles`` counts lane 0's.
WARP_EMU = r"""#include <pthread.h>
#define ROSENNA_WARP 1
extern pthread_barrier_t emu_bar;
extern __thread int emu_lane;
extern float emu_f[32];
extern void *emu_p[32];
extern long emu_shuffles;
static inline void *emu_exchange(float v, const void *p, int src, float *out)
{
    emu_f[emu_lane] = v;
    emu_p[emu_lane] = (void *)p;
    emu_shuffles += emu_lane == 0;
    pthread_barrier_wait(&emu_bar);
    *out = emu_f[src];
    void *r = emu_p[src];
    pthread_barrier_wait(&emu_bar);
    return r;
}
static inline float emu_shfl(float v, int src)
{
    float r;
    emu_exchange(v, 0, src, &r);
    return r;
}
#define ROSENNA_WARP_LANE() emu_lane
#define ROSENNA_WARP_FULL() 1
#define ROSENNA_WARP_SYNC() pthread_barrier_wait(&emu_bar)
#define ROSENNA_WARP_SHFL(v, src) emu_shfl((v), (src))
#define ROSENNA_WARP_SHFL_XOR(v, mask) emu_shfl((v), emu_lane ^ (mask))
static inline void *emu_shfl_ptr(const void *p, int src)
{
    float unused;
    return emu_exchange(0.0f, p, src, &unused);
}
#define ROSENNA_WARP_SHFL_PTR(p, src) ((__typeof__(p))emu_shfl_ptr((p), (src)))
"""

#: Two warps' calls, points 0 .. 31 and n - 32 .. n - 1 (so every point), lane l of each its own.
WARP_DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include "{n}.h"

pthread_barrier_t emu_bar;
__thread int emu_lane;
float emu_f[32];
void *emu_p[32];
long emu_shuffles;
static float *x, *y;
static int n;

static void *lane(void *arg)
{{
    emu_lane = (int)(long)arg;
    for (int base = 0; base <= n - 32; base += n - 32 > 0 ? n - 32 : 1)
        {n}_infer(x + (size_t)(base + emu_lane) * {NX}, y + (size_t)(base + emu_lane) * {NY});
    return NULL;
}}

int main(int argc, char **argv)
{{
    n = atoi(argv[1]);
    x = malloc(sizeof(float) * (size_t)n * {NX});
    y = malloc(sizeof(float) * (size_t)n * {NY});
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof(float), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
    {init}
    pthread_barrier_init(&emu_bar, NULL, 32);
    pthread_t t[32];
    for (long l = 0; l < 32; ++l)
        if (pthread_create(&t[l], NULL, lane, (void *)l) != 0) return 4;
    for (int l = 0; l < 32; ++l)
        pthread_join(t[l], NULL);
    fprintf(stderr, "%ld shuffles\n", emu_shuffles);
    fwrite(y, sizeof(float), (size_t)n * {NY}, stdout);
    (void)argc;
    return 0;
}}
"""


def _models(tmp):
    """name -> (model path, precision, input range, the body's form: registers, wide or warp)."""
    acts = [a for a in ALL_ACTIVATIONS if ops.get(a[0]) or a[0] in ("SiLU", "Mish", "HardSwishPattern", "GeluErf")]
    widths = [3] + [9 + 2 * (i % 4) for i in range(len(acts))] + [5]
    return {
        "acts": (activation_mlp(tmp / "acts.onnx", widths, list(acts) + [None]), "single", 3.0, "registers"),
        # widths not a multiple of 16 (the warp path's columns per lane unaligned, inputs masked)
        "wide": (activation_mlp(tmp / "wide.onnx", [3, 70, 67, 5], [("Tanh", {}), ("LeakyRelu", {"alpha": 0.2}), None],
                                name="wide"), "single", 2.0, "warp"),
        # mlp128's shape: 16-byte weight rows, a 128-wide layer's 8 columns per lane
        "warp": (activation_mlp(tmp / "warp.onnx", [6, 96, 128, 8], [("Sigmoid", {}), ("Relu", {}), None],
                                name="warp"), "single", 2.0, "warp"),
        "narrow64": (activation_mlp(tmp / "narrow64.onnx", [4, 24, 17, 3], [("Tanh", {}), ("SiLU", {}), None],
                                    dtype=np.float64, name="narrow64"), "double", 3.0, "registers"),
        "wide64": (activation_mlp(tmp / "wide64.onnx", [5, 72, 2], [("Tanh", {}), ("Sigmoid", {})],
                                  dtype=np.float64, name="wide64"), "double", 2.0, "wide"),
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("offload_mlp"), {}


def _built(models, name):
    """A model of :func:`_models`; ``<model>_file``: the same with its weights in a file."""
    tmp, cache = models
    if name not in cache:
        base = name[:-len("_file")] if name.endswith("_file") else name
        path, precision, scale, form = _models(tmp)[base]
        d = tmp / name
        embed = base == name
        plan, _ = generate(path, str(d), Options(name=name, precision=precision, embed=embed))
        dtype = np.float64 if precision == "double" else np.float32
        x = np.random.default_rng(5).uniform(-scale, scale, (POINTS, plan.nx)).astype(dtype)
        x.tofile(d / "x.bin")
        init = "" if embed else f'if ({name}_init("{d / (name + ".rwt")}") != 0) return 5;'
        (d / "drv.c").write_text(DRIVER.format(n=name, t=plan.ctype, NX=plan.nx, NY=plan.ny, init=init))
        if form == "warp":
            (d / "warp_emu.h").write_text(WARP_EMU)
            (d / "warp_drv.c").write_text(WARP_DRIVER.format(n=name, NX=plan.nx, NY=plan.ny, init=init))
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
        cache[name] = plan, d, x, want, form
    return cache[name]


def _run(d, name, x, plan, defines):
    exe = d / ("body" if defines else "loops")
    subprocess.run(["gcc", "-O2", "-Wno-unknown-pragmas", *defines, "-I", str(d), str(d / "drv.c"), str(d / f"{name}.c"),
                    "-o", str(exe), "-lm"], check=True)
    raw = subprocess.run([str(exe), str(POINTS), str(d / "x.bin")], capture_output=True, check=True).stdout
    return np.frombuffer(raw, x.dtype).reshape(POINTS, plan.ny)


@pytest.mark.parametrize("name", ["acts", "wide", "warp", "narrow64", "wide64", "wide_file", "narrow64_file"])
def test_offload_body_matches_onnxruntime(models, name):
    """The one-thread body (on the host, ROSENNA_WARP is 0: a partial warp's path)."""
    plan, d, x, want, form = _built(models, name)
    src = (d / f"{name}.c").read_text()
    assert offload_mlp.BODY_GUARD in src and f"{name}_opacked" in src
    # the form the layer widths call for: local ping-pong arrays only when a layer is wide, the
    # warp path for FP32 chains with a wide layer (staged.fits)
    assert (f"{name}_owarp(x, y)" in src) == (form == "warp")
    assert (f"{plan.ctype} a[" in src) == (form != "registers")
    assert np.abs(want).max() > 0.01
    for label, defines in (("device body", ["-DROSENNA_OFFLOAD_BODY=1"]), ("plan's loops", [])):
        got = _run(d, name, x, plan, defines)
        result = compare(got, want, x.dtype, output=f"{name} {label}")
        assert result.passed, result.message("rosenna", "onnxruntime")


@pytest.mark.parametrize("name", ["wide", "warp", "wide_file"])
def test_warp_path_in_32_host_threads(models, name):
    """The warp path, each lane a host thread: two calls of 32 points against onnxruntime."""
    plan, d, x, want, _ = _built(models, name)
    exe = d / "warp"
    subprocess.run(["gcc", "-O1", "-Wno-unknown-pragmas", "-DROSENNA_OFFLOAD_BODY=1", "-include", str(d / "warp_emu.h"),
                    "-I", str(d), str(d / "warp_drv.c"), str(d / f"{name}.c"), "-o", str(exe), "-lm", "-pthread"],
                   check=True)
    run = subprocess.run([str(exe), str(POINTS), str(d / "x.bin")], capture_output=True, check=True)
    assert int(run.stderr.split()[0]) > 1000, run.stderr  # it took the warp path
    got = np.frombuffer(run.stdout, x.dtype).reshape(POINTS, plan.ny)
    result = compare(got, want, x.dtype, output=f"{name} warp path")
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


@pytest.mark.skipif(_clang_offload() is None, reason="needs clang-16 with nvptx OpenMP offload and CUDA")
def test_clang_device_pass_warp_path(models):
    """The warp path in clang-16's sm_90 device pass: _infer tests activemask and calls it; it
    shuffles (inputs by lane, the output layer's reduce-scatter), reads weights as read-only 16-byte
    loads, and keeps its sums in registers: a select of two loads in the reduce-scatter kept all 64
    output sums in local memory (896-byte frame for mlp128, 232 without)."""
    clang, cuda, ptxas = _clang_offload()
    _, d, _, _, _ = _built(models, "warp")
    subprocess.run([clang, "-O3", "-fopenmp", "-fopenmp-targets=nvptx64-nvidia-cuda", "--offload-arch=sm_90",
                    f"--cuda-path={cuda}", "-Wno-unknown-cuda-version", "-save-temps", "-c", "warp.c", "-o", "warp.o"],
                   cwd=d, capture_output=True)
    ptx = (d / "warp-openmp-nvptx64-nvidia-cuda-sm_90.s").read_text()
    (d / "warp.s").write_text(ptx)

    def func(name):
        text = ptx[ptx.index(f".func {name}("):]
        return text[:text.index("\n}\n")]

    infer, warp = func("warp_infer"), func("warp_owarp")
    assert "activemask.b32" in infer and "warp_owarp" in infer and "warp_oalone" in infer
    assert "shfl.sync.idx" in warp and "shfl.sync.bfly" in warp and "ld.global.nc.v4.f32" in warp
    info = subprocess.run([ptxas, "-arch=sm_90", "-c", "-v", "warp.s", "-o", os.devnull], cwd=d,
                          capture_output=True, text=True, check=True).stderr
    frame = re.search(r"Function properties for warp_owarp\n\s*(\d+) bytes stack frame", info)
    assert frame and int(frame.group(1)) <= 512, info
