"""The native CUDA/HIP kernel: emitted text, and compile-only builds with nvcc (sm_80, sm_90) and
hipcc (gfx90a) of the golden models, embedded and file-loaded. Runs on the GPU are the gate's
(results/h200/*/gate/); nothing here needs a device."""

import os
import shutil
import subprocess
from types import SimpleNamespace

import pytest

import devflags
from rosenna import strategy, zoo
from rosenna.emit import cuda
from rosenna.emit.cuda import whole_field
from rosenna.generate import Options, build_plan, generate

MODELS = ("gemm_small", "gemm_big", "mlp128")


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    for name in MODELS:
        zoo.save(name, str(d / f"{name}.onnx"))
    return d


def _plan(zoo_dir, name, embed=None):
    return build_plan(str(zoo_dir / f"{name}.onnx"), Options(lang="c", embed=embed))[1]


@pytest.mark.parametrize("name,kind", [("gemm_small", "mlp-narrow"), ("gemm_big", "mlp-narrow"),
                                       ("mlp128", "mlp-wide")])
def test_kernel_choice(zoo_dir, name, kind):
    choice = cuda.choose(_plan(zoo_dir, name), cuda.CONSTANT_LIMIT)
    assert choice.kind == kind
    assert [layer.n for layer in choice.layers][-1] == _plan(zoo_dir, name).ny


def test_constant_threshold_decides_storage(zoo_dir):
    """The storage the code gets (the #define), not what the header comment says about it."""
    plan = _plan(zoo_dir, "gemm_big")  # 11,604 bytes of weights
    assert "#define ROSENNA_CONST ROSENNA_GLOBAL_MEMORY" in cuda.kernel_source(plan, "stamp", 6144)
    assert "#define ROSENNA_CONST ROSENNA_CONSTANT_MEMORY" in cuda.kernel_source(plan, "stamp", 16384)
    assert "#define ROSENNA_CONST ROSENNA_CONSTANT_MEMORY" in cuda.kernel_source(_plan(zoo_dir, "gemm_small"), "s")


def test_packed_layout_round_trips(zoo_dir):
    """The batched kernel's repacked copy holds exactly the plan's weights, input-major."""
    choice = cuda.choose(_plan(zoo_dir, "gemm_big"), cuda.CONSTANT_LIMIT)
    packed = choice.packed()
    for layer, (woff, boff, npad) in zip(choice.layers, choice.offsets):
        block = packed[woff:boff].reshape(layer.k, npad)
        assert (block[:, :layer.n] == layer.w.T).all() and not block[:, layer.n:].any()
        assert (packed[boff:boff + layer.n] == layer.b).all()


def test_non_mlp_takes_point_kernel(tmp_path):
    import models

    path = models.write("two_in_two_out", tmp_path)
    plan = build_plan(path, Options(lang="c"))[1]
    assert cuda.choose(plan, cuda.CONSTANT_LIMIT).kind == "point"
    double = build_plan(str(tmp_path / "two_in_two_out.onnx"), Options(lang="c", precision="double"))[1]
    assert cuda.choose(double, cuda.CONSTANT_LIMIT).kind == "point"


def test_runtime_header_maps_cuda_and_hip():
    from rosenna.emit import c

    from rosenna import emit

    text = emit.runtime_header()
    for name, cuda_name, hip_name in cuda.RUNTIME_API:
        assert f"#define {name}" in text and cuda_name in text and hip_name in text
    assert text.index("__HIPCC__") < text.index("#elif defined(__CUDACC__)")


def test_omp_batch_steps_aside_for_native_kernel(zoo_dir, tmp_path):
    generate(str(zoo_dir / "gemm_big.onnx"), str(tmp_path), Options(lang="c", embed=False))
    src = (tmp_path / "gemm_big.c").read_text()
    assert "#ifndef ROSENNA_NATIVE_KERNEL" in src and "gemm_big_device_upload(host)" in src
    assert (tmp_path / "gemm_big_kernel.cu").exists()


def _build(directory, name, backend, flags, env=None):
    cmd = ["make", "-s", "-f", f"{name}.mk", f"ROSENNA_BACKEND={backend}", "CFLAGS=-O1", "ROSENNA_OFFLOAD_FLAGS=",
           f"DEVFLAGS={flags}"]
    proc = subprocess.run(cmd, check=False, cwd=directory, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)} in {directory}:\n{proc.stdout}{proc.stderr}"
    for lib in (f"lib{name}.a", f"lib{name}_device.a"):
        assert (directory / lib).exists(), lib


