"""Train the reaction-rate surrogate of the advection-diffusion-reaction example.

The rate is a one-step Arrhenius law for a fuel mass fraction Y burning at temperature T,

    omega(Y, T) = A * Y * exp(-Ta / T),   A = 20, Ta = 6,

the same formula the solvers (adr.c, adr.F90) use for their reference run. A 2-32-32-1 tanh MLP
learns it on Y in [-0.05, 1.05] and T in [0.9, 4.1]; the solvers' states stay inside (T = 1 + 3 (1 - Y)
across the flame). Full-batch L-BFGS in double precision: about 6 s on one CPU core. Writes
adr_rate.onnx (float32) beside this file.

    python train_rate.py [--out adr_rate.onnx] [--iters 600]
"""
import argparse
import pathlib
import warnings

import torch

A, TA = 20.0, 6.0
Y_RANGE, T_RANGE = (-0.05, 1.05), (0.9, 4.1)


def rate(y, t):
    """The analytic rate, the reference the solvers compare against."""
    return A * y * torch.exp(-TA / t)


def samples(n, gen):
    y = Y_RANGE[0] + (Y_RANGE[1] - Y_RANGE[0]) * torch.rand(n, 1, generator=gen, dtype=torch.float64)
    t = T_RANGE[0] + (T_RANGE[1] - T_RANGE[0]) * torch.rand(n, 1, generator=gen, dtype=torch.float64)
    return torch.cat([y, t], dim=1), rate(y, t)


def main(argv=None):
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=here / "adr_rate.onnx")
    ap.add_argument("--iters", type=int, default=600)
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1)
    x, w = samples(4096, gen)
    xv, wv = samples(4096, gen)

    # Train on inputs centred and scaled to [-1, 1] and on the rate scaled to O(1); afterwards the
    # scalings are folded into the first and last layers, so the exported model takes (Y, T) and
    # returns omega in the solver's units.
    x_mid = torch.tensor([sum(Y_RANGE) / 2, sum(T_RANGE) / 2], dtype=torch.float64)
    x_half = torch.tensor([(Y_RANGE[1] - Y_RANGE[0]) / 2, (T_RANGE[1] - T_RANGE[0]) / 2],
                          dtype=torch.float64)
    w_scale = float(w.abs().max())
    z = (x - x_mid) / x_half

    net = torch.nn.Sequential(
        torch.nn.Linear(2, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 1),
    ).double()
    opt = torch.optim.LBFGS(net.parameters(), lr=1, max_iter=args.iters, history_size=50,
                            line_search_fn="strong_wolfe", tolerance_grad=0, tolerance_change=0)

    def closure():
        opt.zero_grad()
        loss = torch.mean((net(z) - w / w_scale) ** 2)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        first, last = net[0], net[-1]
        first.bias -= first.weight @ (x_mid / x_half)
        first.weight /= x_half
        last.weight *= w_scale
        last.bias *= w_scale
    net = net.float().eval()
    with torch.no_grad():
        err = (net(xv.float()).double() - wv).abs()
    print(f"validation (float32): max |error| {err.max().item():.3e}, mean {err.mean().item():.3e}, "
          f"max rate {wv.abs().max().item():.3f}")

    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the TorchScript exporter's notice
    torch.onnx.export(net, (torch.zeros(1, 2),), str(args.out), input_names=["state"],
                      output_names=["omega"], dynamo=False, opset_version=17)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
