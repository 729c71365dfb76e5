"""The gpu-gate batch jobs: rosenna/gate/jobs.py renders them, gate/ holds the generic rendering, and the
scripts run end to end under stub schedulers (``sbatch``/``srun``, ``qsub``) written into a temporary
PATH that execute the job at once with the scheduler's variables set.

The job runs the real ``rosenna`` (this checkout, through a shim on PATH). Where ``rosenna
gpu-gate`` is not in this checkout yet, the shim answers that one command with a stand-in that
keeps its contract (writes gate-report.md and gate-report.json, exits non-zero on FAIL, runs the
``--cc`` compiler it is given); everything else is the real command.
"""

import json
import os
import shlex
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from rosenna.cli import SUBCOMMANDS
from rosenna.errors import RosennaError
from rosenna.gate.jobs import GATE_FILES, SCHEDULERS, render_job

ROOT = Path(__file__).resolve().parent.parent
HAVE_GPU_GATE = "rosenna.commands.gpu_gate" in SUBCOMMANDS
# Small enough for CI's two cores; the real gate takes --points, the stand-in ignores it.
# The gate's own tests (test_gate.py) cover what it checks; here it only has to run: the small model,
# C harnesses only.
GATE_ARGS = "--host-fallback --model gemm_small --points 200 --fc none"


def _write_exe(path, text):
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# ---------------------------------------------------------------------------------------------
# Rendering


@pytest.mark.parametrize("kind", sorted(GATE_FILES))
def test_gate_files_are_the_generic_rendering(kind):
    path = ROOT / "gate" / GATE_FILES[kind]
    assert path.read_text() == render_job(kind), (
        f"{path} differs from rosenna.gate.jobs.render_job({kind!r}); regenerate with "
        "`python -m rosenna.gate.jobs gate`"
    )
    assert os.access(path, os.X_OK), f"{path} is not executable"


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
@pytest.mark.parametrize("modules", [(), ("nvhpc/24.7", "cuda/12.4")])
def test_rendered_scripts_parse_and_pin_the_profile(kind, modules, tmp_path):
    profile = SimpleNamespace(name="nvhpc", modules=modules)
    text = render_job(kind, profile)
    script = tmp_path / "job.sh"
    script.write_text(text)
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert "ROSENNA_TOOLCHAIN=${ROSENNA_TOOLCHAIN:-nvhpc}" in text
    assert f'ROSENNA_PROFILE_MODULES=${{ROSENNA_PROFILE_MODULES-"{" ".join(modules)}"}}' in text
    assert "for profile 'nvhpc'" in text
    # The generic script asks rosenna for the modules instead.
    generic = render_job(kind)
    assert "ROSENNA_TOOLCHAIN=${ROSENNA_TOOLCHAIN:-auto}" in generic
    assert "ROSENNA_PROFILE_MODULES=${ROSENNA_PROFILE_MODULES-" not in generic


@pytest.mark.parametrize(
    "kind, lines",
    [
        ("slurm", ["#SBATCH --gpus=1", "#SBATCH --time=00:30:00", "#SBATCH --nodes=1"]),
        ("pbs", ["#PBS -l select=1:ncpus=1:ngpus=1", "#PBS -l walltime=00:30:00"]),
    ],
)
def test_resource_lines_are_plain_directives(kind, lines):
    text = render_job(kind).splitlines()
    for line in lines:
        assert line in text, f"{line!r} missing from the {kind} script"
    # A directive line carries no trailing comment: not every scheduler version strips one.
    prefix = "#SBATCH" if kind == "slurm" else "#PBS"
    for line in text:
        if line.startswith(prefix):
            assert "#" not in line[len(prefix):], f"comment on a directive line: {line!r}"


def test_unknown_scheduler_is_refused():
    with pytest.raises(RosennaError, match="unknown scheduler 'lsf'.*pbs, slurm"):
        render_job("lsf", None)


# ---------------------------------------------------------------------------------------------
# Running the scripts under stub schedulers

STUB_SBATCH = r"""
#!/bin/bash
# Stub sbatch: runs the job at once in the foreground, as Slurm would start it on a node, and
# returns the job's exit status (like `sbatch --wait`). Options on the command line are ignored.
set -u
while [ $# -gt 1 ]; do shift; done
script=$1
export SLURM_JOB_ID=${STUB_JOB_ID:-4242} SLURM_JOBID=${STUB_JOB_ID:-4242}
export SLURM_SUBMIT_DIR=$PWD SLURM_JOB_NUM_NODES=1 SLURM_NTASKS=1 SLURM_NODELIST=$(hostname)
export SLURM_JOB_NAME=$(sed -n 's/^#SBATCH --job-name=//p' "$script")
export SLURM_CPUS_PER_TASK=$(sed -n 's/^#SBATCH --cpus-per-task=//p' "$script")
export SLURM_GPUS=$(sed -n 's/^#SBATCH --gpus=//p' "$script")
out=$(sed -n 's/^#SBATCH --output=//p' "$script")
out=${out//%j/$SLURM_JOB_ID}
echo "Submitted batch job $SLURM_JOB_ID"
bash "$script" > "${out:-slurm-$SLURM_JOB_ID.out}" 2>&1
"""

