"""`rosenna gpu-gate`: prove the generated code runs on the GPU, right, fast and without transfers."""

import os
import sys

from rosenna import gate
from rosenna.commands.toolchain import add_target_options
from rosenna.gate.config import POINTS_DEVICE, POINTS_HOST, check_offload


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
    p.add_argument("--out", default="gpu-gate", metavar="DIR", help="where builds and reports go (default gpu-gate)")
    p.add_argument("--label", default="", help="names the compiler set in the report")
    p.add_argument("--weights", choices=tuple(gate.WEIGHTS), default="both",
                   help="which builds run: embedded and file-loaded weights (default both), or one of them")
    p.add_argument("--print-job", choices=("slurm", "pbs"),
                   help="print a batch job that runs the gate on a GPU node, and exit")
    p.add_argument("--partition", metavar="P", help="with --print-job: the partition (PBS: queue) to submit to")
    p.add_argument("--account", metavar="A", help="with --print-job: the account the job is charged to")
    p.set_defaults(func=run)


def _say(line):
    print(line, flush=True)


def run(args):
    profile = None
    if args.toolchain:
        from rosenna import toolchain

        profile = toolchain.resolve(args.toolchain, target=args.target, gpu_arch=args.gpu_arch)
    if args.print_job:
        from rosenna.gate.jobs import render_job

        print(render_job(args.print_job, profile, partition=args.partition, account=args.account,
                         toolchain_path=os.environ.get("ROSENNA_TOOLCHAIN_PATH") or None), end="")
        return 0
    if args.partition or args.account:
        print("rosenna gpu-gate: note: --partition and --account only matter with --print-job", file=sys.stderr)
    config = gate.Config(model=args.model, points=args.points, out=args.out, host_fallback=args.host_fallback,
                         label=args.label, weights=args.weights)
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
    report = gate.run(config, progress=_say)
    print(f"{'PASS' if report['pass'] else 'FAIL'}: {args.out}/gate-report.md", flush=True)
    return 0 if report["pass"] else 1
