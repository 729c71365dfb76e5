"""PyTorch eager and torch.compile ns/point for the study's MLPs (fp32, TF32 off, CUDA events, median of 7)."""
import statistics, sys, time
import torch
from torch import nn

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
MODELS = {"mlp256": (16, [(256, nn.ReLU)] * 3 + [(8, None)]), "mlp512": (16, [(512, nn.ReLU)] * 2 + [(8, None)]),
          "silu": (5, [(64, nn.SiLU)] * 2 + [(3, None)]), "tanh96": (7, [(96, nn.Tanh)] * 4 + [(5, None)])}


def timed(fn, reps=7):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        s.record(); fn(); e.record(); e.synchronize(); t.append(s.elapsed_time(e))
    return statistics.median(t)


for name in sys.argv[1:]:
    nx, layers = MODELS[name]
    mods, w = [], nx
    for n, a in layers:
        mods.append(nn.Linear(w, n))
        if a:
            mods.append(a())
        w = n
    m = nn.Sequential(*mods).cuda().eval()
    n = 1 << 22
    x = torch.rand(n, nx, device="cuda") * 2 - 1
    with torch.inference_mode():
        eager = timed(lambda: m(x)) * 1e6 / n
        t0 = time.time()
        c = torch.compile(m)
        comp = timed(lambda: c(x)) * 1e6 / n
    print(f"torch {name} @4M: eager {eager:.4f} ns/pt, compile {comp:.4f} ns/pt (compile {time.time() - t0:.0f} s)", flush=True)
