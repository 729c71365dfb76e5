"""The GPU frontier in one H200 call: rosenna's native <name>_infer_batch
against PyTorch eager and torch.compile on the same weights, fp32 with TF32 off, CUDA events,
median of the repeats.

    .venv/bin/python bench/frontier.py build      # here: generate, build into build/frontier
    python3 bench/frontier.py run [--budget 300]  # on the GPU machine, from the repository root

``build`` needs rosenna (this checkout), torch (CPU is enough: it exports the SiLU, GELU, Tanh
and depthwise models with torch's legacy exporter at opset 17, as users do), nvcc and gcc; it
writes build/frontier (generated sources, weights, the driver binaries; carry it, ~40 MB: the
256- and 512-wide MLPs' drivers are 5-8 MB, their sources are removed after the build).
``run`` needs only torch with CUDA, nvcc and make (it rebuilds a binary that does not start) and
prints one table:

- MLPs at 16,777,216 points, ns per point: 5-64-64-3 SiLU, GELU (erf), Mish and Tanh, 7-96x4-5 Tanh,
  gemm_big, mlp128, 16-256x3-8 and 16-512x2-8 (ReLU); PyTorch eager and ``torch.compile``
  (default mode); and in float64 (:data:`F64`: the FP64 tensor-core chain against PyTorch in
  float64) the 4-32-32-2 Tanh MLP (bench/gen_bench.sh's weights) and mlp128;
- whole-field conv nets at 1, 16 and 256 samples, microseconds per call: the examples' Poisson
  U-Net (poisson_guess, 8 channels, 5 levels, 64x64) and a depthwise-separable net (2 -> 24
  channels, 16x16); PyTorch eager (cuDNN) and ``torch.compile(mode="reduce-overhead")`` (CUDA
  graphs).

Every rosenna result is checked against PyTorch in float64 on the first points (samples) it
computed: the column "outside tol" counts outputs outside verify's tolerance for the model's type
(rosenna/compare.py's rule and TOLERANCE: |got - want| <= atol + rtol |want|). The driver bench/frontier.cu
times as every bench driver does (bench/rosenna_bench.cuh). ``--budget`` bounds the seconds spent before torch.compile
measurements are skipped (they compile first: ~10-30 s each).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

OUT = os.environ.get("FRONTIER_OUT", os.path.join("build", "frontier"))  # bench/h200.sh table runs a slim copy
#: SASS only (no PTX copy of the embedded weights): the 512-wide MLP's driver is 11 MB with PTX.
ARCH = os.environ.get("ARCH", "-gencode=arch=compute_90,code=sm_90")
MLP_POINTS = 1 << 24
#: Generated sources larger than this are removed once the driver is built (see compile_model).
SOURCE_CARRY_LIMIT = 4 << 20
FIELD_BATCHES = (1, 16, 256)

#: name -> (inputs, [(width, activation)]), activation one of ACTIVATIONS or None.
MLPS = {
    "silu": (5, [(64, "silu"), (64, "silu"), (3, None)]),
    "gelu": (5, [(64, "gelu"), (64, "gelu"), (3, None)]),
    "tanh96": (7, [(96, "tanh")] * 4 + [(5, None)]),
    "gemm_big": (2, [(20, "relu"), (30, "sigmoid"), (30, "relu"), (40, "tanh"), (1, "sigmoid")]),
    "mlp128": (16, [(128, "relu")] * 3 + [(8, None)]),
    "mish": (5, [(64, "mish"), (64, "mish"), (3, None)]),
    "tanh64": (5, [(64, "tanh"), (64, "tanh"), (3, None)]),
    "mlp256": (16, [(256, "relu")] * 3 + [(8, None)]),
    "mlp512": (16, [(512, "relu")] * 2 + [(8, None)]),
    "d4_f64": (4, [(32, "tanh"), (32, "tanh"), (2, None)]),
    "mlp128_f64": (16, [(128, "relu")] * 3 + [(8, None)]),
}
#: The float64 models (generated, run and compared in float64; PyTorch in float64, TF32 moot).
F64 = {"d4_f64", "mlp128_f64"}
FIELDS = ("unet", "dwsep")


# -- the PyTorch models (torch only: this part runs on the GPU machine) ---------------------------

def _torch_mlp(nx, layers):
    from torch import nn

    acts = {"silu": nn.SiLU, "gelu": nn.GELU, "tanh": nn.Tanh, "relu": nn.ReLU, "sigmoid": nn.Sigmoid, "mish": nn.Mish}
    mods, width = [], nx
    for out, act in layers:
        mods.append(nn.Linear(width, out))
        if act:
            mods.append(acts[act]())
        width = out
    return nn.Sequential(*mods)


def _torch_unet():
    import torch
    from torch import nn

    class GuessNet(nn.Module):
        """examples/surrogates/poisson_guess's U-Net for any batch (nearest 2x upsampling by
        repeat_interleave, which is what the example's Reshape/Concat form computes)."""

        def __init__(self, c=8, levels=5):
            super().__init__()
            self.levels = levels
            self.down = nn.ModuleList([nn.Conv2d(1 if k == 0 else c, c, 3, padding=1) for k in range(levels)])
            self.up = nn.ModuleList([nn.Conv2d(c, c, 3, padding=1) for _ in range(levels - 1)])
            self.out = nn.Conv2d(c, 1, 3, padding=1)

        def forward(self, f):
            skips, x = [], f
            for k, conv in enumerate(self.down):
                if k > 0:
                    x = torch.nn.functional.avg_pool2d(x, 2)
                x = conv(x)
                skips.append(x)
            for k in range(self.levels - 2, -1, -1):
                x = self.up[k](x.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3) + skips[k])
            return self.out(x)

    return GuessNet()


