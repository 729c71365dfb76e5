"""Phase fusion of the CUDA/HIP whole-field path (rosenna/strategy/field/fusion.py, rendered by rosenna/emit/cuda/field_fuse.py): the U-Net of
examples/surrogates/poisson_guess in small (tests/op_models.py unet: AveragePools, the Reshape and
Concat upsampling, skip Adds) with its cheap ops computed where they are read, the kernels' code run
on the host against onnxruntime (tests/test_infer_one.py emulate_launches), and the index algebra
that lets a reader call a region's function without decoding."""

import dataclasses
import os
import shutil
import subprocess

import pytest

import devflags
import op_models
from rosenna import generate as gen
from rosenna.strategy.field import fusion, index as field_index
from rosenna.loopir import Idx, Loop
from rosenna.parallel import launch_groups
from test_infer_one import assert_close, emulate_launches, reference


@pytest.fixture(scope="module")
def unet_path(tmp_path_factory):
    return op_models.unet(tmp_path_factory.mktemp("unet") / "unet.onnx")


@pytest.fixture
def fused(monkeypatch):
    """The tuning of every phase of at most 4 loads computed where read, decoding where needed (the
    generator's defaults keep every phase: the tuning's field_inline_loads)."""
    from rosenna.strategy import Tuning

    return Tuning().replace(field_inline_loads=4, field_decode=True)


def test_unet_phases(unet_path):
    """14 phases (3 convs down, 2 pools, per level up 2 Concats, an Add and a conv, the last conv)
    become the 6 convs; without decoding, the Concats keep theirs; by default nothing is fused."""
    _, plan = gen.build_plan(unet_path, gen.Options(lang="c"))
    assert len(launch_groups(plan)) == 14
    sched = fusion.schedule(plan, 4, decode=True)
    assert [launch.notes for launch in sched.phases] == [
        ["Conv: down0"], ["Conv: down1"], ["Conv: down2"], ["Conv+Relu: up1+up1.a"], ["Conv: up0"], ["Conv: out"]]
    assert len(sched.values) == 8
    assert all(len(launch.members) == 1 for _, launch in sched.values)  # Concat(v, v): one region, no branch
    assert len(fusion.schedule(plan).phases) == 14
    assert len(fusion.schedule(plan, 2, decode=True).phases) == 8  # the pools (4 loads) kept
    exact = fusion.schedule(plan, 4, decode=False)
    assert [launch.notes[0].split(":")[0] for _, launch in exact.values] == ["AveragePool", "AveragePool", "Add", "Add"]


@pytest.mark.parametrize("persistent", [False, True])
def test_unet_fused_emulated_on_host(tmp_path, unet_path, persistent, fused):
    """The fused phases as the kernel file holds them (its persistent kernel's, unjammed, or its
    launches', jammed), threads in order and in reverse, against onnxruntime. The kernel file
    reads the pools and Adds through their regions' functions (indices that follow from the
    reader's) and the Concats through decoding ones (a Concat of a value with itself as one
    region with one more index: field_index.merged)."""
    plan, x, forwards, backwards = emulate_launches(unet_path, tmp_path / "gen", persistent=persistent, tuning=fused)
    kernel = (tmp_path / "gen" / f"{plan.name}_kernel.cu").read_text()
    assert f"{plan.name}_value1_0(x, y, s, " in kernel  # the first pool, from the conv's indices
    assert "int o)\n{\n    const unsigned r = o;" in kernel  # a Concat's element o, decoded (one region)
    want = reference(unet_path, plan, x)
    form = "persistent kernel" if persistent else "launches"
    assert_close(forwards, want, what=f"fused {form}, threads in order")
    assert_close(backwards, want, what=f"fused {form}, threads in reverse")