STUB_SRUN = r"""
#!/bin/bash
# Stub srun: drops its own options and runs the step in place.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
echo "srun-stub: step 0 of job ${SLURM_JOB_ID:?srun outside a job}: $*" >&2
export SLURM_STEP_ID=0
exec "$@"
"""

STUB_QSUB = r"""
#!/bin/bash
# Stub qsub: runs the job at once and returns its exit status (like `qsub -W block=true`).
set -u
while [ $# -gt 1 ]; do shift; done
script=$1
export PBS_JOBID=${STUB_JOB_ID:-4242}.stub PBS_O_WORKDIR=$PWD PBS_JOBNAME=$(sed -n 's/^#PBS -N //p' "$script")
echo "$PBS_JOBID"
bash "$script" > "$PBS_JOBNAME.o${PBS_JOBID%%.*}" 2>&1
"""

# `module` as Lmod defines it, a shell function the job inherits: logs loads, refuses names
# starting with "missing/".
MODULE_FUNCTION = (
    '() { [ "$1" = load ] || return 0; shift; local m; for m in "$@"; do '
    'case "$m" in missing/*) echo "Lmod has detected the following error: '
    'The following module(s) are unknown: $m" >&2; return 1;; esac; '
    'echo "$m" >> "$STUB_MODULE_LOG"; done; }'
)

GATE_STAND_IN = r"""
# Stand-in for `rosenna gpu-gate` until it is in this checkout: its contract, nothing more.
import json, pathlib, subprocess, sys
args = sys.argv[1:]
out = pathlib.Path(args[args.index("--out") + 1])
failures = []
if "--cc" in args:
    cc = args[args.index("--cc") + 1]
    if subprocess.run([cc, "--version"], capture_output=True).returncode != 0:
        failures.append(f"compiler {cc} does not run")
verdict = "FAIL" if failures else "PASS"
out.mkdir(parents=True, exist_ok=True)
(out / "gate-report.md").write_text(f"# gpu-gate (stand-in)\n\n{verdict}\n" + "".join(f"- {f}\n" for f in failures))
(out / "gate-report.json").write_text(json.dumps({"result": verdict, "failures": failures}))
print(verdict)
sys.exit(1 if failures else 0)
"""


