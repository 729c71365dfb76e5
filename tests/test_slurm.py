"""The gate's batch jobs under a real Slurm: three nodes on this machine (tests/slurm_cluster.py).

Each test submits what ``rosenna gpu-gate --print-job slurm`` prints, unedited, with the gate's
arguments and environment passed through ``sbatch --export`` only, exactly as an admin would; the
gate itself runs for real in host-fallback mode on its cheapest harness set (the small model, C
harnesses, embedded weights). One cluster serves the whole test run; each test starts from an empty queue,
every node idle and no per-node environment.
"""

import json
import os
import shlex
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import slurm_cluster
from slurm_cluster import NODES, PARTITION, SlurmCluster

ROOT = Path(__file__).resolve().parent.parent
# One worker runs them all, on one cluster (under pytest -n, a cluster per worker would only compete).
pytestmark = pytest.mark.xdist_group("test_slurm.cluster")
GATE_ARGS = "--host-fallback --model gemm_small --points 200 --fc none --weights embedded"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    why = slurm_cluster.unavailable()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    pids = []
    try:
        cluster.start()
        pids = list(cluster.pids().values())
        yield cluster
    finally:
        cluster.stop()
    left = slurm_cluster.leftover_processes(pids) + slurm_cluster.stray_steps(cluster.conf)
    assert not left, f"Slurm processes left running after the cluster stopped: {left}"


@pytest.fixture
def cluster(slurm, tmp_path, monkeypatch, capsys):
    """The test run's cluster, reset, and a submit folder with `rosenna` (this checkout) on PATH."""
    slurm.reset()
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.chdir(tmp_path)
    for var in ("ROSENNA_TOOLCHAIN_PATH", "SLURMD_NODENAME"):
        monkeypatch.delenv(var, raising=False)
    slurm.capsys = capsys
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _exe(bin_dir / "rosenna", f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m rosenna \"$@\"\n")
    slurm.submit_dir = tmp_path
    slurm.user_env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
                      "ROSENNA_NO_FSYNC": "1"}
    for var in ("ROSENNA_TOOLCHAIN_PATH", "ROSENNA_MODULE", "ROSENNA_TOOLCHAIN", "ROSENNA_GATE_ARGS",
                "ROSENNA_GATE_OUT", "SCRATCH"):
        slurm.env.pop(var, None)
    return slurm


