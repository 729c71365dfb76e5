"""Batch job scripts that run ``rosenna gpu-gate`` on a GPU partition (Slurm or PBS).

One body serves both schedulers; what differs (directive lines, job id, submit directory, how the
gate step is launched) is the table :data:`SCHEDULERS`. ``gate/slurm/gpu-gate.sbatch`` and
``gate/pbs/gpu-gate.pbs`` are this module's rendering with no profile (the job resolves the
profile and its modules when it starts); ``rosenna gpu-gate --print-job slurm|pbs [--partition P]
[--account A]`` renders it for one profile, with that profile's name and modules, the partition
and account, and the profile search path (``ROSENNA_TOOLCHAIN_PATH``) of the shell that rendered it
written in. tests/test_jobs.py keeps the files in gate/ equal to :func:`render_job`'s output.

The environment: Slurm's sbatch passes the submitting shell's environment to the job (unless the
site sets ``--export=NONE``); PBS Pro and Torque pass only a few ``PBS_O_*`` variables unless the
job is submitted with ``-V`` (all) or ``-v NAME[=value]``. So the rendered job writes in the
search path it was rendered with, and the module that provides rosenna (Spack's and EasyBuild's)
sets ``ROSENNA_TOOLCHAIN_PATH`` to the site's profile folder itself.

PBS Pro and Torque differ in the resource line: PBS Pro asks ``-l select=1:ncpus=8:ngpus=1``,
Torque (and PBS versions before 13) ``-l nodes=1:ppn=8:gpus=1``; the script carries the first and
says how to write the second. Both set ``PBS_JOBID`` and ``PBS_O_WORKDIR`` and take ``-q`` (queue)
and ``-A`` (account) alike.

What the job does, in order:

1. load the module that provides rosenna (``ROSENNA_MODULE``, default ``rosenna``; empty when
   rosenna is on PATH already);
2. load the modules the toolchain profile names (its ``modules:`` list);
3. ``rosenna toolchain detect``, so the log shows the node and the profile chosen;
4. ``rosenna gpu-gate --toolchain T --out DIR $ROSENNA_GATE_ARGS`` where DIR is
   ``${ROSENNA_GATE_OUT:-${SCRATCH:-<submit dir>}}/rosenna-gpu-gate-<job id>``;
5. exit with the gate's status (non-zero on any FAIL), or 3 when the gate wrote no report.
"""

import re
import shlex
from dataclasses import dataclass

from rosenna.errors import RosennaError, UsageError
from rosenna.quoting import sh_dquote, sh_quote

# How long and how wide the job is. The rendered scripts carry these as plain directive lines,
# so a site edits them there; they are here only so both schedulers start from the same numbers.
WALLTIME = "00:30:00"
CPUS = 8
GPUS = 1
JOB_NAME = "rosenna-gpu-gate"


@dataclass(frozen=True)
class Scheduler:
    """What differs between the schedulers: data, not code."""

    submit: str  # the command a site types
    export_example: str  # how a submission passes a setting into the job
    directives: tuple  # resource lines, with {job_name}, {walltime}, {cpus}, {gpus}
    job_id: str  # shell expression for the job id
    submit_dir: str  # shell expression for the directory the job was submitted from
    launch: str  # words that run the gate as a job step ("" runs it in the batch shell)
    partition: str  # the directive naming the partition (queue), with {}
    account: str  # the directive naming the account charged, with {}


SCHEDULERS = {
    "slurm": Scheduler(
        submit="sbatch gate/slurm/gpu-gate.sbatch",
        export_example="sbatch --export=ALL,ROSENNA_TOOLCHAIN=nvhpc",
        directives=(
            "#SBATCH --job-name={job_name}",
            "#SBATCH --nodes=1",
            "#SBATCH --ntasks=1",
            "#SBATCH --cpus-per-task={cpus}",
            "# (older Slurm: --gres=gpu:{gpus} instead of --gpus)",
            "#SBATCH --gpus={gpus}",
            "#SBATCH --time={walltime}",
            "#SBATCH --output={job_name}-%j.log",
        ),
        job_id="${SLURM_JOB_ID:?not running under Slurm}",
        submit_dir="${SLURM_SUBMIT_DIR:-$PWD}",
        launch='srun --ntasks=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}"',
        partition="#SBATCH --partition={}",
        account="#SBATCH --account={}",
    ),
    "pbs": Scheduler(
        submit="qsub gate/pbs/gpu-gate.pbs",
        export_example="qsub -v ROSENNA_TOOLCHAIN=nvhpc",
        directives=(
            "#PBS -N {job_name}",
            "# (Torque, PBS before 13: -l nodes=1:ppn={cpus}:gpus={gpus} instead of select)",
            "#PBS -l select=1:ncpus={cpus}:ngpus={gpus}",
            "#PBS -l walltime={walltime}",
            "#PBS -j oe",
        ),
        job_id="${PBS_JOBID:?not running under PBS}",
        submit_dir="${PBS_O_WORKDIR:-$PWD}",
        launch="",
        partition="#PBS -q {}",
        account="#PBS -A {}",
    ),
}