def test_fused_phases_need_their_own_buffers(tmp_path, unet_path, fused):
    """The check above can fail: the fused phases over the plan's own buffer sharing (made for one
    phase per op) read a skip connection after the upsampling conv has overwritten it."""
    def plan_buffers(plan):
        sched = fusion.schedule(plan)
        storage = {name: plan.storage[name] if where[0] == "t" else where for name, where in sched.plan.storage.items()}
        return fusion.Schedule(dataclasses.replace(sched.plan, storage=storage, scratch=plan.scratch),
                               sched.phases, sched.values)

    plan, x, forwards, _ = emulate_launches(unet_path, tmp_path / "gen", persistent=True, schedule=plan_buffers,
                                            tuning=fused)
    with pytest.raises(AssertionError):
        assert_close(forwards, reference(unet_path, plan, x), what="fused phases, the plan's buffers")


def test_digits():
    """A reader's index in terms of a region's loop indices: exact where each index provably stays
    in its loop, None where it would not (the reader then decodes at run time)."""
    chain = [Loop("i0", 8, []), Loop("i1", 8, []), Loop("i2", 8, [])]
    store = Idx((("i0", 64), ("i1", 8), ("i2", 1)))
    # a 3x3 conv's interior read: channel i3, row i1 + i4 - 1 (i1 in 1..6 as i1 + 1), column i2 + i5
    read = Idx((("i1", 8), ("i2", 1), ("i3", 64), ("i4", 8), ("i5", 1)), 0)
    found = field_index.digits(read, {"i1": 6, "i2": 7, "i3": 8, "i4": 3, "i5": 2}, store, chain)
    assert found == [Idx((("i3", 1),)), Idx((("i1", 1), ("i4", 1))), Idx((("i2", 1), ("i5", 1)))]
    # a constant borrowed across digits: row 1, column -1 + i2 with i2 in 1..7
    found = field_index.digits(Idx((("i2", 1),), 8 - 1), {"i2": 8}, store, chain)
    assert found is None  # i2 = 0 would reach column -1 of row 1, i.e. row 0 column 7: not provable
    found = field_index.digits(Idx((("i2", 1),), 8 + 1), {"i2": 7}, store, chain)
    assert found == [Idx(), Idx((), 1), Idx((("i2", 1),), 1)]
    found = field_index.digits(Idx((("i2", 1),), 7), {"i2": 2}, store, chain)
    assert found is None  # column 7 + i2 runs into the next row
    # a Concat's region storing every other element: an odd step of the reader is no index of it
    concat = Idx((("i0", 32), ("i1", 2)))
    chain2 = [Loop("i0", 8, []), Loop("i1", 16, [])]
    assert field_index.digits(Idx((("i0", 32), ("i2", 1))), {"i0": 8, "i2": 8}, concat, chain2) is None
    assert field_index.digits(Idx((("i0", 32), ("i2", 2))), {"i0": 8, "i2": 8}, concat, chain2) == \
        [Idx((("i0", 1),)), Idx((("i2", 1),))]


@pytest.mark.skipif(not (shutil.which("nvcc") and shutil.which("hipcc")), reason="nvcc or hipcc not installed")
def test_fused_kernel_compiles_for_cuda_and_hip(tmp_path, unet_path, fused):
    """The kernel file with value functions, both kinds, under nvcc (sm_90) and hipcc (gfx90a),
    host code -Wall clean."""
    gen.generate(unet_path, str(tmp_path), gen.Options(lang="c", embed=True, infer_one=True, tuning=fused))
    kernel = tmp_path / "unet_kernel.cu"
    assert "unet_value1_0(x, y, s, " in kernel.read_text()
    for cmd, env in ((["nvcc", "-O1", *devflags.NVCC_DEVICE.split(), "-arch=sm_90", "-Xcompiler", "-Wall,-Werror"], None),
                     (["hipcc", devflags.HIPCC, "--offload-arch=gfx90a", "-x", "hip"], dict(os.environ, HIP_PLATFORM="amd"))):
        proc = subprocess.run(cmd + ["-c", str(kernel), "-o", str(tmp_path / "k.o")], capture_output=True, text=True,
                              env=env)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stderr[-3000:]}"


