"""rosenna gpu-gate in host-fallback mode (what CI can run), through the CLI in-process."""

import json
import shutil

import numpy as np
import pytest

import devflags
from rosenna.cli import main

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("gfortran")), reason="needs gcc, gfortran")


def test_host_fallback_passes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    out = tmp_path / "gate"
    assert main(["gpu-gate", "--host-fallback", "--toolchain", "gcc", "--model", "gemm_small", "--points", "300",
                 "--out", str(out)]) == 0
    report = json.loads((out / "gate-report.json").read_text())
    assert report["pass"] and report["complete"] and report["mode"].startswith("host fallback")
    rows = {(r["harness"], r["weights"]) for r in report["rows"]}
    for weights in ("embedded", "file-loaded"):
        assert {("c-omp", weights), ("fortran-omp", weights), ("c-acc", weights), ("fortran-acc", weights),
                ("batch", weights)} <= rows
    assert all(r["status"] == "PASS" and r["max_abs_err"] is not None for r in report["rows"])
    # What a site's tools read: the schema version, the profile, the flags used, the job and host.
    assert report["schema_version"] == 2
    assert report["profile"]["name"] == "gcc" and report["profile"]["file"].endswith("gcc.yaml")
    assert report["flags"]["cc"] == "gcc" and report["flags"]["offload"] == "-fopenmp"
    assert report["job"] == {"id": "4242", "from": "SLURM_JOB_ID"} and report["machine"]["host"]
    text = (out / "gate-report.md").read_text()
    assert "| harness |" in text and "## Commands" in text and "job 4242 ($SLURM_JOB_ID)" in text
    table = text.split("## Commands")[0]
    for literal in ("None", "True", "False"):
        assert literal not in table, table
    assert "| c-omp | embedded | PASS | no |" in table and "toolchain profile: gcc (" in table
    # A line per harness as it starts and as it ends, in order, with its time and verdict.
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(next(l for l in lines if l.startswith("c-omp") and "running 300 points" in l))
    assert lines[start + 1].split()[:3] == ["c-omp", "embedded", "PASS"] and lines[start + 1].endswith("ns/point")
    assert lines[-1] == f"PASS: {out}/gate-report.md"


def test_a_float64_model_gates_and_the_report_is_rewritten_after_each_row(tmp_path):
    from rosenna import gate, zoo

    model = tmp_path / "double.onnx"
    zoo.save("gemm_small", str(model), dtype=np.float64)
    out = tmp_path / "gate"
    seen = []

    def progress(line):
        if line.split()[2:3] in (["PASS"], ["FAIL"]):
            partial = json.loads((out / "gate-report.json").read_text())
            seen.append((len(partial["rows"]), partial["complete"]))

    report = gate.run(gate.Config(model=str(model), host_fallback=True, points=40, acc_flags="", out=str(out)),
                      progress)
    assert report["precision"] == "double" and report["pass"], report["rows"]
    assert {r["harness"] for r in report["rows"]} == {"c-omp", "fortran-omp", "batch"}
    assert max(r["max_abs_err"] for r in report["rows"]) < 1e-12  # computed in double, compared in double
    # Each row was on disk, the run marked incomplete, by the time its end was announced.
    assert seen == [(n, False) for n in range(1, len(report["rows"]) + 1)]
    assert "float64 model" in (out / "gate-report.md").read_text()


def test_weights_embedded_builds_and_runs_that_build_alone(tmp_path):
    out = tmp_path / "gate"
    assert main(["gpu-gate", "--host-fallback", "--toolchain", "gcc", "--model", "gemm_small", "--points", "40",
                 "--fc", "none", "--acc-flags=", "--weights", "embedded", "--out", str(out)]) == 0
    report = json.loads((out / "gate-report.json").read_text())
    assert report["pass"] and report["complete"]
    assert {r["weights"] for r in report["rows"]} == {"embedded"} and {r["harness"] for r in report["rows"]} >= {"batch"}
    assert (out / "embedded").is_dir() and not (out / "file-loaded").exists()


def test_weights_must_name_a_build(tmp_path):
    from rosenna import gate
    from rosenna.errors import UsageError

    with pytest.raises(UsageError, match="--weights 'none': choose one of both, embedded, file-loaded"):
        gate.run(gate.Config(host_fallback=True, weights="none", out=str(tmp_path)))


