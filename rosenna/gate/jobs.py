"""Batch job scripts that run ``rosenna gpu-gate`` on a GPU partition (Slurm or PBS).

One body serves both schedulers; what differs (directive lines, job id, submit directory, how the
gate step is launched) is the table :data:`SCHEDULERS`. ``gate/slurm/gpu-gate.sbatch`` and
``gate/pbs/gpu-gate.pbs`` are this module's rendering with no profile (the job resolves the
profile and its modules when it starts); ``rosenna gpu-gate --print-job slurm|pbs`` renders it for
one profile, with that profile's name and modules, its ``job:`` section (:class:`JobRequest`:
CPUs, GPU request, partition, account, time limit, the module that provides rosenna), the flags
given, and the profile search path (``ROSENNA_TOOLCHAIN_PATH``) of the shell that rendered it.
tests/test_jobs.py keeps the files in gate/ equal to :func:`render_job`'s output; tests/test_slurm.py
submits the printed jobs to a real Slurm cluster.

The environment: Slurm's sbatch passes the submitting shell's environment to the job (unless the
site sets ``--export=NONE``; ``--export=ALL,NAME=value`` adds to it); PBS Pro and Torque pass only a
few ``PBS_O_*`` variables unless the job is submitted with ``-V`` (all) or ``-v NAME[=value]``. So
the rendered job writes in the search path it was rendered with.

The GPU request has three spellings in Slurm (:data:`GPU_REQUESTS`): ``--gpus=N`` (Slurm 19.05 and
later, the job's total), ``--gpus-per-node=N`` (the form a multi-node job wants) and
``--gres=gpu:N`` (older sites, and sites whose job_submit filters only know gres). A cluster with no
GPU gres configured refuses all three (``Invalid generic resource (gres) specification``): rendered
with ``--host-fallback`` (or ``gpu_request: none``) the job asks for no GPU. PBS Pro asks
``-l select=1:ncpus=C:ngpus=G``, Torque (and PBS before 13) ``-l nodes=1:ppn=C:gpus=G``; the script
carries the first and says how to write the second.

What the job does, in order:

1. find rosenna: load ``ROSENNA_MODULE`` when one is named; else use the ``rosenna`` on PATH; else
   load the module ``rosenna``; one line says which;
2. load the modules the toolchain profile names (its ``modules:`` list);
3. ``rosenna toolchain detect``, so the log shows the node and the profile chosen;
4. ``rosenna gpu-gate --toolchain T --out DIR $ROSENNA_GATE_ARGS`` where DIR is
   ``${ROSENNA_GATE_OUT:-${SCRATCH:-<submit dir>}}/rosenna-gpu-gate-<job id>``;
   a partition job (``nodes`` or ``nodelist``) runs one gate per node in one ``srun
   --ntasks-per-node=1`` step, each into ``DIR/nodes/<node>``, then ``rosenna gpu-gate --merge DIR``
   writes ``partition-report.md``/``.json`` (:mod:`rosenna.gate.partition`) and names the failing
   nodes for ``scontrol update ... State=DRAIN``; a job array (``array``) runs one task per node,
   and its first task submits the merge as a job that waits for the whole array;
5. exit with the gate's status (non-zero on any FAIL), or 3 when the gate wrote no report.
"""

import re
import shlex
from pathlib import Path
from dataclasses import dataclass, fields, replace

from rosenna.errors import RosennaError, UsageError
from rosenna.quoting import sh_dquote, sh_quote

JOB_NAME = "rosenna-gpu-gate"

#: The Slurm spellings of a GPU request, by the ``gpu_request`` key's value; "none" asks for no GPU.
GPU_REQUESTS = {"gpus": "--gpus={n}", "gpus-per-node": "--gpus-per-node={n}", "gres": "--gres=gpu:{n}",
                "none": ""}