def test_field3d_fused_emulated_on_host(tmp_path, fused):
    """tests/test_spatial_whole.py's 3-D model with its SiLU, Concat (of two values: decoded with a
    branch per region), Add and constant Pad computed where they are read (12 launches, one of them
    the first Conv's padded input from rosenna.passes.conv_pad, -> 7 phases), the persistent
    kernel's phases against onnxruntime."""
    from test_spatial_whole import field3d

    path = field3d(tmp_path / "field3d.onnx")
    _, plan = gen.build_plan(path, gen.Options(lang="c", tuning=fused))
    assert [len(launch_groups(plan)), len(fusion.schedule(plan).phases)] == [12, 7]
    plan, x, forwards, backwards = emulate_launches(path, tmp_path / "gen", persistent=True, tuning=fused)
    assert "        if (o == " in (tmp_path / "gen" / f"{plan.name}_kernel.cu").read_text()  # the Concat's two regions
    want = reference(path, plan, x)
    assert_close(forwards, want, rtol=1e-4, atol=1e-5, what="fused persistent kernel, threads in order")
    assert_close(backwards, want, rtol=1e-4, atol=1e-5, what="fused persistent kernel, threads in reverse")


def test_persistent_kernel_may_stride(tmp_path):
    """With the tuning's field_persistent_waves > 1, <name>_run keeps the persistent kernel up to that
    many times the resident blocks (on the resident blocks, each thread striding), and launches the
    phases past it or without cooperative launches; its block size is field_persistent_threads."""
    from rosenna.emit.cuda import whole_field
    from rosenna.strategy import Tuning

    tuning = Tuning().replace(field_persistent_waves=4, field_persistent_threads=512)
    _, plan = gen.build_plan(op_models.convnet(tmp_path / "convnet.onnx"), gen.Options(lang="c", tuning=tuning))
    run = whole_field.infer_one(plan)
    run = run[run.index("static int convnet_run("):]
    assert ("    long needed = (count * 32768l + 511) / 512;\n"
            "    if (resident < 0 || needed > 4l * resident)\n        return convnet_phases(count, x, y, s);\n"
            "    if (needed > resident)") in run and "        needed = resident;\n" in run
    assert "dim3((unsigned)needed), dim3(512)" in run and "convnet_field, 512, 0)" in run


def test_kernel_batch_step_of_the_unet():
    """The kernel file's batch takes the poisson_guess U-Net's 256 samples in one step (106 MiB of
    intermediates under the tuning's cuda_whole_batch_bytes); the OpenMP/OpenACC batches keep 128."""
    from rosenna.emit import whole
    from rosenna.emit.cuda import whole_field

    _, plan = gen.build_plan(os.path.join(os.path.dirname(__file__), "..", "examples", "surrogates", "poisson_guess",
                                          "pguess.onnx"), gen.Options(lang="c"))
    from rosenna.emit import cuda

    assert (cuda.choose(plan).strategy.field.samples, whole.batch_samples(plan)) == (256, 128)
    assert "for (int start = 0; start < n; start += 256) {" in whole_field.KIND.launch(plan, cuda.choose(plan))[1]


