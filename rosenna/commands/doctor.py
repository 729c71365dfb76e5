"""`rosenna doctor`: what this machine has for building and checking generated code, and what
provides each missing piece (a thin shell over :mod:`rosenna.toolchain.doctor`)."""

import json

from rosenna.toolchain import doctor


def register(subparsers):
    p = subparsers.add_parser(
        "doctor", help="check the compilers, offload runtimes and GPUs here; say what provides a missing one",
        description="Check what this machine has for rosenna: host compilers and build tools, GCC's offload "
                    "compilers and libgomp plugins (nvptx, amdgcn), clang's libomptarget, the NVIDIA HPC SDK, "
                    "CUDA, ROCm and oneAPI compilers, the GPUs, and onnxruntime. Each missing piece is named "
                    "with the Debian/Ubuntu package or SDK that provides it. Changes nothing; exit 0.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-gpu", action="store_true", help="do not look for GPUs (nvidia-smi and the like)")
    p.set_defaults(func=run)


def run(args):
    checks = doctor.run_all(gpu=not args.no_gpu)
    if args.json:
        print(json.dumps([c.to_dict() for c in checks], indent=2))
        return 0
    width = max(len(c.area) for c in checks)
    for c in checks:
        print(f"{c.status:<8} {c.area:<{width}}  {c.detail}")
        if c.fix:
            print(f"{'':<8} {'':<{width}}  -> {c.fix}")
    return 0