def _torch_dwsep():
    from torch import nn

    c = 24
    return nn.Sequential(
        nn.Conv2d(2, c, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1, groups=c), nn.Conv2d(c, c, 1), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1, groups=c), nn.Conv2d(c, c, 1), nn.ReLU(),
        nn.Conv2d(c, 2, 1))


FIELD_SHAPES = {"unet": (1, 64, 64), "dwsep": (2, 16, 16)}


def torch_model(name):
    if name in MLPS:
        return _torch_mlp(*MLPS[name])
    return {"unet": _torch_unet, "dwsep": _torch_dwsep}[name]()


# -- build (here) -------------------------------------------------------------------------------

def _export(module, shape, path):
    import warnings

    import torch

    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(shape),), path, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])


def _state_from_onnx(model, path):
    """Load an ONNX model's initializers into the PyTorch twin (MLPs: the Gemm layers in order)."""
    import onnx
    import torch
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    state = model.state_dict()
    if set(state) <= set(inits):  # the same names (the U-Net was exported from the same module)
        return {k: torch.from_numpy(inits[k].copy()) for k in state}
    gemms = [n for n in onnx.load(path).graph.node if n.op_type == "Gemm"]
    keys = [k for k in state if k.endswith(".weight")]
    out = {}
    for key, node in zip(keys, gemms):
        out[key] = torch.from_numpy(inits[node.input[1]].copy())
        out[key[:-len("weight")] + "bias"] = torch.from_numpy(inits[node.input[2]].copy())
    return out


def compile_model(d, name, nx, ny, real="float"):
    """Build lib<name>.a with the CUDA backend and the frontier driver (``real``: its element type) against it."""
    mk = os.path.join(d, f"{name}.mk")
    lib = subprocess.run(["make", "-s", "-f", mk, "ROSENNA_BACKEND=cuda", "CC=gcc", "ROSENNA_OFFLOAD_FLAGS=",
                          f"DEVFLAGS=-O3 {ARCH} -Xptxas -v", os.path.join(d, f"lib{name}.a")],
                         capture_output=True, text=True)
    with open(os.path.join(d, "ptxas.txt"), "w") as fh:
        fh.write(lib.stderr)
    if lib.returncode:
        raise SystemExit(f"building lib{name}.a failed:\n{lib.stderr[-3000:]}")
    drv = subprocess.run(["nvcc", "-O3", ARCH, f"-DREAL={real}", f"-DNAME={name}", f'-DHDR="{name}.h"', f"-DFRONTIER_NX={nx}",
                          f"-DFRONTIER_NY={ny}", "-I", d, os.path.join("bench", "frontier.cu"),
                          os.path.join(d, f"lib{name}.a"), "-o", os.path.join(d, "frontier")],
                         capture_output=True, text=True)
    if drv.returncode:
        raise SystemExit(f"nvcc failed for {name}:\n{drv.stderr[-3000:]}")
    for obj in (f"{name}.o", f"{name}_kernel.o", f"lib{name}.a"):  # make rebuilds them from the sources
        if os.path.exists(os.path.join(d, obj)):
            os.remove(os.path.join(d, obj))
    # The 256- and 512-wide MLPs' embedded-weight sources are 14-18 MB: not carried (the H200 call
    # carries at most 64 MB); their drivers cannot be rebuilt there.
    for src in (f"{name}.c", f"{name}_kernel.cu"):
        path = os.path.join(d, src)
        if os.path.getsize(path) > SOURCE_CARRY_LIMIT:
            os.remove(path)