def emulate_clusters(model_path, out, blocks=2, threads=32, samples=3, tuning=None):
    """Run ``<name>_cluster`` on the host as one launch of ``samples`` clusters executes it: per
    phase (the cluster barrier ends a phase for every thread of the cluster), every sample, every
    thread rank ``first`` of the cluster (forwards, then in a second pass backwards), each running
    the very lines of the kernel's phase loop. Returns (plan, x, y forwards, y backwards)."""
    import numpy as np
    from rosenna import strategy
    from rosenna.emit.cuda import whole_field
    from test_infer_one import EMULATE_MAIN

    plan, _ = gen.generate(model_path, str(out), gen.Options(lang="c", embed=True, infer_one=True, tuning=tuning))
    n, t = plan.name, plan.ctype
    kernel = (out / f"{n}_kernel.cu").read_text()
    field = strategy.decide(plan).field
    sched, buffer = field.cluster, whole_field.cluster_buffer(field)
    funcs, calls, width = [], [], blocks * threads
    for k, phase in enumerate(whole_field.cluster_phases(field, buffer)):
        lines = "\n".join(phase)
        assert lines in kernel, f"phase {k} differs from {n}_cluster's"
        funcs.append(f"static void phase{k}(const {t} *x, {t} *y, long s, long first)\n{{\n"
                     f"    const long step = {width}l;\n{lines}\n    (void)x;\n    (void)y;\n}}")
        calls.append(f"    for (long s = 0; s < count; ++s)\n        for (long j = 0; j < {width}l; ++j)\n"
                     f"            phase{k}(x, y, s, reverse ? {width - 1}l - j : j);")
    buffers = "\n".join(f"static {t} {buffer(sched.plan, i)}[{samples} * {size}];"
                        for i, size in enumerate(sched.plan.scratch))
    clears = "\n".join(f"    memset({buffer(sched.plan, i)}, 0xff, sizeof {buffer(sched.plan, i)});"
                       for i in range(len(sched.plan.scratch)))
    text = (out / f"{n}.c").read_text() + EMULATE_MAIN.format(
        n=n, t=t, NX=plan.nx, NY=plan.ny, buffers=buffers, launches="\n\n".join(funcs), calls="\n".join(calls),
        clears=clears)
    (out / "emulate.c").write_text(text)
    subprocess.run(["gcc", "-O1", "-Wall", "-Wno-unknown-pragmas", "-Werror", "-I", str(out), "emulate.c", "-o",
                    "emulate", "-lm"], cwd=out, check=True, capture_output=True)
    x = np.random.default_rng(1).uniform(-1, 1, (samples, plan.nx)).astype(np.float32)
    x.tofile(out / "x.bin")
    subprocess.run([str(out / "emulate"), str(samples), "x.bin", "y.bin"], cwd=out, check=True)
    y = np.fromfile(out / "y.bin", np.float32).reshape(2, samples, plan.ny)
    return plan, x, y[0], y[1]


@pytest.fixture
def clusters(monkeypatch):
    """The tuning of a kernel file with <name>_cluster, run for up to 256 samples (cluster_samples)
    whatever the plan's phase count (cluster_min_phases), its convs as direct loops (smem_cluster off: the tiled ones have no host form of their block barriers;
    tests/test_conv_smem.py runs their tiles thread by thread)."""
    from rosenna.strategy import Tuning

    return Tuning().replace(cluster_samples=256, cluster_min_phases=0, smem_cluster=False)


def test_unet_clusters_emulated_on_host(tmp_path, unet_path, clusters):
    """<name>_cluster's phases, 64 threads of a cluster striding over each phase
    of each of 3 samples, threads in order and in reverse, against onnxruntime; a cluster barrier
    between every two consecutive phases and nowhere else."""
    plan, x, forwards, backwards = emulate_clusters(unet_path, tmp_path / "gen", tuning=clusters)
    kernel = (tmp_path / "gen" / f"{plan.name}_kernel.cu").read_text()
    body = kernel[kernel.index(f"__global__ void __launch_bounds__({clusters.cluster_threads}) {plan.name}_cluster("):]
    body = body[:body.index("\n}\n")]
    phases = [line for line in body.splitlines() if line.startswith("    /* phase ")]
    barriers = [k for k, line in enumerate(body.splitlines()) if "ROSENNA_CLUSTER_BARRIER();" in line]
    assert len(phases) == 14 and len(barriers) == 13
    lines = body.splitlines()
    t, b = clusters.cluster_threads, clusters.cluster_blocks  # cluster s is sample s; its threads from first by step
    assert (f"    const long s = id;  /* {b} blocks per cluster: a constant step */\n"
            f"    const long first = (long)rank * {t} + threadIdx.x, step = {b * t}l;\n" in body)
    assert ("cluster[0].val.clusterDim.x = blocks;" in kernel and "config.gridDim = dim3((unsigned)count * blocks);" in kernel
            and f"config.blockDim = dim3({t});" in kernel)
    for k in barriers:  # each barrier ends a phase loop and precedes the next phase
        assert lines[k - 1] == "    }" and lines[k + 1].startswith("    /* phase ")
    want = reference(unet_path, plan, x)
    assert_close(forwards, want, what="clusters, threads in order")
    assert_close(backwards, want, what="clusters, threads in reverse")