@dataclass(frozen=True)
class JobRequest:
    """What a gate job asks of the scheduler: the profile's ``job:`` section, then flags, over these defaults.

    The defaults fit a plain cluster: one CPU (a node defined without ``CPUs=`` has one), one GPU
    asked with ``--gpus`` (none in host-fallback mode), half an hour, the cluster's default
    partition and the user's default account.
    """

    cpus_per_task: int = 1
    gpus: int = 1
    gpu_request: str = "gpus"  # a key of GPU_REQUESTS
    partition: str = None
    account: str = None
    time: str = "00:30:00"
    module: str = None  # the module that provides rosenna (None: load `rosenna` only when not on PATH)
    nodes: int = None  # a partition job over this many nodes, one gate each
    nodelist: str = None  # ... or over these nodes (a Slurm hostlist: n[1-3],gpu7)
    array: bool = False  # the partition job as a job array, one single-node task per node
    host_fallback: bool = False  # the gate runs --host-fallback: no GPU asked for

    @property
    def partition_job(self):
        return self.nodes is not None or self.nodelist is not None


#: The ``job:`` keys of a toolchain profile (rosenna/toolchain/schema.py validates them).
PROFILE_KEYS = ("cpus_per_task", "gpus", "gpu_request", "partition", "account", "time", "module")

# A partition, account or module name is written into a directive or a shell line: letters, digits
# and . _ - @ : + / only; a hostlist adds brackets and commas; a time is Slurm's [D-]HH:MM:SS or minutes.
_SITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+/-]*")
_HOSTLIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\[\],-]*")
_TIME = re.compile(r"([0-9]+-)?[0-9]{1,2}(:[0-9]{2}){0,2}|[0-9]+")


def request(profile_job=None, **flags):
    """The :class:`JobRequest` of a profile's ``job:`` mapping with ``flags`` (None: not given) over it.

    Raises:
        UsageError: a value that cannot go into a job script (what, which key or flag, what to write).
    """
    values = {k: v for k, v in dict(profile_job or ()).items() if k in PROFILE_KEYS}
    values.update({k: v for k, v in flags.items() if v is not None and v is not False})
    unknown = set(values) - {f.name for f in fields(JobRequest)}
    if unknown:
        raise UsageError(f"job request: unknown key(s) {', '.join(sorted(unknown))}")
    job = replace(JobRequest(), **values)
    for key, pattern in (("partition", _SITE_NAME), ("account", _SITE_NAME), ("module", _SITE_NAME),
                         ("nodelist", _HOSTLIST), ("time", _TIME)):
        value = getattr(job, key)
        if value is not None and not (isinstance(value, str) and pattern.fullmatch(value)):
            kind = {"time": "time limit (minutes, HH:MM:SS or D-HH:MM:SS)",
                    "nodelist": "node list (names, n[1-4], commas)"}.get(key, f"{key} name (letters, digits and . _ - @ : + / only)")
            raise UsageError(f"--{key.replace('_', '-')} {value!r}: not a {kind}")
    for key in ("cpus_per_task", "gpus", "nodes"):
        value = getattr(job, key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "gpus" else 1)):
            raise UsageError(f"--{key.replace('_', '-')} {value!r}: give a whole number of at least "
                             f"{0 if key == 'gpus' else 1}")
    if job.gpu_request not in GPU_REQUESTS:
        raise UsageError(f"--gpu-request {job.gpu_request!r}: choose one of {', '.join(GPU_REQUESTS)}")
    if job.array and not job.partition_job:
        raise UsageError("--array: name the nodes too (--nodes N or --nodelist LIST): one array task per node")
    return job


@dataclass(frozen=True)
class Scheduler:
    """What differs between the schedulers: data, not code."""

    submit: str  # the command a site types
    export_example: str  # how a submission passes a setting into the job
    directives: tuple  # resource lines, with {job_name}, {time}, {cpus}, {gpu_line}
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
            "{gpu_line}",
            "#SBATCH --time={time}",
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
            "# (Torque, PBS before 13: -l nodes=1:ppn={cpus}{torque_gpus} instead of select)",
            "#PBS -l select=1:ncpus={cpus}{pbs_gpus}",
            "#PBS -l walltime={time}",
            "#PBS -j oe",
        ),
        job_id="${PBS_JOBID:?not running under PBS}",
        submit_dir="${PBS_O_WORKDIR:-$PWD}",
        launch="",
        partition="#PBS -q {}",
        account="#PBS -A {}",
    ),
}