def test_no_visible_device_says_so_first_and_stops(tmp_path, capsys, monkeypatch):
    from rosenna.gate import config
    from rosenna.toolchain import detection

    monkeypatch.setattr(detection, "detect_gpus", lambda notes=None: ())
    out = tmp_path / "gate"
    assert main(["gpu-gate", "--model", "gemm_small", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rosenna gpu-gate: error: no GPU is visible on this node")
    for hint in ("--gpus", "CUDA_VISIBLE_DEVICES", "--host-fallback"):
        assert hint in err
    # A GPU on the node, hidden from this process.
    gpu = detection.Gpu("nvidia", "90", "NVIDIA H200", 1, "nvidia-smi")
    with pytest.raises(config.NoDevice, match=r"told to use none: CUDA_VISIBLE_DEVICES=''"):
        config.check_device({"CUDA_VISIBLE_DEVICES": ""}, gpus=(gpu,))
    config.check_device({"CUDA_VISIBLE_DEVICES": "0"}, gpus=(gpu,))


@pytest.mark.parametrize("toolchain", ["gcc", "auto"])
def test_a_profile_without_offload_flags_is_refused_on_a_device(toolchain, tmp_path, capsys, monkeypatch):
    from rosenna.toolchain import detection

    monkeypatch.setattr(detection, "detect_gpus", lambda notes=None: ())  # auto: the gcc fallback
    assert main(["gpu-gate", "--toolchain", toolchain, "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert "toolchain profile 'gcc' has no OpenMP offload flags" in err and "--host-fallback" in err
    assert ("chosen because" in err) == (toolchain == "auto")
    assert not (tmp_path / "g").exists()


def test_host_fallback_points_default_is_small():
    from rosenna.gate import config

    assert config.resolved(config.Config(host_fallback=True)).points == config.POINTS_HOST <= 20_000
    assert config.resolved(config.Config(backend="omp")).points == config.POINTS_DEVICE


def test_harness_templates_have_one_placeholder_syntax():
    from rosenna.gate import harness

    for name in harness.FILES:
        for real in ("float", "double"):
            text = harness.render(name, n="tiny_net", check=7, real=real)
            assert "@" not in text.replace("cudaMemcpy", ""), (name, text)
            assert "{n}" not in text and "{{" not in text and "tiny_net_infer" in text
    assert "typedef double real;" in harness.render("c-acc", n="m", check=1, real="double")
    with pytest.raises(harness.TemplateError, match="@oops@"):
        harness.fill("x @oops@", {"n": "m"})


def test_a_missing_onnxruntime_is_one_line(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    assert main(["gpu-gate", "--host-fallback", "--model", "gemm_small", "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rosenna gpu-gate: error: this command compares with onnxruntime, which is not installed")
    assert "pip install 'rosenna[verify]'" in err and "spack install rosenna+verify" in err


def test_whole_field_model_gates_infer_one_and_skips_per_point(tmp_path):
    """A whole-field plan (a conv net over a 24x24 field): the batch harness runs <name>_infer_one
    per sample and is checked against onnxruntime; the per-point harnesses do not apply and are
    reported SKIP, not silently dropped."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import op_models

    model = tmp_path / "cnn.onnx"
    op_models.convnet(str(model), height=24, width=24)
    out = tmp_path / "gate"
    # --cflags -O1: the whole-field C built twice (embedded, file-loaded) at the profile's -O3 was
    # most of this test; what it checks (the rows and their comparison) does not depend on it.
    assert main(["gpu-gate", "--host-fallback", "--model", str(model), "--points", "3", "--fc", "none",
                 "--cflags=-O1", "--out", str(out)]) == 0
    report = json.loads((out / "gate-report.json").read_text())
    status = {(r["harness"], r["weights"]): r["status"] for r in report["rows"]}
    for weights in ("embedded", "file-loaded"):
        assert status[("batch", weights)] == "PASS"
        assert status[("c-omp", weights)] == status[("c-acc", weights)] == "SKIP"
    assert report["pass"]


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_transfer_counter_builds_where_cupti_is(tmp_path):
    """The one transfer counter (rosenna/data/count_transfers.cu) serves the gate and
    examples/run_gpu.sh; it builds as the gate builds it wherever CUDA ships CUPTI. It runs only
    with a GPU (the gate's planted-transfer check)."""
    from rosenna.gate import build, harness

    dirs = build.cupti_dirs("nvcc")
    if not dirs:
        pytest.skip("no CUPTI next to nvcc")
    src = tmp_path / "count_transfers.cu"
    src.write_text(harness.COUNTER)
    lib = tmp_path / "libcount_transfers.so"
    import subprocess

    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-I", dirs[0], str(src), "-L", dirs[1], "-lcupti",
                    "-o", str(lib)], check=True)
    symbols = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True, check=True).stdout
    assert " T InitializeInjection" in symbols and "ROSENNA_TRANSFERS" in harness.COUNTER


def test_wrong_code_fails(tmp_path, monkeypatch):
    """A harness whose output is off is reported FAIL with the worst point, and the exit status is 1."""
    from rosenna.gate import harness

    original = harness.template

    def off_by_one(name):
        text = original(name)
        return text.replace("    qsort(t, reps", "    y[0] += 1.0f;\n    qsort(t, reps") if name == "per_point.c" else text

    monkeypatch.setattr(harness, "template", off_by_one)
    out = tmp_path / "gate"
    assert main(["gpu-gate", "--host-fallback", "--model", "gemm_small", "--points", "50", "--fc", "none",
                 "--out", str(out)]) == 1
    report = json.loads((out / "gate-report.json").read_text())
    bad = [r for r in report["rows"] if r["status"] == "FAIL"]
    # per_point.c is the C harness of both OpenMP and OpenACC: both see the wrong value.
    assert bad and {r["harness"] for r in bad} == {"c-omp", "c-acc"} and "onnxruntime" in bad[0]["worst"]


def test_print_job(capsys):
    assert main(["gpu-gate", "--print-job", "slurm"]) == 0
    assert "#SBATCH" in capsys.readouterr().out


def test_bad_model_is_a_usage_error(tmp_path, capsys):
    assert main(["gpu-gate", "--host-fallback", "--model", str(tmp_path / "nope.onnx"), "--out", str(tmp_path)]) == 2
    assert "neither a built-in model" in capsys.readouterr().err


def test_launch_argument_allowance_counts_region_launches(tmp_path, model):
    """The small host-to-device copies a harness may show: one or two argument blocks per OpenMP or
    OpenACC region launch. A per-point loop launches one region per step; the OpenMP batch of a
    whole-field plan launches every region of <name>_infer_one for every sample; CUDA launches copy
    nothing. A wrong allowance fails a correct row (the first H200 conv-net gate) or hides a copy."""
    import sys
    from pathlib import Path

    from rosenna import parallel
    from rosenna.gate import config
    from rosenna.gate import runner as gate
    from rosenna.generate import Options, build_plan

    sys.path.insert(0, str(Path(__file__).parent))
    import op_models

    path = tmp_path / "cnn.onnx"
    op_models.convnet(str(path), height=24, width=24)
    _, conv = build_plan(str(path), Options(lang="c"))
    _, mlp = build_plan(model("gemm_big"), Options(lang="c"))
    cuda = config.resolved(config.Config(model="x", backend="cuda", points=64))
    omp = config.resolved(config.Config(model="x", backend="omp", points=64))
    per_step = gate.LAUNCH_ARG_BLOCKS * gate.STEPS
    assert gate.launch_allowance("c-omp", mlp, cuda) == gate.launch_allowance("fortran-acc", mlp, cuda) == per_step
    assert gate.launch_allowance("batch", mlp, omp) == per_step
    assert gate.launch_allowance("batch-omp", conv, cuda) == per_step * len(parallel.regions(conv.body)) * 64
    assert gate.launch_allowance("batch", conv, cuda) == gate.launch_allowance("cuda-user", mlp, cuda) == 0


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_cuda_harnesses_compile_for_float_and_double(tmp_path):
    """The device harnesses run only on the GPU machine; here nvcc at least compiles them against a
    generated model, in the model's precision (float: the batch harness and the warp routine's;
    double: the user kernel)."""
    import subprocess

    from rosenna import zoo
    from rosenna.gate import harness
    from rosenna.generate import Options, generate

    for dtype, name, extra in ((np.float32, "batch-cuda", []), (np.float64, "cuda-user", ["-rdc=true"]),
                               (np.float32, "cuda-warp", ["-rdc=true"])):
        real = "double" if dtype == np.float64 else "float"
        stem = f"{real}_{name}".replace("-", "_")
        model = zoo.save("gemm_small", str(tmp_path / f"{stem}.onnx"), dtype=dtype)
        out = tmp_path / stem
        generate(model, str(out), Options(lang="c"))
        src = tmp_path / f"{stem}_{harness.FILES[name][1]}"
        src.write_text(harness.render(name, n=stem, check=8, real=real))
        result = subprocess.run(["nvcc", *devflags.NVCC.split(), "-c", *extra, "-I", str(out), str(src), "-o",
                                 str(tmp_path / f"{stem}.o")],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