@pytest.mark.skipif(not (shutil.which("nvcc") and shutil.which("hipcc")), reason="nvcc or hipcc not installed")
def test_cluster_code_compiles(tmp_path, clusters):
    """The kernel file with <name>_cluster (a small conv net): nvcc for sm_90 and sm_80 in one call
    (host code -Wall clean; in the sm_90 PTX a cluster barrier between every two phases and no
    load of an intermediate through the non-coherent path, which a barrier does not order; in the
    sm_80 PTX no cluster barrier: the kernel is empty there, never launched), hipcc for gfx90a (no
    cluster code at all)."""
    path = op_models.convnet(tmp_path / "convnet.onnx", height=8, width=8, channels=2)
    plan, _ = gen.generate(path, str(tmp_path), gen.Options(lang="c", embed=True, infer_one=True, tuning=clusters))
    kernel = tmp_path / "convnet_kernel.cu"
    assert "convnet_cluster" in kernel.read_text()
    keep = tmp_path / "keep"
    keep.mkdir()
    for cmd, env in ((["nvcc", "-O1", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
                       "-Xcompiler", "-Wall,-Werror", "-Werror", "all-warnings", "-keep", "-keep-dir", str(keep)], None),
                     (["hipcc", devflags.HIPCC, "--offload-arch=gfx90a", "-x", "hip"], dict(os.environ, HIP_PLATFORM="amd"))):
        proc = subprocess.run(cmd + ["-c", str(kernel), "-o", str(tmp_path / "k.o")], capture_output=True, text=True,
                              env=env)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stderr[-3000:]}"
    ptx = (keep / "convnet_kernel.compute_90.ptx").read_text()
    entry = ptx[ptx.index(".entry _Z15convnet_cluster"):]
    entry = entry[:entry.index("\n}\n")]
    assert entry.count("barrier.cluster.arrive.release;") == len(fusion.schedule(plan).phases) - 1
    assert _nc_loads_of("mov.u64 %rd1, convnet_wsf0;\nadd.s64 %rd2, %rd1, 8;\nld.global.nc.f32 %f1, [%rd2+4];",
                        "convnet_wsf")  # the check sees one
    assert not _nc_loads_of(entry, "convnet_wsf"), "an intermediate read through ld.global.nc"
    assert "barrier.cluster" not in (keep / "convnet_kernel.compute_80.ptx").read_text()


def _nc_loads_of(ptx, prefix):
    """The ld.global.nc instructions of a PTX function whose address derives from a symbol
    starting with ``prefix`` (registers followed through the arithmetic that computes them)."""
    import re

    insts = re.findall(r"^\s*([\w.]+)\s+([^;]*);", ptx, re.M)
    origin = {}
    for _ in range(4):
        for op, args in insts:
            parts = [a.strip(" []") for a in args.split(",")]
            if op.startswith(("ld", "st", "setp", "bra")) or not parts[0].startswith("%"):
                continue
            for a in parts[1:]:
                if a.startswith(prefix) or origin.get(a):
                    origin[parts[0]] = True
    return [args for op, args in insts if op.startswith("ld.global.nc") and origin.get(args.split("[")[1].split("]")[0].split("+")[0])]