# gemm_big embedded: test_host_compiler_links_the_cuda_archive_with_print_libs builds it (both
# architectures) and links it.
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("name,embed,archs", [
    ("gemm_small", True, devflags.NVCC_SM80_SM90), ("mlp128", True, devflags.NVCC_SM80_SM90),
    ("gemm_small", False, "-arch=sm_90"), ("gemm_big", False, "-arch=sm_90"), ("mlp128", False, "-arch=sm_90")],
    ids=["gemm_small-embedded-sm_80+sm_90", "mlp128-embedded-sm_80+sm_90", "gemm_small-file-loaded-sm_90",
         "gemm_big-file-loaded-sm_90", "mlp128-file-loaded-sm_90"])
def test_nvcc_compiles(zoo_dir, tmp_path, name, embed, archs):
    """Each model's kernel file and library build for sm_80 (the A100 kernels: no 194 KB blocks)
    and sm_90, embedded (both in one nvcc call); file-loaded weights (the upload path) once, on
    sm_90."""
    generate(str(zoo_dir / f"{name}.onnx"), str(tmp_path), Options(lang="c", embed=embed))
    _build(tmp_path, name, "cuda", f"{devflags.NVCC} {archs}")


HOST_LINK = r"""#include <stdio.h>
#include "{n}.h"
int main(void)
{{
    float x[{N}_NX] = {{0.5f}}, y[{N}_NY];
    {n}_infer(x, y);
    printf("%d %.6f\n", {n}_infer_batch(0, NULL, NULL, NULL), y[0]);
    return 0;
}}
"""


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_host_compiler_links_the_cuda_archive_with_print_libs(zoo_dir, tmp_path):
    """README: lib<name>.a of the cuda backend links with any host compiler plus `make print-libs`
    (the CUDA runtime's directory, found from nvcc, and the C++ runtime nvcc's objects need). The
    program runs here without a GPU: the per-point routine on the host, a batch of none. The
    build is gemm_big's embedded one for sm_80 and sm_90 (test_nvcc_compiles has the others)."""
    generate(str(zoo_dir / "gemm_big.onnx"), str(tmp_path), Options(lang="c", name="gb", embed=True))
    _build(tmp_path, "gb", "cuda", f"{devflags.NVCC} {devflags.NVCC_SM80_SM90}")
    libs = subprocess.run(["make", "-s", "-f", "gb.mk", "ROSENNA_BACKEND=cuda", "print-libs"], cwd=tmp_path,
                          capture_output=True, text=True, check=True).stdout.split()
    assert "-lcudart" in libs and any(a.startswith("-L/") for a in libs), libs
    (tmp_path / "main.c").write_text(HOST_LINK.format(n="gb", N="GB"))
    subprocess.run(["gcc", "-O2", "main.c", "libgb.a", *libs, "-lm", "-o", "main"], cwd=tmp_path, check=True)
    out = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "0" and 0.0 < float(out[1]) < 1.0  # sigmoid output


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "file-loaded"])
@pytest.mark.parametrize("name", MODELS)
def test_hipcc_compiles(zoo_dir, tmp_path, name, embed):
    generate(str(zoo_dir / f"{name}.onnx"), str(tmp_path), Options(lang="c", embed=embed))
    _build(tmp_path, name, "hip", f"{devflags.HIPCC} --offload-arch=gfx90a", env=dict(os.environ, HIP_PLATFORM="amd"))


