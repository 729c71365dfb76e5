"""Train the per-cell subgrid-viscosity closure of the compressible-flow example.

The closure maps the velocity differences across a cell, g = Delta * (du/dx, du/dy, dv/dx, dv/dy),
to f(g) = Cs^2 |S(g)|, where |S| = sqrt(2 (ux^2 + vy^2) + (uy + vx)^2) is the strain-rate magnitude
and Cs = 0.17; the solver takes nu_t = Delta * f(g) (Smagorinsky's model). Here the target is that
formula, standing in for a closure learned from filtered DNS data, so the example can check its
result against the formula it learned.

The net is a 4-32-32-1 ReLU MLP without biases. Such a net is positively homogeneous of degree one,
f(lambda g) = lambda f(g) for lambda > 0, as Smagorinsky's model is, so what it learns at one scale
holds at every scale, and f(0) = 0 exactly: a flow at rest gets no viscosity. Training takes a few
seconds on one core; writes sgs.onnx beside this file.

    python train_closure.py [--out sgs.onnx] [--steps 3000]
"""
import argparse
import pathlib
import warnings

import torch

CS = 0.17


def smagorinsky(g):
    """Cs^2 |S| from g = (ux, uy, vx, vy) (times Delta)."""
    ux, uy, vx, vy = g.unbind(dim=1)
    return (CS ** 2 * torch.sqrt(2 * (ux ** 2 + vy ** 2) + (uy + vx) ** 2)).unsqueeze(1)


def samples(n, gen):
    """Directions uniform on the sphere; radii 1 (the net is homogeneous, so scale is free)."""
    g = torch.randn(n, 4, generator=gen)
    return g / g.norm(dim=1, keepdim=True)


def main(argv=None):
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=here / "sgs.onnx")
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1)
    g, gv = samples(8192, gen), samples(4096, gen)
    f, fv = smagorinsky(g), smagorinsky(gv)

    net = torch.nn.Sequential(
        torch.nn.Linear(4, 32, bias=False), torch.nn.ReLU(),
        torch.nn.Linear(32, 32, bias=False), torch.nn.ReLU(),
        torch.nn.Linear(32, 1, bias=False), torch.nn.ReLU(),
    )
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    for _ in range(args.steps):
        idx = torch.randint(0, g.shape[0], (1024,), generator=gen)
        loss = torch.mean(((net(g[idx]) - f[idx]) / f[idx].clamp_min(1e-3)) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    net.eval()
    with torch.no_grad():
        rel = ((net(gv) - fv).abs() / fv).squeeze(1)
    print(f"validation: relative error of Cs^2|S| max {rel.max().item():.3e}, "
          f"mean {rel.mean().item():.3e}")

    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the TorchScript exporter's notice
    torch.onnx.export(net, (torch.zeros(1, 4),), str(args.out), input_names=["grad"],
                      output_names=["nu_over_delta"], dynamo=False, opset_version=17)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