def _exe(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _rosenna(cluster, *args):
    """`rosenna ARGS` as the admin types it on the login node, in this process: returncode, stdout, stderr."""
    from rosenna.cli import main

    cluster.capsys.readouterr()
    rc = main(list(args))
    out, err = cluster.capsys.readouterr()
    return SimpleNamespace(returncode=rc, stdout=out, stderr=err)


def _print_job(cluster, *args, name="job.sbatch"):
    printed = _rosenna(cluster, "gpu-gate", "--print-job", "slurm", *args)
    assert printed.returncode == 0, printed.stderr
    path = cluster.submit_dir / name
    path.write_text(printed.stdout)
    return path


def _sbatch(cluster, script, *options, **exports):
    """sbatch ``script`` with ``exports`` through --export=ALL,...; the job id."""
    export = ",".join(["ALL"] + [f"{k}={v}" for k, v in exports.items()])
    result = cluster.run("sbatch", "--parsable", f"--export={export}", *options, str(script),
                         env=cluster.user_env, cwd=cluster.submit_dir)
    return result.stdout.strip().split(";")[0]


def _broken_compiler_dir(cluster):
    """A folder whose `gcc` fails, for one node's PATH."""
    broken = cluster.submit_dir / "broken-bin"
    broken.mkdir(exist_ok=True)
    _exe(broken / "gcc", "#!/bin/sh\necho 'gcc: internal compiler error: planted on this node' >&2\nexit 4\n")
    return broken


def _log(cluster, job_id, pattern="rosenna-gpu-gate-{}.log"):
    path = cluster.submit_dir / pattern.format(job_id)
    return path.read_text() if path.exists() else f"(no log {path})"


# ---------------------------------------------------------------------------------------------
# Item 1: the cluster itself


def test_cluster_runs_a_job_on_every_node(cluster):
    job = cluster.run("sbatch", "--parsable", "-N", "3", "-o", str(cluster.submit_dir / "hosts-%j.txt"),
                      "--wrap", "srun printenv SLURMD_NODENAME", cwd=cluster.submit_dir).stdout.strip()
    (record,) = cluster.wait(job, timeout=30)
    assert record["JobState"] == "COMPLETED", record
    assert sorted((cluster.submit_dir / f"hosts-{job}.txt").read_text().split()) == list(NODES)


# ---------------------------------------------------------------------------------------------
# Item 2: the printed job runs as printed


def test_printed_job_passes_as_printed(cluster):
    script = _print_job(cluster, "--toolchain", "gcc", "--host-fallback", "--partition", PARTITION)
    text = script.read_text()
    assert "#SBATCH --cpus-per-task=1" in text and "--gpus" not in text.split("set -uo")[0].replace(
        "--gpus, --gpu-request", ""), text
    out = cluster.submit_dir / "gate-out"
    job = _sbatch(cluster, script, ROSENNA_GATE_ARGS=GATE_ARGS, ROSENNA_GATE_OUT=out)
    (record,) = cluster.wait(job)
    log = _log(cluster, job)
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", f"{record}\n{log}"
    assert "no module loaded" in log and "rosenna: " in log, log
    report = json.loads((out / f"rosenna-gpu-gate-{job}" / "gate-report.json").read_text())
    assert report["pass"] and report["job"] == {"id": job, "from": "SLURM_JOB_ID"}, report
    assert report["machine"]["node"] in NODES
    assert {r["status"] for r in report["rows"]} == {"PASS"} and len(report["rows"]) >= 2
    assert f"PASS: report in {out}/rosenna-gpu-gate-{job}/gate-report.md" in log


def test_check_job_says_when_the_partition_can_never_run_it(cluster):
    # The GPU form on a cluster with no GPU gres: refused, and said so in one line.
    gpu = _rosenna(cluster, "gpu-gate", "--check-job", "--toolchain", "gcc", "--partition", PARTITION)
    assert gpu.returncode == 1, gpu.stdout + gpu.stderr
    assert len(gpu.stdout.strip().splitlines()) == 1, gpu.stdout
    assert f"partition '{PARTITION}' can never run the gate job as asked" in gpu.stdout
    assert "--gpus=1" in gpu.stdout and "gres" in gpu.stdout.lower(), gpu.stdout
    # More CPUs than any node has (each has 2): the job would stay PENDING forever.
    wide = _rosenna(cluster, "gpu-gate", "--check-job", "--host-fallback", "--cpus-per-task", "8",
                    "--partition", PARTITION)
    assert wide.returncode == 1 and "--cpus-per-task=8" in wide.stdout and "can never run" in wide.stdout, wide.stdout
    fits = _rosenna(cluster, "gpu-gate", "--check-job", "--host-fallback", "--cpus-per-task", "2",
                    "--partition", PARTITION)
    assert fits.returncode == 0 and fits.stdout.startswith("OK: "), fits.stdout + fits.stderr
    nowhere = _rosenna(cluster, "gpu-gate", "--check-job", "--host-fallback", "--partition", "nosuch")
    assert nowhere.returncode == 1 and "partition 'nosuch' can never run" in nowhere.stdout, nowhere.stdout


# ---------------------------------------------------------------------------------------------
# Item 3: a whole partition in one job, and as a job array


def _partition_report(out, job):
    path = out / f"rosenna-gpu-gate-{job}" / "partition-report.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_partition_job_names_the_failing_node(cluster):
    cluster.set_node_env("n2", PATH_PREPEND=_broken_compiler_dir(cluster))
    script = _print_job(cluster, "--toolchain", "gcc", "--host-fallback", "--nodes", "3", "--partition", PARTITION)
    assert "#SBATCH --nodes=3" in script.read_text() and "#SBATCH --ntasks-per-node=1" in script.read_text()
    out = cluster.submit_dir / "gate-out"
    job = _sbatch(cluster, script, ROSENNA_GATE_ARGS=GATE_ARGS, ROSENNA_GATE_OUT=out)
    (record,) = cluster.wait(job)
    log = _log(cluster, job)
    assert record["JobState"] == "FAILED" and record["ExitCode"] == "1:0", f"{record}\n{log}"
    report = _partition_report(out, job)
    assert report is not None, log
    assert report["schema_version"] == 1
    status = {r["node"]: r["status"] for r in report["rows"]}
    assert status == {"n1": "PASS", "n2": "FAIL", "n3": "PASS"}, f"{status}\n{log}"
    assert report["failing"] == ["n2"] and "internal compiler error" not in report["drain"]
    n2 = next(r for r in report["rows"] if r["node"] == "n2")
    assert "failed" in n2["why"], n2
    for row in report["rows"]:  # each node its own build and report folder
        assert (out / f"rosenna-gpu-gate-{job}" / "nodes" / row["node"] / "gate-report.md").is_file()
    markdown = (out / f"rosenna-gpu-gate-{job}" / "partition-report.md").read_text()
    assert "| n2 |" in markdown and "FAIL" in markdown and report["drain"] in markdown
    assert f"failing nodes: n2; drain them with:\n{report['drain']}" in log, log
    # The line drains the node as pasted.
    cluster.run(*shlex.split(report["drain"]))
    state = cluster.run("sinfo", "-h", "-n", "n2", "-o", "%t").stdout.strip()
    assert state.startswith("drain"), state


def test_job_array_gates_one_node_per_task(cluster):
    cluster.set_node_env("n3", PATH_PREPEND=_broken_compiler_dir(cluster))
    script = _print_job(cluster, "--toolchain", "gcc", "--host-fallback", "--nodelist", "n[1-3]", "--array",
                        "--partition", PARTITION)
    assert "#SBATCH --array=0-2" in script.read_text()
    out = cluster.submit_dir / "gate-out"
    job = _sbatch(cluster, script, ROSENNA_GATE_ARGS=GATE_ARGS, ROSENNA_GATE_OUT=out)
    tasks = cluster.wait(job)
    states = sorted(t["JobState"] for t in tasks)
    logs = "\n".join(_log(cluster, f"{job}_{i}", "rosenna-gpu-gate-{}.log") for i in range(3))
    assert states == ["COMPLETED", "COMPLETED", "FAILED"], f"{states}\n{logs}"
    assert sorted(t["NodeList"] for t in tasks) == list(NODES), tasks
    merge = ""
    deadline = time.monotonic() + 60
    while not merge and time.monotonic() < deadline:
        merge = cluster.run("squeue", "-h", "-t", "all", "-n", "rosenna-gpu-gate-merge", "-o", "%i").stdout.strip()
        time.sleep(0.2)
    assert merge, f"no merge job submitted\n{logs}"
    (record,) = cluster.wait(merge)
    merge_log = _log(cluster, merge, "rosenna-gpu-gate-merge-{}.log")
    assert record["ExitCode"] == "1:0", f"{record}\n{merge_log}"
    report = _partition_report(out, job)
    assert report["failing"] == ["n3"] and report["drain"].startswith("scontrol update NodeName=n3 State=DRAIN")
    assert "failing nodes: n3" in merge_log


# ---------------------------------------------------------------------------------------------
# Item 4: install, gate, then publish the module


def _pipeline(cluster, install_body, gate_args):
    """Run gate/slurm/install-gate-publish.sh; the three job ids and the folders involved."""
    staged = cluster.submit_dir / "staged" / "rosenna" / "1.0.lua"
    visible = cluster.submit_dir / "modulefiles"
    install = _exe(cluster.submit_dir / "install.sbatch",
                   "#!/bin/bash\n#SBATCH --job-name=install-rosenna\n#SBATCH --output=install-%j.log\n"
                   f"set -e\nmkdir -p {staged.parent}\n{install_body}\n"
                   f"printf 'prepend_path(\"PATH\", \"/opt/rosenna/1.0/bin\")\\n' > {staged}\n")
    gate = _print_job(cluster, "--toolchain", "gcc", "--host-fallback", "--partition", PARTITION)
    out = cluster.submit_dir / "gate-out"
    env = dict(cluster.user_env, ROSENNA_GATE_ARGS=gate_args, ROSENNA_GATE_OUT=str(out))
    result = cluster.run("bash", str(ROOT / "gate" / "slurm" / "install-gate-publish.sh"), str(install), str(gate),
                         str(staged), str(visible), env=env, cwd=cluster.submit_dir)
    ids = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
    return ids, staged, visible / "rosenna" / "1.0.lua", out


def test_pipeline_publishes_the_module_only_after_a_pass(cluster):
    ids, staged, published, out = _pipeline(cluster, "true", GATE_ARGS)
    (publish,) = cluster.wait(ids["publish"])
    assert publish["JobState"] == "COMPLETED", (publish, _log(cluster, ids["gate"]))
    assert published.read_text() == staged.read_text()
    assert json.loads((out / f"rosenna-gpu-gate-{ids['gate']}" / "gate-report.json").read_text())["pass"]


def test_pipeline_holds_the_module_back_when_the_gate_fails(cluster):
    broken = _broken_compiler_dir(cluster) / "gcc"
    ids, staged, published, out = _pipeline(cluster, "true", f"{GATE_ARGS} --cc {broken}")
    (gate,) = cluster.wait(ids["gate"])
    assert gate["JobState"] == "FAILED", gate
    (publish,) = cluster.wait(ids["publish"], states=("PENDING",))
    deadline = time.monotonic() + 20
    while publish.get("Reason") != "DependencyNeverSatisfied" and time.monotonic() < deadline:
        time.sleep(0.2)
        (publish,) = cluster.wait(ids["publish"], states=("PENDING",))
    assert publish["Reason"] == "DependencyNeverSatisfied", publish
    assert staged.exists() and not published.exists()
    report = (out / f"rosenna-gpu-gate-{ids['gate']}" / "gate-report.md").read_text()
    assert "FAIL" in report and "planted on this node" in report, report


def test_pipeline_never_gates_a_failed_install(cluster):
    ids, staged, published, out = _pipeline(cluster, "echo 'make: *** [install] Error 2' >&2; exit 2", GATE_ARGS)
    (install,) = cluster.wait(ids["install"])
    assert install["JobState"] == "FAILED"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        gate, publish = cluster.job(ids["gate"]), cluster.job(ids["publish"])
        if gate.get("Reason") == "DependencyNeverSatisfied":
            break
        time.sleep(0.2)
    assert gate["JobState"] == "PENDING" and gate["Reason"] == "DependencyNeverSatisfied", gate
    assert publish["JobState"] == "PENDING", publish
    assert not published.exists() and not out.exists()
