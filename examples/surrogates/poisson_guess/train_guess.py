"""Train the conv net that gives the initial guess of the Poisson solve in poisson.c.

Problem: -lap(u) = f on the unit square, 64 x 64 interior nodes, u = 0 on the boundary, the
5-point Laplacian with h = 1/65. Right-hand sides: 1 to 4 Gaussian blobs (centres in [0.15, 0.85]^2,
widths 0.04 to 0.12, amplitudes in [-1, 1]), scaled to max |f| = 1; poisson.c scales its own f the
same way and the guess back (the equation is linear). Targets: the exact discrete solutions, by
the discrete sine transform (exact for this operator).

The net: a linear U-Net (GuessNet below), 4,825 weights, trained on the relative energy norm of
its error, the A-norm that CG minimises. About a minute on one CPU core (800 steps; validation: 8 %
relative L2 error). It prints the CG iterations from zero and from its guess on validation cases:
about equal, because the guess's rough error leaves a residual as large as f's. Jacobi, slow on
smooth error, is where the guess pays (poisson.c). Writes pguess.onnx beside this file.

    python train_guess.py [--out pguess.onnx] [--steps 800]
"""
import argparse
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


def energy(v):
    """Sum over the batch of the discrete Dirichlet energy of v (u = 0 outside the field): the
    A-norm that CG minimises, so the net is trained for what CG needs from its start."""
    v = torch.nn.functional.pad(v, (1, 1, 1, 1))
    return ((v[..., 1:, :] - v[..., :-1, :]) ** 2).sum() + ((v[..., :, 1:] - v[..., :, :-1]) ** 2).sum()


def cg_iterations(f, u, tol=1e-8):
    """CG iterations on the 5-point -lap u = f from u, to ||r|| <= tol ||f|| (as poisson.c)."""
    def apply(p):
        q = 4 * p
        q[1:, :] -= p[:-1, :]
        q[:-1, :] -= p[1:, :]
        q[:, 1:] -= p[:, :-1]
        q[:, :-1] -= p[:, 1:]
        return q / H ** 2
    u = u.copy()
    r = f - apply(u)
    p, rr, stop, it = r.copy(), (r * r).sum(), tol * tol * (f * f).sum(), 0
    while rr > stop:
        q = apply(p)
        alpha = rr / (p * q).sum()
        u += alpha * p
        r -= alpha * q
        rr, rr_old = (r * r).sum(), rr
        p = r + (rr / rr_old) * p
        it += 1
    return it


def up2(x, c, h, w):
    """Nearest-neighbour 2x upsampling from Reshape and Concat alone (rank 4 throughout), so the
    export needs no Resize: duplicate every column, then every row."""
    x = torch.cat([x.reshape(1, c, h * w, 1)] * 2, dim=3).reshape(1, c, h, 2 * w)
    return torch.cat([x] * 2, dim=3).reshape(1, c, 2 * h, 2 * w)


class GuessNet(torch.nn.Module):
    """A linear U-Net (the Poisson solution operator is linear): 3x3 convolutions with 8 channels at
    64, 32, 16, 8 and 4 nodes a side, average pooling down, nearest upsampling and skip additions up;
    like one multigrid V-cycle with learned smoothers."""

    def __init__(self, c=8, levels=5):
        super().__init__()
        self.c, self.levels = c, levels
        self.down = torch.nn.ModuleList(
            [torch.nn.Conv2d(1 if k == 0 else c, c, 3, padding=1) for k in range(levels)])
        self.up = torch.nn.ModuleList([torch.nn.Conv2d(c, c, 3, padding=1) for _ in range(levels - 1)])
        self.out = torch.nn.Conv2d(c, 1, 3, padding=1)

    def forward(self, f):
        skips, x = [], f
        for k, conv in enumerate(self.down):
            if k > 0:
                x = torch.nn.functional.avg_pool2d(x, 2)
            x = conv(x)
            skips.append(x)
        for k in range(self.levels - 2, -1, -1):
            side = N >> (k + 1)
            x = self.up[k](up2(x, self.c, side, side) + skips[k])
        return self.out(x)


def main(argv=None):
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=here / "pguess.onnx")
    ap.add_argument("--steps", type=int, default=800)
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    s, lam = sine_basis()
    f_train, f_val = rhs(512, rng), rhs(64, rng)
    u_train, u_val = solve(f_train, s, lam), solve(f_val, s, lam)
    u_scale = float(np.abs(u_train).max())     # the net learns u / u_scale, folded in at export
    f_t = torch.tensor(f_train, dtype=torch.float32).unsqueeze(1)
    # up2 is written for one sample (the exported shape); training loops over the batch.
    u_t = torch.tensor(u_train / u_scale, dtype=torch.float32).unsqueeze(1)

    net = GuessNet()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    gen = torch.Generator().manual_seed(1)
    for _ in range(args.steps):
        idx = torch.randint(0, f_t.shape[0], (8,), generator=gen)
        pred = torch.cat([net(f_t[i:i + 1]) for i in idx])
        loss = energy(pred - u_t[idx]) / energy(u_t[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()

    with torch.no_grad():
        last = net.out
        last.weight *= u_scale
        last.bias *= u_scale
        fv = torch.tensor(f_val, dtype=torch.float32).unsqueeze(1)
        guess = torch.cat([net(fv[i:i + 1]) for i in range(len(fv))]).squeeze(1).double().numpy()
    rel = np.linalg.norm((guess - u_val).reshape(64, -1), axis=1) / np.linalg.norm(u_val.reshape(64, -1), axis=1)
    print(f"validation: relative L2 error of the guess mean {rel.mean():.3f}, max {rel.max():.3f}")
    zero = sum(cg_iterations(f_val[k], np.zeros((N, N))) for k in range(8))
    guessed = sum(cg_iterations(f_val[k], guess[k]) for k in range(8))
    print(f"CG iterations over 8 validation cases: from 0 {zero}, from the guess {guessed}")

    net.eval()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the TorchScript exporter's notice
    torch.onnx.export(net, (torch.zeros(1, 1, N, N),), str(args.out), input_names=["f"],
                      output_names=["u_guess"], dynamo=False, opset_version=17)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