# A partition or account name is written into a directive line: letters, digits and . _ - @ : + only.
_SITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]*")

_HEADER = """\
#!/bin/bash
# rosenna GPU gate as a {kind_title} batch job: {submit}
#
# Resource lines: one node, {gpus} GPU, {cpus} cores, {walltime} of wall time. Edit them below;
# the gate itself takes a few minutes (1,000,000 points per harness by default).
{directives}
#
# Rendered by rosenna/gate/jobs.py; {origin}
#
# Settings; override any at submission, e.g. {export_example}:
#   ROSENNA_MODULE     module that provides rosenna; empty when rosenna is on PATH already
#   ROSENNA_TOOLCHAIN  toolchain profile for the gate ({toolchain_default} by default)
#   ROSENNA_GATE_ARGS  extra gpu-gate arguments, e.g. "--model mlp128" or "--host-fallback"
#   ROSENNA_GATE_OUT   where the report folder goes (default $SCRATCH, else the submit directory)
#   ROSENNA_TOOLCHAIN_PATH  folders of the site's toolchain profiles ({toolchain_path_note})
"""

_BODY = r"""
set -uo pipefail

ROSENNA_MODULE=${ROSENNA_MODULE-rosenna}
ROSENNA_TOOLCHAIN=${ROSENNA_TOOLCHAIN:-@TOOLCHAIN@}
ROSENNA_GATE_ARGS=${ROSENNA_GATE_ARGS-}
@TOOLCHAIN_PATH@
@PROFILE_MODULES@
job_id=@JOB_ID@
submit_dir=@SUBMIT_DIR@
launch=(@LAUNCH@)
out_dir=${ROSENNA_GATE_OUT:-${SCRATCH:-$submit_dir}}/rosenna-gpu-gate-$job_id

say() { printf '== %s\n' "$*"; }
die() { printf 'rosenna-gpu-gate: %s\n' "$*" >&2; exit "${2:-2}"; }

# Batch shells do not always define `module`: try the usual Lmod and Environment Modules inits.
have_module() {
    type module >/dev/null 2>&1 && return 0
    local init
    for init in "${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash" /etc/profile.d/lmod.sh \
                /etc/profile.d/modules.sh /usr/share/modules/init/bash; do
        # shellcheck disable=SC1090
        [ -r "$init" ] && . "$init" && type module >/dev/null 2>&1 && return 0
    done
    return 1
}

load_modules() {
    [ $# -gt 0 ] || return 0
    have_module || die "no 'module' command to load: $*"
    say "module load $*"
    module load "$@" || die "module load $* failed"
}

cd "$submit_dir" || die "cannot enter $submit_dir"
say "job $job_id on $(hostname), output in $out_dir"

if [ -n "$ROSENNA_MODULE" ]; then
    load_modules "$ROSENNA_MODULE"
fi
command -v rosenna >/dev/null || die "rosenna is not on PATH (set ROSENNA_MODULE or PATH)"

if [ -z "${ROSENNA_PROFILE_MODULES+set}" ]; then
    # The modules the profile names, from its resolved JSON. Before they are loaded `auto` sees
    # only what is on PATH at job start: name the profile (ROSENNA_TOOLCHAIN) to be sure.
    profile_json=$(rosenna toolchain show "$ROSENNA_TOOLCHAIN" --json) \
        || die "rosenna toolchain show $ROSENNA_TOOLCHAIN failed"
    ROSENNA_PROFILE_MODULES=$(printf '%s' "$profile_json" | "${ROSENNA_PYTHON:-python3}" -c \
        'import json, sys; print(" ".join(json.load(sys.stdin).get("modules", [])))') \
        || die "cannot read the modules of profile $ROSENNA_TOOLCHAIN"
fi
# shellcheck disable=SC2086  # a space-separated list of module names
load_modules $ROSENNA_PROFILE_MODULES

say "toolchain profiles searched first: ${ROSENNA_TOOLCHAIN_PATH:-(ROSENNA_TOOLCHAIN_PATH unset)}"
say "rosenna --version"
rosenna --version || die "rosenna --version failed"
say "rosenna toolchain detect"
rosenna toolchain detect || die "rosenna toolchain detect failed"

mkdir -p "$out_dir" || die "cannot create $out_dir"
# shellcheck disable=SC2086  # ROSENNA_GATE_ARGS is split into arguments on purpose
set -- rosenna gpu-gate --toolchain "$ROSENNA_TOOLCHAIN" --out "$out_dir" $ROSENNA_GATE_ARGS
set -- ${launch[@]+"${launch[@]}"} "$@"
say "$*"
status=0
"$@" || status=$?

if [ "$status" -ne 0 ]; then
    say "FAIL: rosenna gpu-gate exited $status; report: $out_dir/gate-report.md"
    exit "$status"
fi
[ -s "$out_dir/gate-report.md" ] || die "the gate exited 0 but wrote no $out_dir/gate-report.md" 3
say "PASS: report in $out_dir/gate-report.md"
"""