def test_run_takes_clusters_first(tmp_path, monkeypatch):
    """<name>_run launches <name>_cluster for up to cluster_samples samples (the tuning's) where it
    runs (asked once per device), before the persistent kernel and the launches, in CUDA code only;
    with the limit 0 the kernel file has no cluster code."""
    import dataclasses

    from rosenna.emit.cuda import field_cluster, whole_field
    from rosenna.strategy import Tuning

    _, plan = gen.build_plan(op_models.convnet(tmp_path / "convnet.onnx", height=8, width=8, channels=2),
                             gen.Options(lang="c", infer_one=True))
    few = Tuning().replace(cluster_min_phases=0)  # the small net gets a clustered kernel too
    assert "cluster" not in whole_field.infer_one(dataclasses.replace(plan, tuning=few.replace(cluster_samples=0)))
    plan = dataclasses.replace(plan, tuning=few.replace(cluster_samples=16))
    run = whole_field.infer_one(plan)
    run = run[run.index("static int convnet_run("):]
    choice = ("#if defined(__CUDACC__) && !defined(__HIPCC__)\n    if (count <= 16 && device < 64) {\n"
              "        int resident = __atomic_load_n(&convnet_clusters[device], __ATOMIC_RELAXED);\n"
              "        if (resident == 0) {\n            resident = convnet_cluster_blocks(device);\n")
    fill = ("        if ((long)count * 16 <= resident)  /* every cluster resident at once */\n"
            "            return convnet_clustered(count, x, y, s, 16);\n    }\n#endif\n")
    assert choice in run and fill in run
    assert run.index(choice) < run.index("convnet_resident[device]")
    plan = dataclasses.replace(plan, tuning=plan.tuning.replace(cluster_per_call=True))  # chosen per call, read at run time
    run = whole_field.infer_one(plan)
    fill = ("            unsigned blocks = 16;\n            while (blocks > 2 && (long)count * blocks > resident)\n"
            "                blocks /= 2;\n            return convnet_clustered(count, x, y, s, blocks);\n        }\n    }\n#endif\n")
    assert fill in run and "step = (long)blocks * 256;" in run and ("    unsigned id, rank, blocks;\n"
        "    asm(\"mov.u32 %0, %%clusterid.x;\" : \"=r\"(id));\n    asm(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));\n"
        "    asm(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(blocks));\n") in run


def test_whole_field_weights_in_constant_memory():
    """A whole-field plan's embedded weights go to __constant__ up to the tuning's whole_constant_limit
    (the poisson_guess U-Net's 19,300 bytes, over the per-point kinds' 6,144)."""
    from rosenna.emit import cuda
    from rosenna.strategy import Tuning

    _, plan = gen.build_plan(os.path.join(os.path.dirname(__file__), "..", "examples", "surrogates", "poisson_guess",
                                          "pguess.onnx"), gen.Options(lang="c", embed=True))
    assert plan.path == "whole" and Tuning().constant_limit < plan.parameters * 4 <= Tuning().whole_constant_limit
    assert cuda.choose(plan).constant


def test_few_phase_plans_have_no_clustered_kernel(tmp_path, unet_path):
    """The tuning's cluster_min_phases: a conv net of 3 phases gets no <name>_cluster (the persistent
    kernel's whole GPU wins there on the H200), a U-Net of 14 one, for up to
    cluster_samples samples, its convs in shared-memory tiles (smem_cluster)."""
    from rosenna import strategy
    from rosenna.emit.cuda.source import kernel_source
    from rosenna.strategy import Tuning

    tuning = Tuning()
    assert 3 < tuning.cluster_min_phases <= 14 and tuning.cluster_samples
    path = op_models.convnet(tmp_path / "convnet.onnx", height=8, width=8, channels=2)
    gen.generate(path, str(tmp_path), gen.Options(lang="c", embed=True, infer_one=True))
    text = (tmp_path / "convnet_kernel.cu").read_text()
    assert "convnet_cluster" not in text and "cluster_ctarank" not in text
    _, plan = gen.build_plan(unet_path, gen.Options(name="unet", infer_one=True))
    assert strategy.decide(plan).field.cluster_samples == tuning.cluster_samples
    unet = kernel_source(plan, "test")
    assert f"if (count <= {tuning.cluster_samples} && device < 64)" in unet
    assert "tile += step / 256)" in unet  # a tiled conv phase inside unet_cluster