_HEADER = """\
#!/bin/bash
# rosenna GPU gate as a {kind_title} batch job: {submit}
#
# Resource lines: {shape}, {gpu_words}, {cpus} CPU(s) per gate, {time} of wall time.
# Edit them below, or set them in the toolchain profile's job: section (or give --cpus-per-task,
# --gpus, --gpu-request, --time ...) and render again with rosenna gpu-gate --print-job {kind};
# the gate itself takes a few minutes on a GPU (1,000,000 points per harness by default).
{directives}
#
# Rendered by rosenna/gate/jobs.py; {origin}
#
# Settings; override any at submission, e.g. {export_example}:
#   ROSENNA_MODULE     module that provides rosenna ({module_note})
#   ROSENNA_TOOLCHAIN  toolchain profile for the gate ({toolchain_default} by default)
#   ROSENNA_GATE_ARGS  extra gpu-gate arguments, e.g. "--model mlp128" or "--host-fallback"
#   ROSENNA_GATE_OUT   where the report folder goes (default $SCRATCH, else the submit directory)
#   ROSENNA_TOOLCHAIN_PATH  folders of the site's toolchain profiles ({toolchain_path_note})
"""






def _template(name):
    """A part of the job body: rosenna/gate/templates/job-*.sh (shell with @NAME@ placeholders)."""
    return (Path(__file__).resolve().parent / "templates" / name).read_text(encoding="utf-8")


def _node_count(job):
    from rosenna.gate.partition import expand_hostlist

    return job.nodes if job.nodes is not None else len(expand_hostlist(job.nodelist))


def _slurm_lines(job):
    """The #SBATCH lines of ``job``, in the order of the scheduler table, and the shape in words."""
    gpu = GPU_REQUESTS["none" if job.host_fallback else job.gpu_request].format(n=job.gpus)
    if gpu and job.gpus:
        note = ("# (Slurm 19.05 and later also take --gpus=N: render with --gpu-request gpus)" if job.gpu_request == "gres"
                else "# (Slurm before 19.05, or a site that filters on gres: render with --gpu-request gres)")
        gpu_line = f"{note}\n#SBATCH {gpu}"
    else:
        gpu_line = "# (no GPU asked for: host-fallback gate, or gpu_request none)"
    lines = []
    for line in SCHEDULERS["slurm"].directives:
        if line == "#SBATCH --nodes=1" and job.partition_job:
            if job.array:
                lines += [f"#SBATCH --array=0-{_node_count(job) - 1}", "#SBATCH --nodes=1", "#SBATCH --exclusive"]
                continue
            if job.nodes is not None:
                lines.append(f"#SBATCH --nodes={job.nodes}")
            if job.nodelist is not None:
                lines.append(f"#SBATCH --nodelist={job.nodelist}")
            lines.append("#SBATCH --exclusive")
            continue
        if line == "#SBATCH --ntasks=1" and job.partition_job and not job.array:
            lines.append("#SBATCH --ntasks-per-node=1")
            continue
        if line.startswith("#SBATCH --output=") and job.array:
            lines.append("#SBATCH --output={job_name}-%A_%a.log".format(job_name=JOB_NAME))
            continue
        lines.append(line.format(job_name=JOB_NAME, cpus=job.cpus_per_task, gpu_line=gpu_line, time=job.time))
    return lines


def _pbs_lines(job):
    gpus = 0 if job.host_fallback or job.gpu_request == "none" else job.gpus
    return [line.format(job_name=JOB_NAME, cpus=job.cpus_per_task, time=job.time,
                        pbs_gpus=f":ngpus={gpus}" if gpus else "", torque_gpus=f":gpus={gpus}" if gpus else "")
            for line in SCHEDULERS["pbs"].directives]


