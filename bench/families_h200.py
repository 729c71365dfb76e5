"""The model families' GPU figures in one call: a 2-D Fourier neural operator per sample against PyTorch
(eager and torch.compile, cuFFT), and tree ensembles per point against onnxruntime on the CPU and
hummingbird's two tensor forms in PyTorch on the GPU. fp32, TF32 off, CUDA events, median of the
repeats; every result is checked before it is timed.

    .venv/bin/python bench/families_h200.py build     # here: generate, build into build/families
    python3 bench/families_h200.py run                # on the GPU machine, from the repository root

``build`` needs rosenna (this checkout), torch (CPU is enough), scikit-learn, skl2onnx,
onnxruntime, nvcc and gcc. It writes build/families (carry it): for each model the generated
sources and weights file (``<name>.rwt``), and bench/frontier.cu (with -DFILE_WEIGHTS for a file-loaded model) linked against
``lib<name>.a`` built with ``ROSENNA_BACKEND=cuda`` (``driver``; the objects are removed); the digest
of the FNO's PyTorch weights, which the run draws again from the build's seed (with
``FAMILIES_TORCH_WEIGHTS=1`` the weights too, ``fno.pt``, 9.5 MB; the FNO's folder is 14 MB
without); each ensemble's ONNX file and its trees as
arrays (``trees.npz``). Before writing anything it checks the PyTorch FNO against onnxruntime on the
exported ONNX file, and the trees read from the ONNX file (the arrays every torch form uses)
against onnxruntime.

``run`` needs torch with CUDA, and nvcc and make only if a driver must be rebuilt; onnxruntime
(CPU) is timed where it is installed (its column says so otherwise). It prints two Markdown tables:

- FNO: 3 input channels (a field and two coordinates) on 64 x 64, lifted to 32 channels, 4 Fourier
  layers of 12 x 12 modes (both corner blocks) plus a 1x1 convolution each, GELU, projection
  32 -> 128 -> 1; rfft2/irfft2 in PyTorch (cuFFT), 16 DFT nodes in the ONNX file (dynamo exporter),
  in rosenna's whole-field CUDA kernel cut to the kept modes (rosenna.passes.dft_truncate) and
  computed as direct sums, every phase a parallel loop nest. Microseconds per sample at 1, 16
  and 64 samples per call: rosenna ``<name>_infer_batch``, PyTorch eager, ``torch.compile``
  (default mode; at 1 sample also "reduce-overhead", CUDA graphs, where that is faster: named;
  skipped once ``--budget`` seconds have passed). Checked: rosenna's first samples
  against PyTorch in float64 (max abs error, outside rtol 1e-4 + atol 1e-5: the DFT tests' rule).
- Trees: a random forest (100 trees, depth 8), gradient boosting (300 trees, depth 8) and a deep
  forest (100 trees, depth 12), scikit-learn on 8 features, skl2onnx. Nanoseconds per point at
  1,048,576 points: rosenna ``<name>_infer_batch`` (one thread per point, each tree walked for
  exactly its depth), hummingbird's tree-traversal form (a gather per level over [points, trees]
  in PyTorch) and its GEMM form (split outcomes by one batched matrix product, the leaf by a second,
  padded to the largest tree; where its matrices stay under GEMM_LIMIT elements), and
  onnxruntime's CPU kernel (all cores of the machine). Checked: every form's sums against the
  trees walked in numpy (float32 compares, float64 sums) on the first 4096 points.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from frontier import _events  # the same CUDA-event timing as the kernel frontier (3 warm-ups, median)

OUT = os.environ.get("FAMILIES_OUT", os.path.join("build", "families"))
ARCH = os.environ.get("ARCH", "-gencode=arch=compute_90,code=sm_90")
FNO_BATCHES = (1, 16, 64)
TREE_POINTS = 1 << 20
CHECK_POINTS = 4096
#: name -> (kind, trees, depth)
ENSEMBLES = {"forest100_d8": ("forest", 100, 8), "boost300_d8": ("boosting", 300, 8),
             "forest100_d12": ("forest", 100, 12)}
#: The GEMM form is timed where trees * splits * leaves (its path matrices) is at most this.
GEMM_LIMIT = 1 << 26
FNO = {"channels": 32, "modes": 12, "layers": 4, "size": 64, "inputs": 3}


# -- the PyTorch FNO (torch only: this part runs on the GPU machine too) --------------------------

def torch_fno(channels=32, modes=12, layers=4, size=64, inputs=3):
    import torch
    from torch import nn

    class Spectral(nn.Module):
        """rfft2, the two corner blocks of modes x modes times complex weights (in real arithmetic,
        which the exporter writes as MatMul/Einsum), irfft2."""

        def __init__(self):
            super().__init__()
            scale = 1.0 / (channels * channels)
            self.w = nn.Parameter(scale * torch.randn(2, 2, channels, channels, modes, modes))  # block, re/im

        def forward(self, x):
            f = torch.view_as_real(torch.fft.rfft2(x))
            blocks = []
            for b, rows in enumerate((f[:, :, :modes, :modes], f[:, :, -modes:, :modes])):
                xr, xi = rows[..., 0], rows[..., 1]
                wr, wi = self.w[b, 0], self.w[b, 1]
                yr = torch.einsum("bixy,ioxy->boxy", xr, wr) - torch.einsum("bixy,ioxy->boxy", xi, wi)
                yi = torch.einsum("bixy,ioxy->boxy", xr, wi) + torch.einsum("bixy,ioxy->boxy", xi, wr)
                blocks.append(torch.stack([yr, yi], -1))
            middle = torch.zeros(x.shape[0], channels, size - 2 * modes, modes, 2, dtype=x.dtype, device=x.device)
            y = torch.cat([blocks[0], middle, blocks[1]], 2)
            y = nn.functional.pad(y, (0, 0, 0, size // 2 + 1 - modes))
            return torch.fft.irfft2(torch.view_as_complex(y.contiguous()), s=(size, size))

    class Fno(nn.Module):
        def __init__(self):
            super().__init__()
            self.lift = nn.Conv2d(inputs, channels, 1)
            self.spectral = nn.ModuleList(Spectral() for _ in range(layers))
            self.pointwise = nn.ModuleList(nn.Conv2d(channels, channels, 1) for _ in range(layers))
            self.project = nn.Sequential(nn.Conv2d(channels, 128, 1), nn.GELU(), nn.Conv2d(128, 1, 1))

        def forward(self, x):
            h = self.lift(x)
            for k, (s, w) in enumerate(zip(self.spectral, self.pointwise)):
                h = s(h) + w(h)
                if k < layers - 1:
                    h = nn.functional.gelu(h)
            return self.project(h)

    return Fno()


def weights_digest(model):
    """sha256 of the model's parameters and buffers, names and bytes in order: the run draws the
    FNO's weights from the build's seed and checks them by this instead of carrying 9.5 MB."""
    import hashlib

    digest = hashlib.sha256()
    for key, value in model.state_dict().items():
        digest.update(key.encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


# -- the trees as arrays (numpy; torch forms on the GPU machine) ----------------------------------

def trees_from_onnx(proto):
    """The TreeEnsembleRegressor of an ONNX model as flat arrays: every node one row (children as
    row numbers, a leaf its own child), the roots, the leaf values (summed per leaf), the base value,
    the depth. skl2onnx writes BRANCH_LEQ splits and aggregate SUM (averages folded into weights)."""
    import numpy as np
    from onnx import helper

    node = next(n for n in proto.graph.node if n.op_type == "TreeEnsembleRegressor")
    a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    modes = [m.decode() if isinstance(m, bytes) else m for m in a["nodes_modes"]]
    assert set(modes) <= {"BRANCH_LEQ", "LEAF"}, set(modes)
    assert (a.get("aggregate_function", b"SUM") in (b"SUM", "SUM")) and a.get("post_transform", b"NONE") in (b"NONE", "NONE")
    keys = list(zip(a["nodes_treeids"], a["nodes_nodeids"]))
    row = {k: i for i, k in enumerate(keys)}
    count = len(keys)
    feature = np.array(a["nodes_featureids"], np.int64)
    threshold = np.array(a["nodes_values"], np.float32)
    left, right = np.arange(count), np.arange(count)
    children = set()
    for i, ((tree, _), mode) in enumerate(zip(keys, modes)):
        if mode != "LEAF":
            left[i], right[i] = row[(tree, a["nodes_truenodeids"][i])], row[(tree, a["nodes_falsenodeids"][i])]
            children |= {int(left[i]), int(right[i])}
    value = np.zeros(count, np.float64)
    for tree, nid, w in zip(a["target_treeids"], a["target_nodeids"], a["target_weights"]):
        value[row[(tree, nid)]] += w
    roots = np.array([i for i in range(count) if i not in children], np.int64)
    depth = _depth(left, right, roots)
    base = float(a["base_values"][0]) if a.get("base_values") else 0.0
    is_leaf = np.array([m == "LEAF" for m in modes])
    feature[is_leaf] = 0
    tree_of = np.array(a["nodes_treeids"], np.int64)
    return {"feature": feature, "threshold": threshold, "left": left, "right": right, "value": value,
            "roots": roots, "depth": np.int64(depth), "base": np.float64(base), "leaf": is_leaf, "tree": tree_of}


def _depth(left, right, roots):
    deepest, stack = 0, [(int(r), 0) for r in roots]
    while stack:
        n, d = stack.pop()
        if left[n] == n:
            deepest = max(deepest, d)
        else:
            stack += [(int(left[n]), d + 1), (int(right[n]), d + 1)]
    return deepest


def walk_numpy(t, x):
    """The ensemble on x [n, features]: each tree walked for ``depth`` steps, float32 compares, float64 sum."""
    import numpy as np

    node = np.broadcast_to(t["roots"], (x.shape[0], t["roots"].size)).copy()
    rows = np.arange(x.shape[0])[:, None]
    for _ in range(int(t["depth"])):
        v = x[rows, t["feature"][node]]
        node = np.where(v <= t["threshold"][node], t["left"][node], t["right"][node])
    return t["value"][node].sum(1) + float(t["base"])


def gemm_arrays(t, features):
    """Hummingbird's GEMM form, padded to the largest tree: A [trees, features, splits] picks each
    split's feature, B [trees, splits] its threshold, C [trees, splits, leaves] is +1 where the leaf is
    under the split's true branch and -1 under its false one, D [trees, leaves] counts each leaf's
    true turns, E [trees, leaves] the leaf values. None where trees * splits * leaves > GEMM_LIMIT."""
    import numpy as np

    trees = t["roots"].size
    per_tree = [[], []]
    for k in range(trees):
        nodes = np.flatnonzero(t["tree"] == t["tree"][t["roots"][k]])
        per_tree[0].append(nodes[~t["leaf"][nodes]])
        per_tree[1].append(nodes[t["leaf"][nodes]])
    splits, leaves = max(len(s) for s in per_tree[0]), max(len(s) for s in per_tree[1])
    if trees * splits * leaves > GEMM_LIMIT:
        return None
    a = np.zeros((trees, features, splits), np.float32)
    b = np.full((trees, splits), np.inf, np.float32)
    c = np.zeros((trees, splits, leaves), np.float32)
    d = np.full((trees, leaves), -1e9, np.float32)
    e = np.zeros((trees, leaves), np.float32)
    for k in range(trees):
        inner = {int(n): i for i, n in enumerate(per_tree[0][k])}
        outer = {int(n): i for i, n in enumerate(per_tree[1][k])}
        for n, i in inner.items():
            a[k, t["feature"][n], i] = 1.0
            b[k, i] = t["threshold"][n]
        stack = [(int(t["roots"][k]), [])]
        while stack:
            n, path = stack.pop()
            if n in outer:
                for i, went_true in path:
                    c[k, i, outer[n]] = 1.0 if went_true else -1.0
                d[k, outer[n]] = sum(went for _, went in path)
                e[k, outer[n]] = t["value"][n]
            else:
                stack += [(int(t["left"][n]), path + [(inner[n], True)]), (int(t["right"][n]), path + [(inner[n], False)])]
    return a, b, c, d, e


# -- build (here) -------------------------------------------------------------------------------

def compile_model(d, name, nx, ny, file_weights):
    """lib<name>.a with the CUDA backend, and bench/frontier.cu against it (<d>/driver)."""
    lib = subprocess.run(["make", "-s", "-f", os.path.join(d, f"{name}.mk"), "ROSENNA_BACKEND=cuda", "CC=gcc",
                          "ROSENNA_OFFLOAD_FLAGS=", f"DEVFLAGS=-O3 {ARCH}", os.path.join(d, f"lib{name}.a")],
                         capture_output=True, text=True)
    if lib.returncode:
        raise SystemExit(f"building lib{name}.a failed:\n{lib.stderr[-3000:]}")
    drv = subprocess.run(["nvcc", "-O3", ARCH, f"-DNAME={name}", f'-DHDR="{name}.h"', f"-DFRONTIER_NX={nx}", f"-DFRONTIER_NY={ny}"]
                         + (["-DFILE_WEIGHTS"] if file_weights else [])
                         + ["-I", d, "-I", "bench", os.path.join("bench", "frontier.cu"), os.path.join(d, f"lib{name}.a"),
                            "-o", os.path.join(d, "driver")], capture_output=True, text=True)
    if drv.returncode:
        raise SystemExit(f"nvcc failed for {name}:\n{drv.stderr[-3000:]}")
    for obj in (f"{name}.o", f"{name}_kernel.o", f"lib{name}.a"):  # not carried: make rebuilds them
        if os.path.exists(os.path.join(d, obj)):
            os.remove(os.path.join(d, obj))


def _generate(path, d, name):
    from rosenna.generate import Options, generate

    plan, files = generate(path, d, Options(name=name, lang="c", embed=False))  # weights in <name>.rwt: small sources
    return plan, True


def build_fno(manifest):
    import warnings

    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    name, d = "fno", os.path.join(OUT, "fno")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model = torch_fno(**{k: FNO[k] for k in ("channels", "modes", "layers", "size", "inputs")}).eval()
    x = torch.rand(1, FNO["inputs"], FNO["size"], FNO["size"]) * 2 - 1
    path = os.path.join(d, "fno.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx.save(torch.onnx.export(model, (x,), dynamo=True).model_proto, path)
    proto = onnx.load(path)
    dfts = sum(n.op_type == "DFT" for n in proto.graph.node)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        got = model(x).numpy()
    err = float(np.abs(got - want).max() / np.abs(want).max())
    if err > 1e-4:
        raise SystemExit(f"fno: the PyTorch model differs from its ONNX export (relative {err:.1e})")
    if os.environ.get("FAMILIES_TORCH_WEIGHTS"):  # only where the run's torch may draw other numbers
        torch.save(model.state_dict(), os.path.join(d, "fno.pt"))
    plan, file_weights = _generate(path, d, name)
    compile_model(d, name, plan.nx, plan.ny, file_weights)
    os.remove(path)  # 10 MB the run does not read (it has fno.rwt and the seed): the carry is 64 MiB at most
    manifest[name] = {"nx": plan.nx, "ny": plan.ny, "file_weights": file_weights, "path": plan.path, "dfts": dfts,
                      "torch_sha256": weights_digest(model)}
    print(f"fno: {plan.parameters} parameters, {dfts} DFT nodes, {plan.path} plan, built", flush=True)


def build_trees(manifest):
    import numpy as np
    import onnx
    import onnxruntime as ort

    sys.path.insert(0, "bench")
    from trees_per_point import ensemble

    for name, (kind, count, depth) in ENSEMBLES.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        proto, nodes, features, _ = ensemble(kind, count, depth)
        path = os.path.join(d, f"{name}.onnx")
        onnx.save(proto, path)
        t = trees_from_onnx(proto)
        x = np.random.default_rng(1).uniform(-1, 1, (CHECK_POINTS, features)).astype(np.float32)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(None, {sess.get_inputs()[0].name: x})[0].ravel()
        got = walk_numpy(t, x)
        err = float(np.abs(got - want).max())
        if err > 1e-4 * max(1.0, float(np.abs(want).max())):
            raise SystemExit(f"{name}: the trees read from the ONNX file differ from onnxruntime by {err:.1e}")
        small = {k: (v.astype(np.int32) if v.dtype == np.int64 and v.ndim else v) for k, v in t.items()}
        np.savez_compressed(os.path.join(d, "trees.npz"), **small)
        plan, file_weights = _generate(path, d, name)
        compile_model(d, name, plan.nx, plan.ny, file_weights)
        manifest[name] = {"nx": plan.nx, "ny": plan.ny, "file_weights": file_weights, "nodes": nodes,
                          "trees": count, "depth": int(t["depth"]), "features": features}
        print(f"{name}: {count} trees, {nodes} nodes, depth {int(t['depth'])}, built", flush=True)


def build(args):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "manifest.json")
    manifest = json.load(open(path)) if os.path.exists(path) else {}  # --only keeps the others built before
    if "fno" in args.only:
        build_fno(manifest)
    if "trees" in args.only:
        build_trees(manifest)
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
    return 0


# -- run (on the GPU machine) ---------------------------------------------------------------------

def _rosenna(name, info, sizes, reps):
    """{n: median ms} from the driver, and the (x, y) numpy arrays of the first points it dumped."""
    import numpy as np

    d = os.path.join(OUT, name)
    exe, dump = os.path.join(d, "driver"), os.path.join(d, "dump.bin")
    cmd = [exe, ",".join(str(n) for n in sizes), str(reps), dump]
    if info["file_weights"]:
        cmd.append(os.path.join(d, f"{name}.rwt"))
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode and "cuda" in (run.stderr or "").lower():  # built against another CUDA: rebuild here
        print(f"{name}: {run.stderr.strip()[-200:]}; rebuilding", flush=True)
        compile_model(d, name, info["nx"], info["ny"], info["file_weights"])
        run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"{name}: {run.stderr.strip()[-500:]}")
    times = {int(line.split()[1]): float(line.split()[3]) for line in run.stdout.splitlines() if line.startswith("N ")}
    k = min(sizes[0], CHECK_POINTS)
    raw = np.fromfile(dump, np.float32)
    return times, raw[:k * info["nx"]].reshape(k, info["nx"]), raw[k * info["nx"]:].reshape(k, info["ny"])


def run_fno(info, args):
    import numpy as np
    import torch

    c = FNO
    torch.manual_seed(0)  # the build's weights, drawn again (checked against the build's digest)
    model = torch_fno(**{k: c[k] for k in ("channels", "modes", "layers", "size", "inputs")})
    saved = os.path.join(OUT, "fno", "fno.pt")
    if os.path.exists(saved):
        model.load_state_dict(torch.load(saved))
    elif weights_digest(model) != info.get("torch_sha256"):
        raise RuntimeError("torch here draws other initial weights than at the build: build again with "
                           "FAMILIES_TORCH_WEIGHTS=1 (writes fno.pt, 9.5 MB) and carry it")
    model = model.cuda().eval()
    shape = (c["inputs"], c["size"], c["size"])
    times, x, y = _rosenna("fno", info, list(FNO_BATCHES), args.reps)
    with torch.inference_mode():
        want = model.double()(torch.from_numpy(x).cuda().double().reshape(-1, *shape)).reshape(y.shape).cpu().numpy()
        model.float()
        err = np.abs(y - want)
        outside = int((~(err <= 1e-5 + 1e-4 * np.abs(want))).sum())
        check = f"max abs error {err.max():.1e} over {y.shape[0]} samples, {outside} of {y.size} outside rtol 1e-4 + atol 1e-5"
        print(f"fno: {check}", flush=True)
        rows = []
        for n in FNO_BATCHES:
            xs = torch.rand((n, *shape), device="cuda") * 2 - 1
            eager = _events(lambda: model(xs), args.reps)
            best, how = None, "-"
            modes = ("default", "reduce-overhead") if n == 1 else ("default",)  # CUDA graphs pay at 1 sample
            for mode in modes if time.time() - args.t0 < args.budget else ():
                try:
                    fn = torch.compile(model, mode=mode, dynamic=False)
                    t = _events(lambda: fn(xs), args.reps)
                    if best is None or t < best:
                        best, how = t, mode
                except Exception as exc:  # noqa: BLE001 (a missing compiler must not end the run)
                    print(f"fno n={n}: torch.compile({mode}) failed: {type(exc).__name__}: {exc}"[:300], flush=True)
            ours = times[n] * 1e3 / n
            comp = f"{best * 1e3 / n:.4g} ({how})" if best else ("failed" if time.time() - args.t0 < args.budget
                                                                  else "skipped (--budget)")
            rows.append(f"| {n} | {ours:.4g} | {eager * 1e3 / n:.4g} | {comp} | {eager * 1e3 / n / ours:.2f}x |")
            print("  " + rows[-1], flush=True)
    print(f"\nFNO ({info['dfts']} DFT nodes, {info['path']} plan), microseconds per sample; {check}:\n")
    print("| samples per call | rosenna | PyTorch eager | torch.compile | rosenna vs eager |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(row)


def _ort_time(path, x, reps):
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime not installed"
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    sess.run(None, {name: x})
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        times.append(time.perf_counter() - t0)
    return statistics.median(times), f"{os.cpu_count()} CPU threads"


def run_trees(manifest, args):
    import numpy as np
    import torch

    rows = []
    for name in ENSEMBLES:
        if name not in manifest:
            continue
        info, d = manifest[name], os.path.join(OUT, name)
        t = {k: (v.astype(np.int64) if v.dtype == np.int32 else v) for k, v in np.load(os.path.join(d, "trees.npz")).items()}
        n = args.points
        times, x, y = _rosenna(name, info, [n], args.reps)
        want = walk_numpy(t, x.astype(np.float32))
        checks = {"rosenna": float(np.abs(y.ravel() - want).max())}
        dev = torch.device("cuda")
        g = {k: torch.from_numpy(np.asarray(t[k])).to(dev) for k in ("feature", "threshold", "left", "right", "roots")}
        value = torch.from_numpy(t["value"].astype(np.float32)).to(dev)
        base = float(t["base"])

        def traverse(xs):
            node = g["roots"].expand(xs.shape[0], -1)
            for _ in range(int(t["depth"])):
                v = torch.gather(xs, 1, g["feature"][node])
                node = torch.where(v <= g["threshold"][node], g["left"][node], g["right"][node])
            return value[node].sum(1) + base

        xs = torch.rand((n, info["features"]), device=dev) * 2 - 1
        with torch.inference_mode():
            checks["traversal"] = float((traverse(torch.from_numpy(x).to(dev)).cpu().numpy() - want).__abs__().max())
            trav = _events(lambda: traverse(xs), args.reps)
            arrays = gemm_arrays(t, info["features"])
            gemm = None
            if arrays is not None:
                a, b, c, dd, e = (torch.from_numpy(v).to(dev) for v in arrays)

                def gemm_form(xs, chunk=8192):
                    out = []
                    for s in range(0, xs.shape[0], chunk):
                        split = (torch.matmul(xs[s:s + chunk], a) <= b[:, None, :]).float()  # [trees, n, splits]
                        leaf = (torch.bmm(split, c) == dd[:, None, :]).float()             # [trees, n, leaves]
                        out.append((leaf * e[:, None, :]).sum((0, 2)) + base)
                    return torch.cat(out)

                checks["GEMM"] = float((gemm_form(torch.from_numpy(x).to(dev)).cpu().numpy() - want).__abs__().max())
                gemm = _events(lambda: gemm_form(xs), max(3, args.reps // 2))
        ort_s, ort_note = _ort_time(os.path.join(d, f"{name}.onnx"), np.random.default_rng(2).uniform(
            -1, 1, (n, info["features"])).astype(np.float32), 3)
        scale = float(np.abs(want).max())
        bad = {k: v for k, v in checks.items() if v > 1e-4 * max(1.0, scale)}
        print(f"{name}: max abs difference from the trees walked in numpy: "
              + ", ".join(f"{k} {v:.1e}" for k, v in checks.items()) + (f"; OUTSIDE 1e-4: {sorted(bad)}" if bad else ""),
              flush=True)
        per = 1e6 / n
        rows.append(f"| {name} | {info['nodes']:,} | {times[n] * per:.4g} | {trav * per:.4g} | "
                    + (f"{gemm * per:.4g}" if gemm is not None else "- (matrices over GEMM_LIMIT)") + " | "
                    + (f"{ort_s * 1e9 / n:.4g} ({ort_note})" if ort_s is not None else ort_note) + " | "
                    + ("every form" if not bad else "outside: " + ", ".join(sorted(bad))) + " |")
        print("  " + rows[-1], flush=True)
        del xs
        torch.cuda.empty_cache()
    print(f"\nTree ensembles, nanoseconds per point at {args.points:,} points (8 features, fp32):\n")
    print("| ensemble | nodes | rosenna | traversal (PyTorch) | GEMM (PyTorch) | onnxruntime CPU | agrees with numpy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        print(row)


def run(args):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    manifest = json.load(open(os.path.join(OUT, "manifest.json")))
    t0 = args.t0 = time.time()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, TF32 off, fp32; median of {args.reps} "
          "CUDA-event timings", flush=True)
    for part, fn in (("fno", lambda: run_fno(manifest["fno"], args)), ("trees", lambda: run_trees(manifest, args))):
        if part in args.only and (part != "fno" or "fno" in manifest):
            try:
                fn()
            except RuntimeError as exc:  # a driver that failed: say so, and go on with the other part
                print(f"{part}: {exc}", flush=True)
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "run"])
    ap.add_argument("--only", nargs="*", choices=["fno", "trees"], default=["fno", "trees"])
    ap.add_argument("--points", type=int, default=TREE_POINTS, help="points per tree-ensemble call")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--budget", type=float, default=240.0, help="seconds after which torch.compile is skipped")
    args = ap.parse_args(argv)
    return build(args) if args.step == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
