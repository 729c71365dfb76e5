"""Train the conv net that gives the initial guess of the Poisson solve in poisson.c.

Problem: -lap(u) = f on the unit square, 64 x 64 interior nodes, u = 0 on the boundary, the
5-point Laplacian with h = 1/65. Right-hand sides: 1 to 4 Gaussian blobs (centres in [0.15, 0.85]^2,
widths 0.04 to 0.12, amplitudes in [-1, 1]), scaled to max |f| = 1; poisson.c scales its own f the
same way and the guess back (the equation is linear). Targets: the exact discrete solutions, by
the discrete sine transform (exact for this operator).

The net: six 3x3 convolutions with 8 channels and dilations 1, 2, 4, 8, 16, 1 (receptive field 65,
the whole field), tanh between them, zero padding (the Dirichlet boundary). About 2,900 weights;
training takes about a minute on one CPU core. Writes pguess.onnx beside this file.

    python train_guess.py [--out pguess.onnx] [--steps 600]
"""
import argparse
import math
import pathlib
import warnings

import numpy as np
import torch

N = 64
H = 1.0 / (N + 1)


def sine_basis():
    k = np.arange(1, N + 1)
    s = np.sin(np.pi * np.outer(k, k) / (N + 1))
    lam = (4.0 / H ** 2) * np.sin(np.pi * k / (2 * (N + 1))) ** 2   # eigenvalues of -d2/dx2
    return s, lam


def solve(f, s, lam):
    """Exact solution of the discrete -lap(u) = f, u = 0 on the boundary (f: [..., N, N], [j, i])."""
    fh = s @ f @ s * (2.0 / (N + 1)) ** 2
    uh = fh / (lam[:, None] + lam[None, :])
    return s @ uh @ s


def rhs(n, rng):
    x = (np.arange(1, N + 1) * H)[None, :]
    y = (np.arange(1, N + 1) * H)[:, None]
    out = np.zeros((n, N, N))
    for b in range(n):
        for _ in range(rng.integers(1, 5)):
            cx, cy = rng.uniform(0.15, 0.85, 2)
            w = rng.uniform(0.04, 0.12)
            out[b] += rng.uniform(-1, 1) * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * w * w))
        out[b] /= np.abs(out[b]).max()
    return out


class GuessNet(torch.nn.Module):
    def __init__(self, channels=8, dilations=(1, 2, 4, 8, 16, 1)):
        super().__init__()
        layers, c_in = [], 1
        for i, d in enumerate(dilations):
            c_out = 1 if i == len(dilations) - 1 else channels
            layers.append(torch.nn.Conv2d(c_in, c_out, 3, padding=d, dilation=d))
            if c_out != 1:
                layers.append(torch.nn.Tanh())
            c_in = c_out
        self.body = torch.nn.Sequential(*layers)

    def forward(self, f):
        return self.body(f)


def main(argv=None):
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=here / "pguess.onnx")
    ap.add_argument("--steps", type=int, default=600)
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    s, lam = sine_basis()
    f_train, f_val = rhs(512, rng), rhs(64, rng)
    u_train, u_val = solve(f_train, s, lam), solve(f_val, s, lam)
    u_scale = float(np.abs(u_train).max())     # the net learns u / u_scale, folded in at export
    f_t = torch.tensor(f_train, dtype=torch.float32).unsqueeze(1)
    u_t = torch.tensor(u_train / u_scale, dtype=torch.float32).unsqueeze(1)

    net = GuessNet()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    gen = torch.Generator().manual_seed(1)
    for _ in range(args.steps):
        idx = torch.randint(0, f_t.shape[0], (16,), generator=gen)
        loss = torch.mean((net(f_t[idx]) - u_t[idx]) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()

    with torch.no_grad():
        last = net.body[-1]
        last.weight *= u_scale
        last.bias *= u_scale
        guess = net(torch.tensor(f_val, dtype=torch.float32).unsqueeze(1)).squeeze(1).double().numpy()
    rel = np.linalg.norm((guess - u_val).reshape(64, -1), axis=1) / np.linalg.norm(u_val.reshape(64, -1), axis=1)
    print(f"validation: relative L2 error of the guess mean {rel.mean():.3f}, max {rel.max():.3f}")

    net.eval()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the TorchScript exporter's notice
    torch.onnx.export(net, (torch.zeros(1, 1, N, N),), str(args.out), input_names=["f"],
                      output_names=["u_guess"], dynamo=False, opset_version=17)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
