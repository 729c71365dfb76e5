"""Generate every zoo, example and bench model with the default options and record the sha256 of
each generated file: the check that a refactoring of the generator leaves its output unchanged.

    python bench/snapshot_generated.py record DIR        # generate into DIR/gen, write DIR/sha256.json
    python bench/snapshot_generated.py compare DIR NEW   # generate into NEW, list files that differ from DIR's
    python bench/snapshot_generated.py sizes DIR [NEW]   # bytes generated per model (DIR's, and NEW's beside)
    python bench/snapshot_generated.py literals DIR NEW  # files that differ beyond how numbers are spelled

The models: the zoo's three MLPs in float32 and float64, embedded and file-loaded; the examples'
ONNX files; the bench MLP shapes of bench/frontier.py (built with onnx.helper, so no PyTorch is
needed); tests/op_models' conv net, U-Net, LSTM cell and sequence; bench/science_models.py's 3-D
U-Net and Fourier-feature MLP. ``compare`` exits 1 when a file differs, is new or is gone.
``sizes`` prints a Markdown table of the bytes of each model's ``<name>_kernel.cu`` and of all its
files, from snapshots already generated (``record`` or ``compare`` wrote them). ``literals`` reads two
generated snapshots and lists the files that differ beyond the spelling of their decimal literals
(each pair the same number), with their first differing lines (literals shown as ``#``): a change
of spelling alone (rosenna.loopir.decimal_texts) lists nothing.
"""

import difflib
import glob
import hashlib
import json
import os
import re
import sys

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

from rosenna import generate as gen, zoo  # noqa: E402

#: bench/frontier.py's MLP shapes (input width, [(width, activation op)]) as zoo.mlp models.
FRONTIER = {
    "silu_like": (5, [(64, "Sigmoid"), (64, "Sigmoid"), (3, None)]),
    "tanh96": (7, [(96, "Tanh")] * 4 + [(5, None)]),
    "tanh64": (5, [(64, "Tanh"), (64, "Tanh"), (3, None)]),
    "softsign": (5, [(64, "Softsign"), (64, "Softsign"), (3, None)]),
    "mlp256": (16, [(256, "Relu")] * 3 + [(8, None)]),
    "mlp512": (16, [(512, "Relu")] * 2 + [(8, None)]),
}


def models(tmp):
    """[(label, onnx path, generate options)]: every model of the snapshot."""
    import op_models
    import science_models

    out = []
    for name in zoo.MODELS:
        for dtype, tag in ((np.float32, "f32"), (np.float64, "f64")):
            path = zoo.save(name, os.path.join(tmp, f"{name}_{tag}.onnx"), dtype)
            out.append((f"{name}_{tag}", path, {}))
            out.append((f"{name}_{tag}_file", path, {"embed": False}))
    out.append(("mlp128_infer_one", os.path.join(tmp, "mlp128_f32.onnx"), {"infer_one": True}))
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.onnx"), recursive=True)):
        out.append((os.path.splitext(os.path.basename(path))[0], path, {}))
    for name, (nx, layers) in FRONTIER.items():
        sizes = [nx] + [w for w, _ in layers]
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.save(zoo.mlp(name, sizes, [a for _, a in layers], seed=5), path)
        out.append((name, path, {}))
    path = os.path.join(tmp, "d4_f64.onnx")
    onnx.save(zoo.mlp("d4", [4, 32, 32, 2], ["Tanh", "Tanh", None], np.float64, seed=4), path)
    out.append(("d4_f64", path, {}))
    out.append(("convnet", op_models.convnet(os.path.join(tmp, "convnet.onnx")), {}))
    out.append(("convnet_small", op_models.convnet(os.path.join(tmp, "convnet_small.onnx"), 8, 8), {}))
    out.append(("unet", op_models.unet(os.path.join(tmp, "unet.onnx")), {}))
    out.append(("lstm_cell", op_models.lstm_cell(os.path.join(tmp, "lstm_cell.onnx")), {}))
    out.append(("lstm_sequence", op_models.lstm_sequence(os.path.join(tmp, "lstm_sequence.onnx")), {}))
    out.append(("conv_dw", op_models.conv(os.path.join(tmp, "conv_dw.onnx"), 8, 16, 16, 8, group=8, act="Relu"), {}))
    out.append(("unet3d", science_models.unet3d(os.path.join(tmp, "unet3d.onnx"), 8), {}))
    out.append(("fourier_mlp", science_models.fourier_mlp(os.path.join(tmp, "fourier_mlp.onnx")), {}))
    return out


def generate_all(dest):
    """Generate every model into ``dest/<label>``; returns {label/file: sha256}."""
    models_dir = os.path.join(dest, "models")
    os.makedirs(models_dir, exist_ok=True)
    digests = {}
    for label, path, opts in models(models_dir):
        out = os.path.join(dest, "gen", label)
        gen.generate(path, out, gen.Options(name=label, **opts))
        for fname in sorted(os.listdir(out)):
            with open(os.path.join(out, fname), "rb") as fh:
                digests[f"{label}/{fname}"] = hashlib.sha256(fh.read()).hexdigest()
    return digests