def build(args):
    import torch

    from rosenna import zoo
    from rosenna.generate import Options, generate

    os.makedirs(OUT, exist_ok=True)
    manifest, names = {}, list(MLPS) + list(FIELDS)
    if args.only:  # rebuild these, keep the rest of an earlier build
        names = args.only.split(",")
        unknown = [name for name in names if name not in MLPS and name not in FIELDS]
        if unknown:
            raise SystemExit(f"--only {','.join(unknown)}: not a frontier model; choose from {', '.join(list(MLPS) + list(FIELDS))}")
        if os.path.exists(os.path.join(OUT, "manifest.json")):
            manifest = json.load(open(os.path.join(OUT, "manifest.json")))
    for name in names:
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{name}.onnx")
        torch.manual_seed(0)
        model = torch_model(name)
        if name in ("gemm_big", "mlp128"):
            zoo.save(name, path)
            model.load_state_dict(_state_from_onnx(model, path))
        elif name in F64:
            import numpy as np
            import onnx
            if name == "d4_f64":
                onnx.save(zoo.mlp("d4", [4, 32, 32, 2], ["Tanh", "Tanh", None], np.float64, seed=4), path)
            else:
                zoo.save("mlp128", path, np.float64)
            model.double().load_state_dict(_state_from_onnx(model, path))
        elif name == "unet":
            src = os.path.join("examples", "surrogates", "poisson_guess", "pguess.onnx")
            with open(src, "rb") as fh, open(path, "wb") as out:
                out.write(fh.read())
            model.load_state_dict(_state_from_onnx(model, path))
        else:
            shape = (1, MLPS[name][0]) if name in MLPS else (1, *FIELD_SHAPES[name])
            _export(model, shape, path)
        plan, _ = generate(path, d, Options(name=name, lang="c", embed=True))
        _check_twin(name, model, path, plan)
        tensors, offset = [], 0
        with open(os.path.join(d, "weights.bin"), "wb") as fh:
            for key, value in model.state_dict().items():
                data = value.detach().contiguous().numpy().tobytes()  # the model's own type
                fh.write(data)
                tensors.append([key, list(value.shape), offset])
                offset += len(data)
        with open(os.path.join(d, f"{name}_kernel.cu")) as fh:  # its header names the batched kernel's kind
            kind = next((line.split("Batched kernel: ")[1].strip() for line in fh
                         if "Batched kernel: " in line), "-")
        manifest[name] = {"nx": plan.nx, "ny": plan.ny, "tensors": tensors, "path": plan.path, "kind": kind,
                          "real": _real(name)}
        compile_model(d, name, plan.nx, plan.ny, _real(name))
        print(f"{name}: {plan.parameters} parameters, {plan.path} plan, built", flush=True)
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
    for name, info in manifest.items():  # the batched kernels' registers and spills
        lines = open(os.path.join(OUT, name, "ptxas.txt")).read().splitlines()
        kernels = []
        for i, line in enumerate(lines):
            wanted = ("_field", "_phase", "_cluster") if info["path"] == "whole" else ("_kernel",)
            if "Compiling entry function" in line and any(w in line for w in wanted):
                stats = " ".join(lines[i + 1:i + 4])
                regs = stats.split("Used ")[1].split(" registers")[0] if "Used " in stats else "?"
                spill = stats.split(" bytes spill stores")[0].rsplit(" ", 1)[-1] if "spill stores" in stats else "?"
                kernels.append(f"{line.split(chr(39))[1]} {regs} registers, {spill} B spilled")
        print(f"{name}: {len(kernels)} kernels: " + ("; ".join(kernels) if len(kernels) < 4 else
                                                      f"{kernels[0]}; ... {kernels[-1]}"))
    return 0