def render_job(kind, profile=None, *, job=None, partition=None, account=None, toolchain_path=None):
    """The gpu-gate batch script for scheduler ``kind`` ("slurm" or "pbs").

    Args:
        kind: the scheduler, a key of :data:`SCHEDULERS`.
        profile: a resolved toolchain profile (anything with ``.name`` and ``.modules``) to write
            in: the job then uses that profile and loads its modules without asking rosenna.
            ``None`` gives the generic script of gate/: profile ``auto``, modules looked up when
            the job starts.
        job: the :class:`JobRequest` (default: :func:`request` of the profile's ``job:`` section).
        partition, account: shorthands that override ``job``'s.
        toolchain_path: the profile search path to write in (the job's own
            ``ROSENNA_TOOLCHAIN_PATH``, when it has one, wins); None writes none.

    Raises:
        RosennaError: for an unknown scheduler; UsageError for a value that is not a plain name, or a
            partition job asked of PBS.
    """
    from rosenna import __version__

    try:
        scheduler = SCHEDULERS[kind]
    except KeyError:
        raise RosennaError(
            f"unknown scheduler '{kind}' (known: {', '.join(sorted(SCHEDULERS))})"
        ) from None
    if job is None:
        job = request(getattr(profile, "job", None))
    job = request({f.name: getattr(job, f.name) for f in fields(JobRequest) if f.name in PROFILE_KEYS},
                  partition=partition or job.partition, account=account or job.account, nodes=job.nodes,
                  nodelist=job.nodelist, array=job.array, host_fallback=job.host_fallback)
    if job.partition_job and kind != "slurm":
        raise UsageError("--nodes / --nodelist: the partition job is written for Slurm only "
                         "(PBS: submit the single-node job once per node)")
    directives = _slurm_lines(job) if kind == "slurm" else _pbs_lines(job)
    if job.partition is None or job.account is None:
        directives.append("# To name the GPU partition (queue) and the account jobs are charged to, remove one '#'"
                          " (or render with --print-job %s --partition P --account A):" % kind)
    directives.append(scheduler.partition.format(job.partition) if job.partition else "#" + scheduler.partition.format("gpu"))
    directives.append(scheduler.account.format(job.account) if job.account else "#" + scheduler.account.format("PROJECT"))
    if profile is None:
        toolchain = "auto"
        origin = "the profile and its modules are resolved when the job starts."
        if job == request():
            origin += "\n# Regenerate: python -m rosenna.gate.jobs gate"
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
    gpus = 0 if job.host_fallback or job.gpu_request == "none" else job.gpus
    if job.array:
        shape = f"a job array of {_node_count(job)} single-node tasks, one per node"
    elif job.partition_job:
        shape = f"{job.nodes or 'the listed'} nodes, one gate per node"
    else:
        shape = "one node"
    header = _HEADER.format(
        kind_title={"slurm": "Slurm", "pbs": "PBS"}[kind],
        kind=kind,
        submit=scheduler.submit,
        export_example=scheduler.export_example,
        directives="\n".join(directives),
        origin=origin,
        toolchain_default=toolchain,
        toolchain_path_note=path_note,
        shape=shape,
        gpu_words=f"{gpus} GPU(s) per node" if gpus else "no GPU asked for",
        cpus=job.cpus_per_task,
        time=job.time,
        module_note=(f"default {job.module}" if job.module else
                     "default: none when rosenna is on PATH, else the module rosenna"),
    )
    if job.array:
        expect = (f"--nodelist {shlex.quote(job.nodelist)}" if job.nodelist is not None else f"--nodes {job.nodes}")
        body = _template("job-array.sh").replace("@EXPECT@", expect).replace("@JOB_NAME@", JOB_NAME)
    elif job.partition_job:
        body = _template("job-partition.sh")
    else:
        body = _template("job-one.sh")
    body = (
        ("\n" + _template("job-start.sh") + body).replace("@TOOLCHAIN@", toolchain)
        .replace("@MODULE@", job.module or "")
        .replace("@GATE_ARGS@", "--host-fallback" if job.host_fallback else "")
        .replace("@TOOLCHAIN_PATH@\n", f"{path_lines}\n" if path_lines else "")
        .replace("@PROFILE_MODULES@\n", f"{profile_modules}\n" if profile_modules else "")
        .replace("@JOB_ID@", "${SLURM_ARRAY_JOB_ID:?not an array job}" if job.array else scheduler.job_id)
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