@pytest.fixture
def batch_env(tmp_path):
    """A PATH with the stub schedulers and a `rosenna` shim, and the environment of a job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _write_exe(bin_dir / "sbatch", STUB_SBATCH)
    _write_exe(bin_dir / "srun", STUB_SRUN)
    _write_exe(bin_dir / "qsub", STUB_QSUB)
    stand_in = tmp_path / "gate_stand_in.py"
    stand_in.write_text(GATE_STAND_IN)
    python = shlex.quote(sys.executable)
    gate_case = "" if HAVE_GPU_GATE else (
        f'if [ "${{1:-}}" = gpu-gate ]; then shift; exec {python} {shlex.quote(str(stand_in))} "$@"; fi\n'
    )
    _write_exe(
        bin_dir / "rosenna",
        f"#!/bin/bash\n{gate_case}exec {python} -m rosenna \"$@\"\n",
    )
    site = tmp_path / "site-toolchains"
    site.mkdir()
    (site / "sitegcc.yaml").write_text(
        "extends: gcc\ndescription: a site profile that names modules\n"
        "modules: [gcc/12.2.0, openmpi/4.1]\n"
    )
    # Kept apart: on the search path, `auto` would choose it over gcc.
    broken = tmp_path / "broken-toolchains"
    broken.mkdir()
    (broken / "brokenmods.yaml").write_text(
        "extends: gcc\ndescription: a profile naming a module the site lacks\n"
        "modules: [missing/compiler]\n"
    )
    submit = tmp_path / "submit"
    submit.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        "SCRATCH": str(scratch),
        "ROSENNA_TOOLCHAIN_PATH": str(site),
        "ROSENNA_PYTHON": sys.executable,
        "ROSENNA_MODULE": "rosenna/0.1.0",
        "ROSENNA_GATE_ARGS": GATE_ARGS,
        "STUB_MODULE_LOG": str(tmp_path / "modules.log"),
        "BASH_FUNC_module%%": MODULE_FUNCTION,
    }
    return SimpleNamespace(tmp=tmp_path, env=env, submit=submit, scratch=scratch, broken=broken)


def _submit(batch_env, kind, **overrides):
    env = dict(batch_env.env, **overrides)
    submit = "sbatch" if kind == "slurm" else "qsub"
    script = ROOT / "gate" / GATE_FILES[kind]
    result = subprocess.run(
        [submit, str(script)], cwd=batch_env.submit, env=env,
        capture_output=True, text=True, timeout=900,
    )
    log_name = "rosenna-gpu-gate-4242.log" if kind == "slurm" else "rosenna-gpu-gate.o4242"
    log_path = batch_env.submit / log_name
    log = log_path.read_text() if log_path.exists() else f"(no job log at {log_path})"
    out_dir = batch_env.scratch / ("rosenna-gpu-gate-4242" + ("" if kind == "slurm" else ".stub"))
    modules_log = Path(env["STUB_MODULE_LOG"])
    modules = modules_log.read_text().split() if modules_log.exists() else []
    return SimpleNamespace(rc=result.returncode, log=log, out_dir=out_dir, modules=modules,
                           submit_output=result.stdout + result.stderr)


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_job_passes_in_host_fallback_mode(batch_env, kind):
    # One broken profile in the shared folder must not stop the job (it stopped at `detect`).
    site = Path(batch_env.env["ROSENNA_TOOLCHAIN_PATH"].split(os.pathsep)[0])
    (site / "zz-broken.yaml").write_text("flags: [\n")
    job = _submit(batch_env, kind, ROSENNA_TOOLCHAIN="sitegcc")
    assert job.rc == 0, f"the job failed ({job.rc}):\n{job.log}\n{job.submit_output}"
    # Modules: rosenna's own first, then the profile's, in its order.
    assert job.modules == ["rosenna/0.1.0", "gcc/12.2.0", "openmpi/4.1"], job.log
    assert "== rosenna toolchain detect" in job.log and "profile:" in job.log, job.log
    report = job.out_dir / "gate-report.md"
    assert report.is_file(), f"no report in {job.out_dir}:\n{job.log}"
    assert "PASS" in report.read_text()
    assert json.loads((job.out_dir / "gate-report.json").read_text()), "empty gate-report.json"
    assert f"PASS: report in {report}" in job.log
    assert "zz-broken.yaml:2: not valid YAML" in job.log and "profile 'zz-broken' skipped" in job.log
    if kind == "slurm":
        assert "srun-stub: step 0 of job 4242: rosenna gpu-gate --toolchain sitegcc" in job.log


def test_slurm_job_resolves_auto_and_needs_no_module_tool(batch_env):
    # rosenna already on PATH, profile `auto` (gcc here: no GPU), which names no module.
    env = dict(batch_env.env)
    del env["BASH_FUNC_module%%"]
    del env["ROSENNA_TOOLCHAIN_PATH"]  # the site profiles here would win `auto`
    batch_env.env = env
    job = _submit(batch_env, "slurm", ROSENNA_MODULE="", ROSENNA_TOOLCHAIN="auto")
    assert job.rc == 0, job.log
    assert job.modules == []
    assert "--toolchain auto" in job.log
    assert (job.out_dir / "gate-report.md").is_file()


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_planted_gate_failure_fails_the_job(batch_env, kind):
    broken_cc = _write_exe(batch_env.tmp / "broken-cc", "#!/bin/sh\necho broken >&2\nexit 1\n")
    job = _submit(batch_env, kind, ROSENNA_TOOLCHAIN="sitegcc",
                  ROSENNA_GATE_ARGS=f"{GATE_ARGS} --cc {broken_cc}")
    assert job.rc != 0, f"a broken compiler passed the gate:\n{job.log}"
    assert "FAIL: rosenna gpu-gate exited" in job.log, job.log
    report = job.out_dir / "gate-report.md"
    assert report.is_file() and "FAIL" in report.read_text(), job.log


def test_missing_profile_module_fails_the_job_before_the_gate(batch_env):
    path = f"{batch_env.broken}{os.pathsep}{batch_env.env['ROSENNA_TOOLCHAIN_PATH']}"
    job = _submit(batch_env, "slurm", ROSENNA_TOOLCHAIN="brokenmods", ROSENNA_TOOLCHAIN_PATH=path)
    assert job.rc != 0, job.log
    assert "module load missing/compiler failed" in job.log, job.log
    assert not job.out_dir.exists(), "the gate ran although a module failed to load"


def test_unknown_profile_fails_the_job(batch_env):
    job = _submit(batch_env, "slurm", ROSENNA_TOOLCHAIN="no-such-profile")
    assert job.rc != 0, job.log
    assert "rosenna toolchain show no-such-profile failed" in job.log, job.log


def test_job_outside_slurm_is_refused(batch_env):
    result = subprocess.run(
        ["bash", str(ROOT / "gate" / GATE_FILES["slurm"])], cwd=batch_env.submit,
        env=batch_env.env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "not running under Slurm" in result.stderr



def test_renders_for_a_resolved_toolchain_profile(tmp_path, monkeypatch):
    # What `rosenna gpu-gate --print-job` hands over: a Profile from rosenna.toolchain.
    from rosenna.toolchain import resolve

    site = tmp_path / "profiles"
    site.mkdir()
    (site / "sitegcc.yaml").write_text("extends: gcc\nmodules: [gcc/12.2.0]\n")
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(site))
    profile = resolve("sitegcc")
    text = render_job("slurm", profile)
    assert 'ROSENNA_PROFILE_MODULES=${ROSENNA_PROFILE_MODULES-"gcc/12.2.0"}' in text
    assert "ROSENNA_TOOLCHAIN=${ROSENNA_TOOLCHAIN:-sitegcc}" in text


def _shellcheck():
    """shellcheck, installing it with .ci/deps-packaging.sh where this is root."""
    import shutil

    if not shutil.which("shellcheck") and os.geteuid() == 0:
        subprocess.run(["bash", str(ROOT / ".ci" / "deps-packaging.sh")], capture_output=True,
                       timeout=600)
    return shutil.which("shellcheck")


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
@pytest.mark.parametrize("pinned", [False, True])
def test_rendered_scripts_pass_shellcheck(kind, pinned, tmp_path):
    shellcheck = _shellcheck()
    if not shellcheck:
        pytest.skip("shellcheck is not installed and only root can install it "
                    "(.ci/deps-packaging.sh)")
    profile = SimpleNamespace(name="nvhpc", modules=("nvhpc/24.7",)) if pinned else None
    script = tmp_path / "job.sh"
    script.write_text(render_job(kind, profile))
    result = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("kind, partition, account", [("slurm", "#SBATCH --partition=gpu-h200", "#SBATCH --account=proj42"),
                                                      ("pbs", "#PBS -q gpu-h200", "#PBS -A proj42")])
def test_print_job_takes_partition_account_and_the_profile_search_path(kind, partition, account, tmp_path,
                                                                      monkeypatch, capsys):
    from rosenna.cli import main

    site = tmp_path / "site profiles"
    site.mkdir()
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(site))
    assert main(["gpu-gate", "--print-job", kind, "--partition", "gpu-h200", "--account", "proj42"]) == 0
    text = capsys.readouterr().out
    assert partition in text.splitlines() and account in text.splitlines()
    assert "remove one '#'" not in text
    assert f"ROSENNA_TOOLCHAIN_PATH=${{ROSENNA_TOOLCHAIN_PATH-'{site}'}}\nexport ROSENNA_TOOLCHAIN_PATH" in text
    script = tmp_path / "job.sh"
    script.write_text(text)
    # The written-in path reaches the job when the scheduler passed none (PBS without -V).
    probe = text.split("say() {")[0].replace("set -uo pipefail", "")
    probe = "\n".join(line for line in probe.splitlines() if not line.startswith(("job_id=", "submit_dir=", "out_dir=")))
    env = {k: v for k, v in os.environ.items() if k != "ROSENNA_TOOLCHAIN_PATH"}
    result = subprocess.run(["bash", "-c", probe + '\nprintf "%s" "$ROSENNA_TOOLCHAIN_PATH"'], env=env,
                            capture_output=True, text=True)
    assert result.stdout == str(site), result.stderr
    generic = render_job(kind)
    assert "#" + partition.replace("gpu-h200", "gpu") in generic and "remove one '#'" in generic and "ROSENNA_TOOLCHAIN_PATH=" not in generic
    if kind == "pbs":
        assert "Torque, PBS before 13: -l nodes=1:ppn=1:gpus=1" in generic and "qsub -V" in generic


def test_print_job_refuses_a_partition_that_is_not_a_name(capsys):
    from rosenna.cli import main

    assert main(["gpu-gate", "--print-job", "slurm", "--partition", "gpu\n#SBATCH --x"]) == 2
    assert "--partition 'gpu\\n#SBATCH --x': not a partition name" in capsys.readouterr().err
