"""`rosenna zoo`: write one of the built-in example models (gemm_small, gemm_big, mlp128)."""

import numpy as np

from rosenna import zoo
from rosenna.errors import UsageError


def register(subparsers):
    p = subparsers.add_parser("zoo", help="write a built-in example model",
                              description="Write a built-in example ONNX model: " + ", ".join(zoo.MODELS))
    p.add_argument("model", choices=sorted(zoo.MODELS))
    p.add_argument("-o", "--out", metavar="FILE.onnx", help="output file (default: MODEL.onnx)")
    p.add_argument("--double", action="store_true", help="float64 weights and inputs")
    p.set_defaults(func=run)


def run(args):
    path = args.out or f"{args.model}.onnx"
    try:
        zoo.save(args.model, path, np.float64 if args.double else np.float32)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write ({exc.strerror})") from None
    print(path)
    return 0
