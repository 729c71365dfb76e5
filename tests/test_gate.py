"""rosenna gpu-gate in host-fallback mode (what CI can run), through the CLI in-process."""

import json
import shutil

import pytest

from rosenna.cli import main

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("gfortran")), reason="needs gcc, gfortran")


def test_host_fallback_passes(tmp_path, capsys):
    out = tmp_path / "gate"
    assert main(["gpu-gate", "--host-fallback", "--model", "gemm_small", "--points", "300", "--out", str(out)]) == 0
    report = json.loads((out / "gate-report.json").read_text())
    assert report["pass"] and report["mode"].startswith("host fallback")
    rows = {(r["harness"], r["weights"]) for r in report["rows"]}
    for weights in ("embedded", "file-loaded"):
        assert {("c-omp", weights), ("fortran-omp", weights), ("c-acc", weights), ("fortran-acc", weights),
                ("batch", weights)} <= rows
    assert all(r["status"] == "PASS" and r["max_abs_err"] is not None for r in report["rows"])
    text = (out / "gate-report.md").read_text()
    assert "| harness |" in text and "## Commands" in text and "PASS" in capsys.readouterr().out


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
    assert main(["gpu-gate", "--host-fallback", "--model", str(model), "--points", "3", "--fc", "none",
                 "--out", str(out)]) == 0
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
    from rosenna import gate
    from rosenna.gate import harness

    dirs = gate._cupti_dirs("nvcc")
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

    monkeypatch.setattr(harness, "C_OMP", harness.C_OMP.replace("    qsort(t, reps", "    y[0] += 1.0f;\n    qsort(t, reps"))
    out = tmp_path / "gate"
    assert main(["gpu-gate", "--host-fallback", "--model", "gemm_small", "--points", "50", "--fc", "none",
                 "--out", str(out)]) == 1
    report = json.loads((out / "gate-report.json").read_text())
    bad = [r for r in report["rows"] if r["status"] == "FAIL"]
    assert bad and all(r["harness"] == "c-omp" for r in bad) and "onnxruntime" in bad[0]["worst"]


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

    from rosenna import gate
    from rosenna.emit import whole
    from rosenna.generate import Options, build_plan

    sys.path.insert(0, str(Path(__file__).parent))
    import op_models

    path = tmp_path / "cnn.onnx"
    op_models.convnet(str(path), height=24, width=24)
    _, conv = build_plan(str(path), Options(lang="c"))
    _, mlp = build_plan(model("gemm_big"), Options(lang="c"))
    cuda = gate._defaults(gate.Config(model="x", backend="cuda", points=64))
    omp = gate._defaults(gate.Config(model="x", backend="omp", points=64))
    per_step = gate.LAUNCH_ARG_BLOCKS * gate.STEPS
    assert gate._launch_allowance("c-omp", mlp, cuda) == gate._launch_allowance("fortran-acc", mlp, cuda) == per_step
    assert gate._launch_allowance("batch", mlp, omp) == per_step
    assert gate._launch_allowance("batch-omp", conv, cuda) == per_step * len(whole.regions(conv.body)) * 64
    assert gate._launch_allowance("batch", conv, cuda) == gate._launch_allowance("cuda-user", mlp, cuda) == 0
