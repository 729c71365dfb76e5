"""The polynomial of rosenna/data/rosenna_dtanh.cuh: near-minimax expm1(-2u) on |u| <= H (relative
error), p(u) = -2u + u^2 sum_{j=0}^{N-2} c_j u^j. The correction to Taylor's coefficients is fitted
in float64 (it is ~1e-14, so float64 is exact enough for it; Lawson-weighted least squares on
Chebyshev nodes); sums and errors in decimal at 60 digits (an exact reference, no mpmath).

    python3 bench/studies/f64-dmma/fit_dtanh.py 11 [range factor, 1.02]   # N=11: 3.8e-17 relative
"""
import math, sys
from decimal import Decimal, getcontext
import numpy as np
getcontext().prec = 60
N = int(sys.argv[1]); H = math.log(2) / 4 * float(sys.argv[2] if len(sys.argv) > 2 else 1.02)
def series(u, start):  # sum_{n>=start} (-2u)^n/n!
    v = -2 * Decimal(u); t = Decimal(1); tot = Decimal(0)
    for n in range(1, 70):
        t = t * v / n
        if n >= start: tot += t
    return tot
taylor = [Decimal((-2) ** n) / math.factorial(n) for n in range(2, N + 1)]
M = 3000
u = H * np.cos(np.pi * (np.arange(M) + 0.5) / M)
# residual r(u) = p(u) - (-2u + sum taylor u^n) = sum_{n>N} ...;  fit with correction poly u^2 sum e_j u^j
res = np.array([float(series(x, N + 1)) for x in u])
P = np.array([float(series(x, 1)) for x in u])
w = 1 / np.abs(P)
t = u / H
A = np.stack([t ** (j + 2) for j in range(N - 1)], 1) * w[:, None]
lw = np.ones(M)
for it in range(60):
    c, *_ = np.linalg.lstsq(A * np.sqrt(lw)[:, None], res * w * np.sqrt(lw), rcond=None)
    err = np.abs(A @ c - res * w); lw = lw * err; lw /= lw.sum()
coef = [float(taylor[j] + Decimal(c[j]) / Decimal(H) ** (j + 2)) for j in range(N - 1)]
cs = [Decimal(-2)] + [Decimal(v) for v in coef]
worst = 0
for x in np.linspace(-H, H, 2001):
    if x == 0: continue
    ux = Decimal(float(x)); q = Decimal(0)
    for d in reversed(cs): q = q * ux + d
    q = q * ux; ex = series(float(x), 1)
    worst = max(worst, abs(float((q - ex) / ex)))
print(f"N={N} H={H:.6f} exact max rel err of the rounded poly {worst:.3e}")
print("COEF " + ", ".join(repr(v) for v in coef))
