"""PyTorch eager baseline for the H200 benchmark: the same three MLPs in fp32 and two in float64
(4-32-32-2 Tanh and mlp128, the generated FP64 tensor-core kernels' models), same layout.

Times ``model(x)`` for x of shape [n, nx] (point-major, as rosenna's x[n][nx]) with CUDA events,
median of repeats after warm-up, TF32 off, under ``torch.inference_mode``. Prints one line per
model and size, and appends CSV rows when --csv is given.

    python3 bench/torch_baseline.py [--sizes 1048576 16777216] [--csv out.csv]
"""

import argparse
import statistics

import torch
from torch import nn

MODELS = {
    # name: (nx, layers as (width, activation)), activation None = identity
    "gemm_small": (2, [(2, nn.ReLU), (3, nn.ReLU)]),
    "gemm_big": (2, [(20, nn.ReLU), (30, nn.Sigmoid), (30, nn.ReLU), (40, nn.Tanh), (1, nn.Sigmoid)]),
    "mlp128": (16, [(128, nn.ReLU), (128, nn.ReLU), (128, nn.ReLU), (8, None)]),
}
#: Measured in float64 (TF32 does not apply).
MODELS_F64 = {
    "d4": (4, [(32, nn.Tanh), (32, nn.Tanh), (2, None)]),
    "dmlp128": MODELS["mlp128"],
}


def build(nx, layers):
    mods, width = [], nx
    for out, act in layers:
        mods.append(nn.Linear(width, out))
        if act is not None:
            mods.append(act())
        width = out
    return nn.Sequential(*mods)


def flops_per_point(nx, layers):
    total, width = 0, nx
    for out, _ in layers:
        total += 2 * width * out
        width = out
    return total


def time_model(model, x, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        model(x)
    times = []
    for _ in range(reps):
        start.record()
        model(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 1 << 24])
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--csv")
    args = parser.parse_args(argv)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"allow_tf32={torch.backends.cuda.matmul.allow_tf32}")
    rows = []
    with torch.inference_mode():
        for name, (nx, layers), dtype in ([(k, v, torch.float32) for k, v in MODELS.items()]
                                          + [(k, v, torch.float64) for k, v in MODELS_F64.items()]):
            kind = "fp32" if dtype == torch.float32 else "fp64"
            model = build(nx, layers).to(dev).to(dtype).eval()
            # Correctness against float64 on a sample, so that a fast wrong baseline cannot pass
            # (for a float64 model: against the same model on the CPU).
            xs = torch.rand(4096, nx, device=dev, dtype=dtype) * 2 - 1
            if dtype == torch.float32:
                ref = model.double()(xs.double())
                model.float()
            else:
                ref = model.cpu()(xs.cpu()).to(dev)
                model.to(dev)
            err = ((model(xs).double() - ref.double()).norm() / ref.double().norm()).item()
            limit = 1e-5 if dtype == torch.float32 else 1e-12
            fpp = flops_per_point(nx, layers)
            for n in args.sizes:
                x = torch.rand(n, nx, device=dev, dtype=dtype) * 2 - 1
                med, lo, hi = time_model(model, x, args.reps)
                nspp = med * 1e6 / n
                tflops = fpp * n / (med * 1e-3) / 1e12
                print(f"{name:<10} torch eager {kind}   {n:9d}  {nspp:8.4f} ns/pt  "
                      f"[{lo * 1e6 / n:7.4f}..{hi * 1e6 / n:7.4f}]  {tflops:6.2f} TFLOP/s  err {err:.1e}")
                rows.append(f"{name},torch eager {kind},-,0,{n},{nspp:.5f},{lo * 1e6 / n:.5f},"
                            f"{hi * 1e6 / n:.5f},{tflops:.3f},{err:.2e},{'ok' if err < limit else 'FAIL'}")
                del x
                torch.cuda.empty_cache()
    if args.csv:
        with open(args.csv, "a") as f:
            f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