def _real(name):
    return "double" if name in F64 else "float"


def _torch_dtype(info):
    import torch

    return torch.float64 if info.get("real") == "double" else torch.float32


def _check_twin(name, model, path, plan):
    """The PyTorch twin computes what the ONNX file does (onnxruntime, CPU), so that the GPU
    comparison checks rosenna and not the twin."""
    import numpy as np
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    batch = 64 if isinstance(inp.shape[0], str) else inp.shape[0]  # exports fix batch 1
    shape = (batch, plan.nx) if name in MLPS else (batch, *FIELD_SHAPES[name])
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float64 if name in F64 else np.float32)
    want = sess.run(None, {inp.name: x})[0]
    with torch.no_grad():
        got = model.eval()(torch.from_numpy(x)).numpy()
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    if err > (1e-12 if name in F64 else 1e-5):
        raise SystemExit(f"{name}: the PyTorch twin differs from the ONNX model (relative {err:.1e})")


# -- run (on the GPU machine) ---------------------------------------------------------------------

def _load(name, info):
    import torch

    dtype = _torch_dtype(info)
    model = torch_model(name).to(dtype)
    raw = open(os.path.join(OUT, name, "weights.bin"), "rb").read()
    state = {}
    size = torch.tensor([], dtype=dtype).element_size()
    for key, shape, offset in info["tensors"]:
        count = 1
        for s in shape:
            count *= s
        state[key] = torch.frombuffer(bytearray(raw[offset:offset + size * count]), dtype=dtype).reshape(shape)
    model.load_state_dict(state)
    return model.eval()


def _events(fn, reps):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _rosenna(name, info, sizes, reps):
    """{n: median ms} from the driver, and the outputs it dumped: (x, y) tensors."""
    import torch

    d = os.path.join(OUT, name)
    exe, dump = os.path.join(d, "frontier"), os.path.join(d, "dump.bin")
    cmd = [exe, ",".join(str(n) for n in sizes), str(reps), dump]
    if not os.access(exe, os.X_OK):
        compile_model(d, name, info["nx"], info["ny"], info.get("real", "float"))
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode and "cuda" in (run.stderr or "").lower():  # built against another CUDA: rebuild here
        print(f"{name}: {run.stderr.strip()[-200:]}; rebuilding", flush=True)
        compile_model(d, name, info["nx"], info["ny"], info.get("real", "float"))
        run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"{name}: {run.stderr.strip()[-500:]}")
    times = {}
    for line in run.stdout.splitlines():
        parts = line.split()
        times[int(parts[1])] = float(parts[3])
    k = min(sizes[0], 4096)
    raw = torch.frombuffer(bytearray(open(dump, "rb").read()), dtype=_torch_dtype(info))
    return times, raw[:k * info["nx"]].reshape(k, info["nx"]), raw[k * info["nx"]:].reshape(k, info["ny"])


