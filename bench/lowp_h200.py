"""``--precision bf16`` / ``fp16`` on the GPU: rosenna's 16-bit tensor-core chain against PyTorch.

Two models: mlp128 (rosenna.zoo, 16-128x3-8 ReLU) and a 5-64-64-3 SiLU MLP. Each is generated in
float32 (the FP32 / 3xTF32 kernels), bf16 and fp16, and the 16-bit ones also with the tuning
varied (``lowp_warps``, ``lowp_two_tiles_width``). On the GPU machine the generated kernel files
are built as shared libraries and loaded into the one Python process that also runs PyTorch: each
``<name>_infer_batch(n, x, y, stream)`` and each PyTorch model (eager in float32, bfloat16 and
float16, and ``torch.compile`` in bfloat16 and float16) is timed on the same device arrays with
CUDA events (median of the repeats after warm-up), interleaved round by round. Every result is
checked against the model in float64 on its first points: relative L2 error and largest error,
rosenna's against the tolerance verify uses (rosenna.compare.low_precision_tolerance, written
into the manifest here). Prints a Markdown table; the targets are mlp128 <= 0.25 ns per point and
the SiLU MLP <= 0.12.

    python bench/lowp_h200.py prepare [--out build/lowp]   # here: generate (needs rosenna)
    python3 bench/lowp_h200.py run [--out build/lowp]      # there: build with nvcc, time, check (torch)

bench/lowp_h200.sh runs both; docs/low-precision.md has the command and the results.
"""

import argparse
import concurrent.futures
import ctypes
import json
import os
import statistics
import subprocess
import sys

import numpy as np

OUT = "build/lowp"
POINTS = 1 << 24
CHECK = 4096
ARCH = os.environ.get("ARCH", "-arch=sm_90")
#: ns per point the issue asks of the bf16/fp16 kernels.
TARGETS = {"mlp128": 0.25, "silu": 0.12}
#: name -> (inputs, [(width, activation)]).
MODELS = {"mlp128": (16, [(128, "relu")] * 3 + [(8, None)]), "silu": (5, [(64, "silu"), (64, "silu"), (3, None)])}
#: The generated variants: (label, --precision or None, tuning overrides).
VARIANTS = (
    ("fp32", None, ()),
    ("bf16", "bf16", ()),
    ("bf16 warps=4", "bf16", ("lowp_warps=4",)),
    ("bf16 two tiles", "bf16", ("lowp_two_tiles_width=64",)),
    ("fp16", "fp16", ()),
    ("fp16 two tiles", "fp16", ("lowp_two_tiles_width=64",)),
)


# -- prepare (here) -------------------------------------------------------------------------------

def _silu_onnx(path, seed=0):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nx, layers = MODELS["silu"]
    nodes, inits, prev, k = [], [], "x", nx
    for i, (n, act) in enumerate(layers):
        inits += [numpy_helper.from_array((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}"], transB=1, name=f"fc{i}"))
        prev = f"g{i}"
        if act:
            nodes += [helper.make_node("Sigmoid", [prev], [f"s{i}"], name=f"sig{i}"),
                      helper.make_node("Mul", [prev, f"s{i}"], [f"a{i}"], name=f"silu{i}")]
            prev = f"a{i}"
        k = n
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", nx])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", k])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _layers(path):
    """Per Gemm: W [n][k] and b, float32, in order (what PyTorch's twin loads)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type == "Gemm":
            trans = next((a.i for a in node.attribute if a.name == "transB"), 0)
            w = inits[node.input[1]]
            out.append(((w if trans else w.T).astype(np.float32), inits[node.input[2]].astype(np.float32)))
    return out


def prepare(out):
    from rosenna import zoo
    from rosenna.compare import low_precision_tolerance
    from rosenna.generate import Options, generate
    from rosenna.strategy import Tuning, decide

    os.makedirs(out, exist_ok=True)
    manifest = {}
    for model in MODELS:
        path = os.path.join(out, f"{model}.onnx")
        zoo.save("mlp128", path) if model == "mlp128" else _silu_onnx(path)
        layers = _layers(path)
        np.savez(os.path.join(out, f"{model}_weights.npz"),
                 **{f"w{i}": w for i, (w, _) in enumerate(layers)}, **{f"b{i}": b for i, (_, b) in enumerate(layers)})
        entries = []
        for label, precision, tune in VARIANTS:
            name = f"{model}_{label.replace(' ', '_').replace('=', '')}"
            d = os.path.join(out, name)
            tuning = Tuning().parse_overrides(list(tune))
            plan, _ = generate(path, d, Options(lang="c", name=name, precision=precision, embed=True, tuning=tuning))
            chosen = decide(plan, tuning)
            kind = chosen.tensor.chosen or chosen.batched.chosen
            tol = None
            if precision:
                t, _ = low_precision_tolerance(precision, len(layers), max(w.shape[1] for w, _ in layers))
                tol = [t.rtol, t.atol]
            entries.append({"label": label, "name": name, "precision": precision, "nx": plan.nx, "ny": plan.ny,
                            "kind": kind, "tolerance": tol})
        manifest[model] = entries
        print(f"{model}: {len(entries)} variants generated in {out}", flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
    return 0


# -- run (on the GPU machine) ---------------------------------------------------------------------

def _build(out, name):
    """lib<name>.so: the host C file (-DROSENNA_NATIVE_KERNEL) and the kernel file (nvcc), shared."""
    d = os.path.join(out, name)
    so = os.path.join(d, f"lib{name}.so")
    steps = [["gcc", "-O3", "-fPIC", "-DROSENNA_NATIVE_KERNEL", "-I", d, "-c", os.path.join(d, f"{name}.c"),
              "-o", os.path.join(d, f"{name}.o")],
             ["nvcc", "-O3", *ARCH.split(), "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-I", d, "-c",
              os.path.join(d, f"{name}_kernel.cu"), "-o", os.path.join(d, f"{name}_kernel.o")],
             ["nvcc", "-shared", *ARCH.split(), os.path.join(d, f"{name}.o"), os.path.join(d, f"{name}_kernel.o"),
              "-o", so]]
    log = []
    for cmd in steps:
        run = subprocess.run(cmd, capture_output=True, text=True)
        log.append(run.stderr)
        if run.returncode:
            raise SystemExit(f"building {name} failed: {' '.join(cmd)}\n{run.stderr[-3000:]}")
    ptxas = "".join(log)
    regs = ""
    marker = f"Compiling entry function '_Z{len(name) + 10}{name}_tc_kernel"
    if marker in ptxas:
        tail = ptxas.split(marker, 1)[1]
        regs = tail.split("Used ", 1)[1].split(" registers")[0] if "Used " in tail else ""
    return so, regs


def _torch_mlp(model, weights, dtype):
    import torch
    from torch import nn

    nx, layers = MODELS[model]
    mods, k = [], nx
    for i, (n, act) in enumerate(layers):
        lin = nn.Linear(k, n)
        lin.weight.data = torch.from_numpy(weights[f"w{i}"]).clone()
        lin.bias.data = torch.from_numpy(weights[f"b{i}"]).clone()
        mods.append(lin)
        if act:
            mods.append(nn.ReLU() if act == "relu" else nn.SiLU())
        k = n
    return nn.Sequential(*mods).to(device="cuda", dtype=dtype).eval()


def _timer(fn, reps):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once():
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    return once


def _errors(got, exact):
    got = np.asarray(got, np.float64)
    return float(np.linalg.norm(got - exact) / np.linalg.norm(exact)), float(np.abs(got - exact).max())


def run(out, points, reps, rounds):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    names = [e["name"] for entries in manifest.values() for e in entries]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        built = dict(zip(names, pool.map(lambda name: _build(out, name), names)))
    device = torch.cuda.get_device_name()
    rows, failed = [], []
    for model, entries in manifest.items():
        weights = dict(np.load(os.path.join(out, f"{model}_weights.npz")))
        nx, ny = entries[0]["nx"], entries[0]["ny"]
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.rand((points, nx), device="cuda", generator=gen) * 2 - 1
        with torch.inference_mode():
            exact = _torch_mlp(model, weights, torch.float64)(x[:CHECK].double()).cpu().numpy()
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        timers, checks = {}, {}
        for e in entries:
            lib = ctypes.CDLL(built[e["name"]][0])
            fn = getattr(lib, f"{e['name']}_infer_batch")
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            y = torch.full((points, ny), float("nan"), device="cuda")
            call = (lambda f=fn, y=y: f(points, x.data_ptr(), y.data_ptr(), stream))
            if call() != 0:
                raise SystemExit(f"{e['name']}_infer_batch returned an error")
            torch.cuda.synchronize()
            timers[("rosenna", e["label"])] = _timer(call, reps)
            checks[("rosenna", e["label"])] = (y, e)
        for label, dtype in (("eager fp32", torch.float32), ("eager bf16", torch.bfloat16), ("eager fp16", torch.float16),
                             ("compile bf16", torch.bfloat16), ("compile fp16", torch.float16)):
            net = _torch_mlp(model, weights, dtype)
            if label.startswith("compile"):
                net = torch.compile(net)
            xt = x.to(dtype)
            holder = {}

            def call(net=net, xt=xt, holder=holder):
                with torch.inference_mode():
                    holder["y"] = net(xt)
            try:
                for _ in range(3):
                    call()
                torch.cuda.synchronize()
            except Exception as exc:  # torch.compile without a working Triton: say so, time the rest
                print(f"{model} PyTorch {label}: not timed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
                continue
            timers[("PyTorch", label)] = _timer(call, reps)
            checks[("PyTorch", label)] = (holder, None)
        times = {key: [] for key in timers}
        for _ in range(rounds):  # interleaved: every variant once per round
            for key, once in timers.items():
                times[key] += [once() for _ in range(reps)]
        for key, (res, e) in checks.items():
            got = (res["y"] if isinstance(res, dict) else res)[:CHECK].float().cpu().numpy()
            l2, worst = _errors(got, exact)
            ns = statistics.median(times[key]) * 1e6 / points
            status = ""
            if e is not None and e["tolerance"]:
                rtol, atol = e["tolerance"]
                ok = bool(np.all(np.abs(got - exact) <= atol * np.abs(exact).max() + rtol * np.abs(exact)))
                status = "pass" if ok else "FAIL"
                if not ok:
                    failed.append(f"{model} {e['label']}")
            elif e is not None:
                ok = bool(np.allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max()))
                status = "pass" if ok else "FAIL"
                if not ok:
                    failed.append(f"{model} {e['label']}")
            kind = (e["kind"] + (f", {built[e['name']][1]} registers" if built[e["name"]][1] else "")) if e else "-"
            rows.append((model, key[0], key[1], ns, l2, worst, status, kind))
    print(f"\n{device}, {points} points, median of {rounds} x {reps} interleaved calls (CUDA events); errors on the "
          f"first {CHECK} points against float64; x float32 for rosenna (its API), in the type for PyTorch\n")
    print("| model | code | variant | ns/point | rel. L2 error | max abs error | check | kernel |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- | --- |")
    for model, who, label, ns, l2, worst, status, kind in rows:
        print(f"| {model} | {who} | {label} | {ns:.4f} | {l2:.2e} | {worst:.2e} | {status or '-'} | {kind} |")
    print()
    for model, target in TARGETS.items():
        best = min((r for r in rows if r[0] == model and r[1] == "rosenna" and r[2] != "fp32"), key=lambda r: r[3])
        torch_best = min((r for r in rows if r[0] == model and r[1] == "PyTorch" and r[2] != "eager fp32"),
                         key=lambda r: r[3])
        print(f"{model}: best rosenna 16-bit {best[3]:.4f} ns/point ({best[2]}), target {target}: "
              f"{'met' if best[3] <= target else 'NOT met'}; best PyTorch 16-bit {torch_best[3]:.4f} ({torch_best[2]})")
        for precision in ("bf16", "fp16"):
            ours = [r for r in rows if r[0] == model and r[1] == "rosenna" and r[2] == precision]
            theirs = [r for r in rows if r[0] == model and r[1] == "PyTorch" and r[2] == f"eager {precision}"]
            if ours and theirs:
                better = ours[0][4] <= theirs[0][4]
                print(f"{model} {precision}: rosenna's relative L2 error {ours[0][4]:.2e}, PyTorch eager's {theirs[0][4]:.2e}"
                      f" ({'no more' if better else 'MORE'})")
                if not better:
                    failed.append(f"{model} {precision} error over PyTorch's")
    if failed:
        print("FAIL: " + ", ".join(failed))
        return 1
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=("prepare", "run"))
    p.add_argument("--out", default=OUT)
    p.add_argument("--points", type=int, default=POINTS)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    return prepare(args.out) if args.step == "prepare" else run(args.out, args.points, args.reps, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