def _bytes(dest):
    """{label: (kernel file bytes, all files' bytes)} of a generated snapshot."""
    out = {}
    for label in sorted(os.listdir(os.path.join(dest, "gen"))):
        folder = os.path.join(dest, "gen", label)
        files = {f: os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)}
        out[label] = (sum(b for f, b in files.items() if f.endswith("_kernel.cu")), sum(files.values()))
    return out


def sizes(dirs):
    """The Markdown table of :func:`_bytes` for one snapshot, or two side by side."""
    got = [_bytes(d) for d in dirs]
    labels = sorted(set().union(*got))
    def cell(table, label, i):
        return f"{table[label][i]:,}" if label in table else "-"
    if len(got) == 1:
        lines = ["| model | `_kernel.cu` bytes | all files |", "|---|---:|---:|"]
        lines += [f"| {lab} | {cell(got[0], lab, 0)} | {cell(got[0], lab, 1)} |" for lab in labels]
    else:
        lines = ["| model | `_kernel.cu` before | after | all files before | after |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {lab} | {cell(got[0], lab, 0)} | {cell(got[1], lab, 0)} | {cell(got[0], lab, 1)} | {cell(got[1], lab, 1)} |"
                  for lab in labels]
    totals = [(sum(v[0] for v in t.values()), sum(v[1] for v in t.values())) for t in got]
    lines.append("| **all** | " + " | ".join(f"{t[0]:,}" for t in totals) + " | " + " | ".join(f"{t[1]:,}" for t in totals) + " |")
    return "\n".join(lines)


#: A decimal literal of C, CUDA or Fortran: digits with a point or an exponent, before a suffix, a
#: separator or the end of the line.
_LITERAL = re.compile(r"(?<![\w.])(-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)(?=f\b|_rk\b|[,\s)\]};*+/]|$)")


def _digits(text):
    return len(re.sub(r"[eE].*|[-.]", "", text).strip("0"))


def _same_numbers(a, b):
    """Whether two texts differ at most in how their decimal literals are spelled: the same text
    around them, and each pair the same float64, or the same float32 where neither has more than
    9 significant digits (a float32 literal written with 9 digits before, fewer now)."""
    if _LITERAL.sub("#", a) != _LITERAL.sub("#", b):
        return False
    for x, y in zip(_LITERAL.findall(a), _LITERAL.findall(b)):
        if x == y or float(x) == float(y):
            continue
        if max(_digits(x), _digits(y)) > 9 or np.float32(float(x)) != np.float32(float(y)):
            return False
    return True


def literals(before, after, lines=6):
    """The files of two generated snapshots that differ beyond the spelling of their literals
    (:func:`_same_numbers`), each with its first ``lines`` differing lines."""
    out = []
    for root, _, files in os.walk(os.path.join(after, "gen")):
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(root, name), os.path.join(after, "gen"))
            old = os.path.join(before, "gen", rel)
            if not os.path.exists(old):
                out.append(f"new: {rel}")
                continue
            with open(old, errors="replace") as fa, open(os.path.join(root, name), errors="replace") as fb:
                a, b = fa.read(), fb.read()
            if a == b or _same_numbers(a, b):
                continue
            skeleton = [_LITERAL.sub("#", t).splitlines() for t in (a, b)]
            diff = [d for d in difflib.unified_diff(*skeleton, lineterm="", n=0) if d[:1] in "+-" and d[:3] not in ("+++", "---")]
            out.append(f"differs: {rel} ({len(diff)} lines)")
            out += [f"    {d[:150]}" for d in diff[:lines]]
    return out


def main(argv):
    if len(argv) == 2 and argv[0] == "record":
        digests = generate_all(argv[1])
        with open(os.path.join(argv[1], "sha256.json"), "w") as fh:
            json.dump(digests, fh, indent=1, sort_keys=True)
        print(f"{len(digests)} files recorded in {argv[1]}")
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        with open(os.path.join(argv[1], "sha256.json")) as fh:
            before = json.load(fh)
        after = generate_all(argv[2])
        differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        for key in differ:
            what = "new" if key not in before else "gone" if key not in after else "differs"
            print(f"{what}: {key}")
        print(f"{len(after)} files, {len(differ)} differ")
        return 1 if differ else 0
    if len(argv) == 3 and argv[0] == "literals":
        report = literals(argv[1], argv[2])
        print("\n".join(report) if report else "no file differs beyond the spelling of its literals")
        return 1 if report else 0
    if argv[:1] == ["sizes"] and len(argv) in (2, 3):
        print(sizes(argv[1:]))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
