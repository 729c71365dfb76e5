"""The gate's batch jobs as rendered (no scheduler): the profile's ``job:`` section and the flags,
the partition job and job array, and the merged partition report from gate reports of many nodes.
tests/test_slurm.py submits the same renderings to a real Slurm."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rosenna.cli import main
from rosenna.errors import UsageError
from rosenna.gate import partition

ROOT = Path(__file__).resolve().parent.parent


def _lines(text):
    return text.split("\nset -uo pipefail")[0].splitlines()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site profile folder on ROSENNA_TOOLCHAIN_PATH; ``site(name, yaml)`` writes a profile."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(folder))

    def write(name, text):
        (folder / f"{name}.yaml").write_text(text)
    return write


@pytest.mark.parametrize("form, line", [("gpus", "#SBATCH --gpus=2"), ("gpus-per-node", "#SBATCH --gpus-per-node=2"),
                                        ("gres", "#SBATCH --gres=gpu:2")])
def test_profile_job_section_sets_the_request(site, capsys, form, line):
    site("h100site", "extends: gcc\nmodules: [gcc/12.2.0]\njob:\n  cpus_per_task: 16\n  gpus: 2\n"
                     f"  gpu_request: {form}\n  partition: gpu-h100\n  account: proj42\n  time: '01:00:00'\n"
                     "  module: rosenna/0.1.0\n")
    assert main(["gpu-gate", "--print-job", "slurm", "--toolchain", "h100site"]) == 0
    text = capsys.readouterr().out
    lines = _lines(text)
    for expected in (line, "#SBATCH --cpus-per-task=16", "#SBATCH --partition=gpu-h100", "#SBATCH --account=proj42",
                     "#SBATCH --time=01:00:00"):
        assert expected in lines, f"{expected!r} missing:\n" + "\n".join(lines)
    assert [ln for ln in lines if ln.startswith("#SBATCH --g")] == [line]
    assert "ROSENNA_MODULE=${ROSENNA_MODULE-rosenna/0.1.0}" in text
    # Flags win over the profile; PBS takes the same keys.
    assert main(["gpu-gate", "--print-job", "pbs", "--toolchain", "h100site", "--cpus-per-task", "4", "--time", "20",
                 "--partition", "short"]) == 0
    pbs = _lines(capsys.readouterr().out)
    assert "#PBS -l select=1:ncpus=4:ngpus=2" in pbs and "#PBS -l walltime=20" in pbs
    assert "#PBS -q short" in pbs and "#PBS -A proj42" in pbs


def test_defaults_fit_a_plain_cluster_and_host_fallback_asks_no_gpu(capsys):
    assert main(["gpu-gate", "--print-job", "slurm", "--host-fallback"]) == 0
    text = capsys.readouterr().out
    lines = _lines(text)
    assert "#SBATCH --cpus-per-task=1" in lines and not [ln for ln in lines if ln.startswith(("#SBATCH --gpus", "#SBATCH --gres"))]
    assert "ROSENNA_GATE_ARGS=${ROSENNA_GATE_ARGS---host-fallback}" in text
    assert "ROSENNA_MODULE=${ROSENNA_MODULE-}" in text
    assert main(["gpu-gate", "--print-job", "pbs", "--host-fallback"]) == 0
    assert "#PBS -l select=1:ncpus=1" in _lines(capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["--cpus-per-task", "0"], "--cpus-per-task 0: give a whole number of at least 1"),
    (["--time", "half an hour"], "--time 'half an hour': not a time limit"),
    (["--nodelist", "n1;rm -rf /"], "not a node list"),
    (["--module", "rosenna 1.0"], "--module 'rosenna 1.0': not a module name"),
    (["--array"], "--array: name the nodes too"),
])
def test_bad_job_values_are_refused_in_one_line(capsys, argv, message):
    assert main(["gpu-gate", "--print-job", "slurm", *argv]) == 2
    out = capsys.readouterr()
    assert out.out == "" and message in out.err and len(out.err.strip().splitlines()) == 1, out.err


def test_bad_job_section_in_a_profile_names_the_key(site, capsys):
    site("badjob", "extends: gcc\njob:\n  cpus: 4\n")
    assert main(["gpu-gate", "--print-job", "slurm", "--toolchain", "badjob"]) == 2
    err = capsys.readouterr().err
    assert "badjob.yaml" in err and "cpus" in err, err


def test_partition_job_for_pbs_is_refused(capsys):
    assert main(["gpu-gate", "--print-job", "pbs", "--nodes", "4"]) == 2
    assert "written for Slurm only" in capsys.readouterr().err


@pytest.mark.parametrize("argv, lines", [
    (["--nodes", "4"], ["#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive", "#SBATCH --gpus=1"]),
    (["--nodelist", "gpu[01-03]", "--gpu-request", "gpus-per-node"],
     ["#SBATCH --nodelist=gpu[01-03]", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=1"]),
    (["--nodelist", "gpu[01-03],gpu07", "--array"],
     ["#SBATCH --array=0-3", "#SBATCH --nodes=1", "#SBATCH --exclusive", "#SBATCH --output=rosenna-gpu-gate-%A_%a.log"]),
])
def test_partition_and_array_jobs_render_and_pass_shellcheck(capsys, tmp_path, argv, lines):
    assert main(["gpu-gate", "--print-job", "slurm", *argv]) == 0
    text = capsys.readouterr().out
    for line in lines:
        assert line in _lines(text), f"{line!r} missing:\n" + "\n".join(_lines(text))
    script = tmp_path / "job.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


def test_hostlists_expand_as_slurm_writes_them():
    assert partition.expand_hostlist("n[1-3,7],gpu-a01") == ["n1", "n2", "n3", "n7", "gpu-a01"]
    assert partition.expand_hostlist("a[08-10]") == ["a08", "a09", "a10"]
    for bad in ("n[3-1]", "n[1-", "n[x]"):
        with pytest.raises(UsageError, match="--nodelist"):
            partition.expand_hostlist(bad)


# ---------------------------------------------------------------------------------------------
# The merged report, from gate reports written as the gate writes them


def _node_report(out, node, times, *, status="PASS", complete=True, gpu="NVIDIA H100 80GB HBM3, 550.54.15"):
    folder = out / "nodes" / node
    folder.mkdir(parents=True)
    rows = [{"harness": h, "weights": "embedded", "status": status if h == "batch" else "PASS", "ns_per_point": t,
             "note": "max abs err 3.1e-01 over 1e-05" if status != "PASS" and h == "batch" else ""}
            for h, t in times.items()]
    (folder / "gate-report.json").write_text(json.dumps({
        "machine": {"host": f"{node}.cluster", "node": node, "gpu": gpu}, "job": {"id": "77"}, "rows": rows,
        "complete": complete, "pass": complete and status == "PASS"}))


def test_merge_flags_slow_failing_unfinished_and_missing_nodes(tmp_path, capsys):
    out = tmp_path / "rosenna-gpu-gate-77"
    _node_report(out, "g1", {"c-omp": 10.0, "batch": 2.0})
    _node_report(out, "g2", {"c-omp": 10.5, "batch": 2.1})
    _node_report(out, "g3", {"c-omp": 14.0, "batch": 2.0})  # 1.40x the median (10.0) on c-omp: SLOW, still passes
    _node_report(out, "g4", {"c-omp": 9.9, "batch": 2.0}, status="FAIL")
    _node_report(out, "g5", {"c-omp": 9.9}, complete=False, gpu=None)
    rc = main(["gpu-gate", "--merge", str(out), "--nodelist", "g[1-6]"])
    printed = capsys.readouterr().out
    assert rc == 1
    report = json.loads((out / "partition-report.json").read_text())
    assert report["schema_version"] == partition.SCHEMA_VERSION
    assert report["failing"] == ["g4", "g5", "g6"] and report["slow"] == ["g3"]
    rows = {r["node"]: r for r in report["rows"]}
    assert rows["g3"]["status"] == "PASS" and rows["g3"]["slow"] == ["c-omp embedded 1.40x median"]
    assert "batch embedded failed: max abs err" in rows["g4"]["why"]
    assert "did not finish" in rows["g5"]["why"] and "no gate report" in rows["g6"]["why"]
    assert rows["g1"]["gpu"] == "NVIDIA H100 80GB HBM3" and rows["g1"]["driver"] == "550.54.15"
    drain = 'scontrol update NodeName=g4,g5,g6 State=DRAIN Reason="rosenna gpu-gate FAIL"'
    assert report["drain"] == drain and printed.splitlines()[-1] == drain
    markdown = (out / "partition-report.md").read_text()
    assert "| g3 | g3.cluster | NVIDIA H100 80GB HBM3 | 550.54.15 | PASS 2.00 ns | PASS 14.00 ns | PASS SLOW" in markdown
    assert "more than 25%" in markdown
    # A wider margin: nothing slow; all nodes good: exit 0, no drain line.
    for node in ("g4", "g5"):
        shutil.rmtree(out / "nodes" / node)
    assert main(["gpu-gate", "--merge", str(out), "--slow-margin", "0.5"]) == 0
    report = json.loads((out / "partition-report.json").read_text())
    assert report["pass"] and report["slow"] == [] and report["drain"] == ""


def test_merge_of_an_array_counts_the_nodes(tmp_path, capsys):
    out = tmp_path / "gate"
    _node_report(out, "g1", {"batch": 2.0})
    assert main(["gpu-gate", "--merge", str(out), "--nodes", "2"]) == 1
    assert "1 node(s) expected wrote no report" in capsys.readouterr().out
    assert main(["gpu-gate", "--merge", str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_cluster_says_in_one_line_why_it_cannot_start(monkeypatch):
    import slurm_cluster

    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 1000)
    assert slurm_cluster.unavailable().startswith("a Slurm cluster needs root")
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda cmd: None if cmd == "slurmd" else f"/usr/bin/{cmd}")
    why = slurm_cluster.unavailable()
    if "Debian or Ubuntu" not in why:
        assert why == ("Slurm is not installed (slurmd not found): apt-get install slurmctld slurmd slurm-client "
                       "munge (.ci/system-deps.sh does)")


def test_install_gate_publish_script_checks_its_arguments(tmp_path):
    script = ROOT / "gate" / "slurm" / "install-gate-publish.sh"
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "INSTALL_JOB GATE_JOB STAGED_MODULEFILE MODULE_ROOT" in usage.stderr
    missing = subprocess.run(["bash", str(script), str(tmp_path / "no.sbatch"), str(tmp_path / "gate.sbatch"),
                              "s/rosenna/1.0.lua", "m"], capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.strip() == f"install-gate-publish: cannot read {tmp_path / 'no.sbatch'}"
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout
