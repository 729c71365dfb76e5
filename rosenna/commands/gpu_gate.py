"""`rosenna gpu-gate`: prove the generated code runs on the GPU, right, fast and without transfers."""

import os
import sys

from rosenna import gate
from rosenna.errors import UsageError
from rosenna.commands.toolchain import add_target_options
from rosenna.gate.config import POINTS_DEVICE, POINTS_HOST, check_offload
from rosenna.gate.jobs import GPU_REQUESTS
from rosenna.gate.partition import SLOW_MARGIN


def register(subparsers):
    p = subparsers.add_parser(
        "gpu-gate", help="build and run a model on the GPU through every calling path; write a PASS/FAIL report",
        description="Generate a model embedded and file-loaded, build it, and run the harnesses: the per-point "
                    "routine inside C and Fortran OpenMP target loops, device data handed to <name>_infer_batch, "
                    "and (cuda) the user's own kernel calling <name>_infer. Each is compared with onnxruntime, "
                    "timed, checked to run on the device, and its time-step loop checked to move nothing "
                    "between host and device. Writes gate-report.md and gate-report.json; exit 1 on any FAIL.")
    p.add_argument("--model", default="gemm_big", help="built-in model name or .onnx path (default gemm_big)")
    p.add_argument("--toolchain", metavar="NAME", help="toolchain profile (or auto) for compilers, flags, backend")
    p.add_argument("--cc", help="C compiler of the per-point harnesses (default $CC or gcc)")
    p.add_argument("--fc", help="Fortran compiler (default $FC or gfortran; 'none' skips the Fortran harness)")
    p.add_argument("--flags", help="OpenMP offload flags for --cc and --fc (default -fopenmp -foffload=nvptx-none)")
    p.add_argument("--acc-flags", help="OpenACC flags for --cc and --fc: also run the OpenACC harnesses "
                                       "(e.g. --acc-flags=\"-fopenacc -foffload=nvptx-none\"; host fallback: -fopenacc)")
    p.add_argument("--backend", choices=gate.BACKENDS, help="batched backend (default cuda when nvcc is found)")
    p.add_argument("--devflags", help="device compiler flags (default: the profile's, e.g. -O3 -arch=sm_90 on an H100)")
    p.add_argument("--devcc", help="device compiler (default: the profile's, nvcc for cuda, hipcc for hip)")
    p.add_argument("--cflags", help="optimisation flags of --cc (default: the profile's optimize.c; gcc's without one)")
    p.add_argument("--fflags", help="optimisation flags of --fc (default: the profile's optimize.fortran)")
    add_target_options(p)
    p.add_argument("--host-fallback", action="store_true",
                   help="no GPU: omp backend on the host, no device or transfer checks (CI)")
    p.add_argument("--points", type=int, help=f"points timed per pass (default {POINTS_DEVICE}; "
                                              f"{POINTS_HOST} with --host-fallback, about a minute on 2 cores)")
    p.add_argument("--tune", action="append", metavar="KEY=VALUE", default=[],
                   help="set one tuning value over the profile's for the generated code (repeatable)")
    p.add_argument("--precision", choices=("bf16", "fp16"),
                   help="generate a float32 model's dense layers in bf16 or fp16 (float32 sums; docs/low-precision.md)")
    p.add_argument("--out", default="gpu-gate", metavar="DIR", help="where builds and reports go (default gpu-gate)")
    p.add_argument("--label", default="", help="names the compiler set in the report")
    p.add_argument("--weights", choices=tuple(gate.WEIGHTS), default="both",
                   help="which builds run: embedded and file-loaded weights (default both), or one of them")
    p.add_argument("--print-job", choices=("slurm", "pbs"),
                   help="print a batch job that runs the gate on a GPU node, and exit")
    p.add_argument("--partition", metavar="P", help="with --print-job: the partition (PBS: queue) to submit to")
    p.add_argument("--account", metavar="A", help="with --print-job: the account the job is charged to")
    job = p.add_argument_group(
        "batch job", "what --print-job and --check-job ask for; each overrides the toolchain profile's job: section")
    job.add_argument("--cpus-per-task", type=int, metavar="N", help="CPUs per gate (default 1)")
    job.add_argument("--gpus", type=int, metavar="N", help="GPUs per node (default 1; none with --host-fallback)")
    job.add_argument("--gpu-request", choices=tuple(GPU_REQUESTS),
                     help="how Slurm is asked for GPUs: --gpus=N (default), --gpus-per-node=N, --gres=gpu:N, or none")
    job.add_argument("--time", metavar="T", help="wall-time limit (default 00:30:00)")
    job.add_argument("--module", metavar="M", help="module that provides rosenna (default: rosenna, loaded only "
                                                   "when rosenna is not on PATH)")
    job.add_argument("--nodes", type=int, metavar="N", help="one job gating N nodes, one gate per node, one merged report")
    job.add_argument("--nodelist", metavar="LIST", help="... or these nodes (n[1-4],gpu7); with --merge: the nodes expected")
    job.add_argument("--array", action="store_true", help="the --nodes job as a job array, one single-node task per node")
    job.add_argument("--check-job", action="store_true",
                     help="ask Slurm (sbatch --test-only) whether the partition can ever run the job --print-job "
                          "slurm prints; say why not in one line (exit 1)")
    job.add_argument("--node-dir", action="store_true",
                     help="write into OUT/<node name> (Slurm's SLURMD_NODENAME): one folder per node of a partition job")
    job.add_argument("--merge", metavar="DIR", help="merge DIR/nodes/*/gate-report.json into DIR/partition-report.md "
                                                    "and .json; exit 1 if any node failed")
    job.add_argument("--slow-margin", type=float, metavar="F",
                     help=f"with --merge: flag nodes slower than the median by more than F (default {SLOW_MARGIN})")
    cal = p.add_argument_group(
        "calibration", "time tuning choices on this node and write them into a profile overlay (docs/slurm-gate.md)")
    cal.add_argument("--calibrate", action="append", nargs="?", const="all", metavar="KEY[=V1,V2]",
                     help="time the measured tuning knobs (GPU: rosenna.strategy.MEASURED; with --host-fallback the "
                          "host batch's), or only KEY (its candidates, or V1,V2... also V1:V2, which sbatch --export leaves whole); "
                          "repeatable")
    cal.add_argument("--overlay-dir", metavar="DIR",
                     help="with --calibrate: where <profile>.yaml goes (default your own profile folder, "
                          "$XDG_CONFIG_HOME/rosenna/toolchains); it must come before the profile's folder on the search path")
    p.set_defaults(func=run)


def _say(line):
    print(line, flush=True)


def run(args):
    profile = None
    if args.toolchain:
        from rosenna import toolchain

        profile = toolchain.resolve(args.toolchain, target=args.target, gpu_arch=args.gpu_arch)
    if args.merge:
        return _merge(args)
    if args.print_job or args.check_job:
        from rosenna.gate import jobs

        job = jobs.request(profile.job if profile is not None else None,
                           **{key: getattr(args, key) for key in ("cpus_per_task", "gpus", "gpu_request", "partition",
                                                                  "account", "time", "module", "nodes", "nodelist",
                                                                  "array", "host_fallback")})
        text = jobs.render_job(args.print_job or "slurm", profile, job=job,
                               toolchain_path=os.environ.get("ROSENNA_TOOLCHAIN_PATH") or None)
        if args.check_job:
            if args.print_job not in (None, "slurm"):
                raise UsageError("--check-job asks Slurm (sbatch --test-only); PBS has no such check")
            return _check_job(text, job)
        print(text, end="")
        return 0
    job_flags = [f"--{k.replace('_', '-')}" for k in ("partition", "account", "cpus_per_task", "gpus", "gpu_request",
                                                     "time", "module", "nodes", "nodelist", "array")
                 if getattr(args, k) not in (None, False)]
    if job_flags:
        print(f"rosenna gpu-gate: note: {', '.join(job_flags)} only matter with --print-job or --check-job",
              file=sys.stderr)
    config = gate.Config(model=args.model, points=args.points, out=args.out, host_fallback=args.host_fallback,
                         label=args.label, weights=args.weights, precision=args.precision)
    if profile is not None:  # without one, gate.Config takes the gcc profile's flags
        if args.flags is None:
            check_offload(profile, args.host_fallback)
        config.cflags, config.fflags = profile.optimize_c, profile.optimize_fortran
        config.cc, config.fc = profile.cc, profile.fc
        config.flags = profile.flags_host if args.host_fallback else profile.flags_omp_offload
        config.backend = profile.backend
        config.devcc, config.devflags = profile.devcc or None, (profile.device_flags() if profile.devcc else None)
        config.profile = {"name": profile.name, "file": str(profile.source), "reason": profile.reason or None}
    config.target, config.gpu_arch = args.target, args.gpu_arch
    from rosenna.generate import target_arch
    from rosenna.strategy import Tuning
    config.tuning = Tuning.for_target(getattr(profile, "tuning", None), target_arch(profile)).parse_overrides(args.tune)
    if profile is not None and profile.flags_acc and not args.host_fallback:
        config.acc_flags = profile.flags_acc
    for key in ("cc", "fc", "flags", "acc_flags", "backend", "devcc", "devflags", "cflags", "fflags"):
        if getattr(args, key) is not None:
            setattr(config, key, getattr(args, key))
    if args.calibrate:
        return _calibrate(args, config, profile)
    if args.node_dir:
        from rosenna.gate.report import node_name

        config.out = os.path.join(args.out, node_name())
    report = gate.run(config, progress=_say)
    print(f"{'PASS' if report['pass'] else 'FAIL'}: {config.out}/gate-report.md", flush=True)
    return 0 if report["pass"] else 1


def _calibrate(args, config, profile):
    from rosenna import toolchain
    from rosenna.gate import calibrate
    from rosenna.toolchain import search_path

    if profile is None:
        profile = toolchain.resolve(None, target=args.target, gpu_arch=args.gpu_arch)
    overlay_dir = args.overlay_dir or next(str(d.path) for d in search_path() if d.kind == "user")
    report = calibrate.calibrate(config, profile, args.calibrate, args.out, overlay_dir, progress=_say)
    print(f"calibrated: {report['result']}; tuning.{report['section']} of {report['overlay']}; "
          f"measurements in {os.path.join(args.out, 'calibrate-report.md')}", flush=True)
    return 0


def _merge(args):
    from rosenna.gate import partition

    margin = partition.SLOW_MARGIN if args.slow_margin is None else args.slow_margin
    if margin < 0:
        raise UsageError(f"--slow-margin {margin}: give a fraction of at least 0 (0.25: 25 % over the median)")
    report = partition.merge(args.merge, nodelist=args.nodelist, nodes=args.nodes, margin=margin)
    out = os.path.join(args.merge, partition.REPORT)
    print(f"{'PASS' if report['pass'] else 'FAIL'}: {len(report['rows'])} node(s), report {out}.md", flush=True)
    if report["slow"]:
        print(f"slow (over the median by more than {margin:.0%}): {', '.join(report['slow'])}", flush=True)
    if report["missing"]:
        print(f"{report['missing']} node(s) expected wrote no report", flush=True)
    if report["failing"]:
        print(f"failing nodes: {', '.join(report['failing'])}; drain them with:", flush=True)
        print(report["drain"], flush=True)
    return 0 if report["pass"] else 1


def _check_job(text, job):
    """``sbatch --test-only`` on the job ``text``: 0 and Slurm's line when it could run, 1 and why not."""
    import shutil
    import subprocess

    if not shutil.which("sbatch"):
        raise UsageError("--check-job: sbatch is not on PATH (run it on a login node of the cluster)")
    try:
        result = subprocess.run(["sbatch", "--test-only"], input=text, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise UsageError("--check-job: sbatch --test-only did not answer in 60 s (is slurmctld up?)") from None
    answer = " ".join((result.stderr + result.stdout).split())
    asked = " ".join(line[len("#SBATCH "):] for line in text.splitlines()
                     if line.startswith("#SBATCH ") and not line.startswith(("#SBATCH --job-name", "#SBATCH --output")))
    where = f"partition '{job.partition}'" if job.partition else "the default partition"
    if result.returncode == 0:
        print(f"OK: {where} can run the gate job ({asked}): {answer.removeprefix('sbatch: ')}")
        return 0
    reason = answer.split("error: ")[-1] if "error: " in answer else answer
    print(f"rosenna gpu-gate: {where} can never run the gate job as asked ({asked}): Slurm says "
          f"'{reason}'. Ask for less (--cpus-per-task, --gpus, --gpu-request gres|none, --time, or the profile's "
          "job: section) or name another --partition")
    return 1