def render_job(kind, profile=None, *, partition=None, account=None, toolchain_path=None):
    """The gpu-gate batch script for scheduler ``kind`` ("slurm" or "pbs").

    Args:
        kind: the scheduler, a key of :data:`SCHEDULERS`.
        profile: a resolved toolchain profile (anything with ``.name`` and ``.modules``) to write
            in: the job then uses that profile and loads its modules without asking rosenna.
            ``None`` gives the generic script of gate/: profile ``auto``, modules looked up when
            the job starts.
        partition, account: written in as directives (``--partition``/``-q``, ``--account``/``-A``);
            None leaves a commented example line.
        toolchain_path: the profile search path to write in (the job's own
            ``ROSENNA_TOOLCHAIN_PATH``, when it has one, wins); None writes none.

    Raises:
        RosennaError: for an unknown scheduler, or a partition or account that is not a plain name.
    """
    from rosenna import __version__

    try:
        scheduler = SCHEDULERS[kind]
    except KeyError:
        raise RosennaError(
            f"unknown scheduler '{kind}' (known: {', '.join(sorted(SCHEDULERS))})"
        ) from None
    for option, value in (("--partition", partition), ("--account", account)):
        if value is not None and not _SITE_NAME.fullmatch(value):
            raise UsageError(f"{option} {value!r}: not a {option[2:]} name (letters, digits and . _ - @ : + only)")
    sizes = {"job_name": JOB_NAME, "walltime": WALLTIME, "cpus": CPUS, "gpus": GPUS}
    directives = [line.format(**sizes) for line in scheduler.directives]
    if partition is None or account is None:
        directives.append("# To name the GPU partition (queue) and the account jobs are charged to, remove one '#'"
                          " (or render with --print-job %s --partition P --account A):" % kind)
    directives.append(scheduler.partition.format(partition) if partition else "#" + scheduler.partition.format("gpu"))
    directives.append(scheduler.account.format(account) if account else "#" + scheduler.account.format("PROJECT"))
    if profile is None:
        toolchain = "auto"
        origin = ("the profile and its modules are resolved when the job starts.\n"
                  "# Regenerate: python -m rosenna.gate.jobs gate")
        profile_modules = ""
    else:
        toolchain = sh_quote(profile.name, "the toolchain profile's name")
        origin = f"rosenna {__version__}, for profile '{profile.name}' and its modules."  # a NAME: no quote, no newline
        modules = sh_dquote(" ".join(profile.modules), "the toolchain profile's modules")
        profile_modules = f'ROSENNA_PROFILE_MODULES=${{ROSENNA_PROFILE_MODULES-{modules}}}'
    if toolchain_path:
        path_lines = (f"ROSENNA_TOOLCHAIN_PATH=${{ROSENNA_TOOLCHAIN_PATH-{shlex.quote(toolchain_path)}}}\n"
                      "export ROSENNA_TOOLCHAIN_PATH")
        path_note = "written in below from the shell that rendered this job"
    else:
        path_lines = ""
        path_note = ("the rosenna module sets it; PBS passes the submitting shell's only with qsub -V or "
                     "-v ROSENNA_TOOLCHAIN_PATH" if kind == "pbs" else "the rosenna module sets it, or sbatch passes it")
    header = _HEADER.format(
        kind_title={"slurm": "Slurm", "pbs": "PBS"}[kind],
        submit=scheduler.submit,
        export_example=scheduler.export_example,
        directives="\n".join(directives),
        origin=origin,
        toolchain_default=toolchain,
        toolchain_path_note=path_note,
        **sizes,
    )
    body = (
        _BODY.replace("@TOOLCHAIN@", toolchain)
        .replace("@TOOLCHAIN_PATH@\n", f"{path_lines}\n" if path_lines else "")
        .replace("@PROFILE_MODULES@\n", f"{profile_modules}\n" if profile_modules else "")
        .replace("@JOB_ID@", scheduler.job_id)
        .replace("@SUBMIT_DIR@", scheduler.submit_dir)
        .replace("@LAUNCH@", scheduler.launch)
    )
    return header + body


# Where the generic scripts live in a checkout, relative to its root.
GATE_FILES = {"slurm": "slurm/gpu-gate.sbatch", "pbs": "pbs/gpu-gate.pbs"}


def write_gate_scripts(gate_dir):
    """Write the generic scripts into ``gate_dir`` (a checkout's gate/); return their paths."""
    import os

    written = []
    for kind, relative in GATE_FILES.items():
        path = os.path.join(gate_dir, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(render_job(kind))
        os.chmod(path, 0o755)
        written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for written_path in write_gate_scripts(sys.argv[1] if len(sys.argv) > 1 else "gate"):
        print(written_path)