class _CpuEvent:
    """torch.cuda.Event's timing interface on the CPU (--dry-run)."""

    def __init__(self, enable_timing=True):
        self.t = 0.0

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def _outside(got, want, f64=False):
    """Outputs outside verify's tolerance (float32's, or float64's with ``f64``), and the relative L2 error."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # rosenna (numpy only here)
    from rosenna.compare import compare

    want = want.double()
    bad = compare(got.double().numpy(), want.numpy(), "float64" if f64 else "float32").mismatches
    return int(bad), float(((got.double() - want).norm() / want.norm().clamp_min(1e-300)).item())


def _stand_in(name, info, sizes, model):
    """--dry-run: the driver's output computed by the PyTorch twin on the CPU (to exercise this
    script where there is no GPU); times are zero."""
    import torch

    k = min(sizes[0], 4096)
    shape = (k, info["nx"]) if name in MLPS else (k, *FIELD_SHAPES[name])
    x = torch.rand(shape, dtype=_torch_dtype(info)) * 2 - 1
    with torch.no_grad():
        y = model(x).reshape(k, info["ny"])
    return {n: 1.0 for n in sizes}, x.reshape(k, info["nx"]), y


def run(args):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cpu" if args.dry_run else "cuda")
    if args.dry_run:
        torch.cuda.Event = _CpuEvent
    manifest = json.load(open(os.path.join(OUT, "manifest.json")))
    t0 = time.time()
    print(f"torch {torch.__version__}, {'CPU (dry run)' if args.dry_run else torch.cuda.get_device_name(0)}, TF32 off, fp32 (the _f64 rows fp64); "
          f"median of {args.reps} (MLPs) / {args.field_reps} (fields) CUDA-event timings", flush=True)
    rows = []
    with torch.inference_mode():
        for name, info in manifest.items():
            mlp = name in MLPS
            sizes = [args.points] if mlp else list(FIELD_BATCHES)
            try:
                if args.dry_run:
                    times, x, y = _stand_in(name, info, sizes, _load(name, info))
                else:
                    times, x, y = _rosenna(name, info, sizes, args.reps if mlp else args.field_reps)
            except RuntimeError as exc:
                print(f"{name}: rosenna failed: {exc}", flush=True)
                continue
            model = _load(name, info).to(dev)
            dtype = _torch_dtype(info)
            shape = (-1, info["nx"]) if mlp else (-1, *FIELD_SHAPES[name])
            ref = model.double()(x.to(dev).double().reshape(shape)).reshape(y.shape).cpu()
            model.to(dtype)
            bad, rel = _outside(y, ref, name in F64)
            compiled = None
            for n in sizes:
                xs = torch.rand((n, info["nx"]) if mlp else (n, *FIELD_SHAPES[name]), device=dev, dtype=dtype) * 2 - 1
                eager = _events(lambda: model(xs), args.reps if mlp else args.field_reps)
                comp = None
                if time.time() - t0 < args.budget:
                    try:
                        if mlp:
                            compiled = compiled or torch.compile(model)
                            fn = compiled
                        else:  # CUDA graphs: one compile per batch size
                            fn = torch.compile(model, mode="reduce-overhead", dynamic=False)
                        comp = _events(lambda: fn(xs), args.reps if mlp else args.field_reps)
                    except Exception as exc:  # noqa: BLE001 (a missing compiler must not end the run)
                        print(f"{name} n={n}: torch.compile failed: {type(exc).__name__}: {exc}"[:300], flush=True)
                unit = 1e6 / n if mlp else 1e3  # ns per point, or us per call
                rows.append((name, n, times[n] * unit, eager * unit, comp * unit if comp else None,
                             "ns/pt" if mlp else "us/call", bad, y.numel(), rel))
                print("  " + _row(rows[-1]), flush=True)
                del xs
            del model
            torch.cuda.empty_cache()
    print()
    print(f"| model | batch | unit | rosenna | torch eager | torch.compile | rosenna vs eager | outside tol | rel L2 |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(_row(row))
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


def _row(row):
    name, n, ours, eager, comp, unit, bad, total, rel = row
    comp_text = f"{comp:.4g}" if comp is not None else "skipped"
    return (f"| {name} | {n} | {unit} | {ours:.4g} | {eager:.4g} | {comp_text} | {eager / ours:.2f}x | "
            f"{bad} of {total} | {rel:.1e} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "run"])
    ap.add_argument("--only", help="build: only these models (comma-separated), keeping the others built before")
    ap.add_argument("--points", type=int, default=MLP_POINTS)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--field-reps", type=int, default=21)
    ap.add_argument("--budget", type=float, default=300.0, help="seconds after which torch.compile is skipped")
    ap.add_argument("--dry-run", action="store_true",
                    help="run: no GPU; the PyTorch twins on the CPU stand in for rosenna (tests this script)")
    args = ap.parse_args(argv)
    return build(args) if args.step == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