def test_bad_backend_is_refused(zoo_dir, tmp_path):
    generate(str(zoo_dir / "gemm_small.onnx"), str(tmp_path), Options(lang="c"))
    proc = subprocess.run(["make", "-s", "-f", "gemm_small.mk", "ROSENNA_BACKEND=sycl"], check=False, cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "choose omp, cuda or hip" in proc.stderr


def _beyond_mlp(tmp_path):
    """Models past the MLP kernels: a conv net on the whole-field path (infer_one, one launch per
    op) and an LSTM cell on the point kernel."""
    import op_models

    return {"convnet": op_models.convnet(tmp_path / "convnet.onnx"),
            "lstm_cell": op_models.lstm_cell(tmp_path / "lstm_cell.onnx")}


def test_whole_field_plan_gets_one_launch_per_call(tmp_path, monkeypatch):
    from rosenna import parallel
    from rosenna.strategy import Tuning

    # the direct loops of every form (the convs in shared-memory tiles: tests/test_conv_smem.py);
    # the small net gets a clustered kernel too
    path = _beyond_mlp(tmp_path)["convnet"]
    plan = build_plan(str(path), Options(lang="c", tuning=Tuning().replace(smem_conv="", cluster_min_phases=0)))[1]
    assert plan.path == "whole"  # 64x64, 8 channels: far too much scratch for one thread
    text = cuda.kernel_source(plan, "stamp")
    regions = [r for r in parallel.regions(plan.body) if r[0] != "comment"]
    assert len(regions) == 27  # each padded 3x3 conv: interior, 4 edges, 4 corners
    # One phase per conv (the activations are fused into their conv; the Identity output is the
    # last conv's storage in y, no copy), each holding its conv's 9 regions, twice: in one
    # persistent kernel (a grid barrier between phases, launched cooperatively), as one kernel
    # per phase with the convolutions jammed, and in the clustered kernel (field18: a cluster
    # barrier between phases); no per-point kernel. conv1 (8 -> 8 channels) also as an implicit
    # GEMM (rosenna/emit/cuda/conv_igemm.py), launched instead where the call has the rows.
    assert text.count("__global__") == 6 and text.count("__global__ void __launch_bounds__(128) convnet_igemm1(") == 1
    clustered = text[text.index("convnet_cluster(const float"):text.index("static int convnet_clustered(")]
    assert clustered.count("ROSENNA_CLUSTER_BARRIER();") == 2 and "<<<" not in clustered
    kernel = text[text.index("convnet_field(const float"):text.index("/* The phases as separate launches")]
    assert kernel.count("grid.sync();") == 2 and "<<<" not in kernel
    # the persistent kernel: grid-stride over count samples, a thread per output element
    assert [line.split("g < ")[1].split(";")[0] for line in kernel.splitlines() if "for (long g = first" in line] == \
        ["count * 32768l", "count * 32768l", "count * 4096l"]
    assert "acc_7" not in kernel
    # the launched phases: a thread computes the 8 output channels of conv0 and conv1 (62x62
    # interior + 4 x 62 edges + 4 x 8 corners, whose chain is the channel alone: 4124 threads per
    # sample instead of 8x64x64), and 4 rows of the one-channel conv2 (its 62 interior rows: 15
    # jammed + a remainder of 2; 1306 instead of 64x64)
    phases = text[text.index("/* The phases as separate launches"):text.index("#ifndef ROSENNA_CLUSTER_BARRIER")]
    assert [line.split("count * ")[1].split("l)")[0] for line in phases.splitlines() if "if (g >= (long)count * " in line] == \
        ["4124", "4124", "1306"]
    # 8 sums in the interior and edges of conv0 and conv1 (5 regions each), 4 in conv2's interior
    assert phases.count("acc_7 = 0.0f;") == 10 and phases.count("acc_3 = 0.0f;") == 11
    for op, regions in (("Conv+Relu: conv0+act0", 9), ("Conv+Tanh: conv1+act1", 9)):
        assert f": {op} ({regions} regions, " in kernel and f": {op} ({regions} regions, " in phases
    assert ": Conv: conv2 (9 regions, " in kernel and ": Conv: conv2 (10 regions, " in phases
    assert phases.count("<<<") == 4 and phases.count("convnet_igemm1<<<") == 1
    # convnet_run: the persistent kernel only when the resident blocks cover the widest phase
    run = text[text.index("static int convnet_run("):]
    assert run.count("rosennaLaunchCooperativeKernel(") == 1 and "count * 32768l" in run
    assert "if (needed > resident)\n        return convnet_phases(count, x, y, s);" in run
    assert 'extern "C" int convnet_infer_one(' in text and "return convnet_run(1, x, y, " in text
    # infer_batch: each op's launch covers up to 256 samples (256 KiB of intermediates per
    # sample: 256 fit 64 MiB), not one launch per op and sample
    samples = strategy.decide(plan).field.samples
    assert samples == 256
    assert f"for (int start = 0; start < n; start += {samples}) {{" in text
    assert "convnet_infer_one(x + (long)i * " not in text
    # the C file's OpenMP infer_one steps aside for the kernel file's, and keeps one loop per region
    generate(str(path), str(tmp_path / "g"), Options(lang="c"))
    src = (tmp_path / "g" / "convnet.c").read_text()
    assert src.index("#ifndef ROSENNA_NATIVE_KERNEL", src.index("int convnet_infer_batch")) < src.index("int convnet_infer_one(")
    one = src[src.index("int convnet_infer_one("):]
    assert one.count("#pragma omp target teams distribute parallel for") == 23  # conv2's 4 corners are serial
    batch = src[src.index("int convnet_infer_batch("):src.index("int convnet_infer_one(")]
    assert batch.count("#pragma omp target teams distribute parallel for") == 27  # every region, samples collapsed


def _toy_plan(*regions):
    """A hand-made plan for parallel.launch_groups: each region ``(store, extent, offset, load)`` is
    ``store[i + offset] = load[i]`` over ``extent`` elements (extent 1: a serial statement)."""
    from rosenna.loopir import Assign, Comment, Idx, Loop, Ref

    body = []
    for k, (store, extent, offset, load) in enumerate(regions):
        body.append(Comment(f"op{k}"))
        if extent == 1:
            body.append(Assign(Ref(store, Idx.of(offset)), Ref(load, Idx())))
        else:
            body.append(Loop("i0", extent, [Assign(Ref(store, Idx.of("i0") + offset), Ref(load, Idx.of("i0")))]))
    storage = {"in": ("x", "x", 0), "a": ("t", "t0", 0), "b": ("t", "t0", 16), "c": ("t", "t1", 0),
               "out": ("y", "y", 0), "w": ("w", "w0", 0)}
    return SimpleNamespace(body=body, field_body=body, storage=storage)


def _grouping(*regions):
    from rosenna import parallel

    return [[m.op for m in launch.members] for launch in parallel.launch_groups(_toy_plan(*regions))]


def test_launch_grouping_keeps_dependent_regions_apart():
    # a[0:8] from x, then out from a: the second reads what the first writes, so two launches
    assert _grouping(("a", 8, 0, "in"), ("out", 8, 0, "a")) == [["op0"], ["op1"]]
    # c from a, then a rewritten: the second writes what the first reads
    assert _grouping(("c", 8, 0, "a"), ("a", 8, 0, "in")) == [["op0"], ["op1"]]
    # b lives in t0 at element 16, so reading b after writing a is a dependency on the storage
    assert _grouping(("a", 8, 0, "in"), ("c", 8, 0, "b")) == [["op0"], ["op1"]]
    # two stores into overlapping elements of t0: a[0:8] and b[-12:-4] = t0[4:12]
    assert _grouping(("a", 8, 0, "in"), ("b", 8, -12, "in")) == [["op0"], ["op1"]]


def test_launch_grouping_fuses_independent_regions():
    from rosenna import parallel

    # disjoint parts of one storage (t0[0:8], t0[8] serially, b[0:8] = t0[16:24]), another buffer
    # from the weights, all reading only x or weights: one launch of 8 + 1 + 8 + 8 threads
    plan = _toy_plan(("a", 8, 0, "in"), ("a", 1, 8, "in"), ("b", 8, 0, "in"), ("c", 8, 0, "w"),
                     ("out", 8, 0, "c"))
    launches = parallel.launch_groups(plan)
    assert [[m.op for m in launch.members] for launch in launches] == [["op0", "op1", "op2", "op3"], ["op4"]]
    assert [m.kind for m in launches[0].members] == ["parallel", "serial", "parallel", "parallel"]
    assert [launch.threads for launch in launches] == [25, 8]
    body = "\n".join(whole_field.launch_body(SimpleNamespace(ctype="float", precision="single", name="toy",
                                                          storage=plan.storage), launches[0],
                                          renderer=_toy_renderer()))
    assert "if (tid < 8l) {" in body and "} else if (tid < 9l) {" in body and "} else if (tid < 25l) {" in body
    assert "const long r = tid - 9l;" in body  # the third region counts from its own start


def _toy_renderer():
    from rosenna.emit.lang import C
    from rosenna.emit.render import Renderer

    return Renderer(C, "single", lambda buf: (buf, 0, True))


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "file-loaded"])
@pytest.mark.parametrize("name", ["convnet", "lstm_cell"])
def test_nvcc_compiles_beyond_mlp(tmp_path, name, embed):
    path = _beyond_mlp(tmp_path)[name]
    generate(str(path), str(tmp_path / "g"), Options(lang="c", embed=embed))
    _build(tmp_path / "g", name, "cuda", f"{devflags.NVCC} -arch=sm_90")


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
@pytest.mark.parametrize("name", ["convnet", "lstm_cell"])
def test_hipcc_compiles_beyond_mlp(tmp_path, name):
    path = _beyond_mlp(tmp_path)[name]
    generate(str(path), str(tmp_path / "g"), Options(lang="c", embed=False))
    _build(tmp_path / "g", name, "hip", f"{devflags.HIPCC} --offload-arch=gfx90a", env=dict(os.environ, HIP_PLATFORM="amd"))
