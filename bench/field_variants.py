"""Variants of the CUDA whole-field path side by side on one GPU (the study behind docs/benchmarks.md
"Run 11"): each variant is the kernel file generated with one setting of the phase fusion
(rosenna/emit/cuda/field_fuse.py), built with bench/frontier.cu into its own driver.

    .venv/bin/python bench/field_variants.py build/dev-field18     # here: generate and build
    bash build/dev-field18/run.sh                                  # there: time, compare outputs

``run.sh`` prints one line per model, variant and batch (µs per call, median of 41 CUDA-event
timings) and, for each variant, the outputs outside verify's float32 tolerance
(|got - want| <= 1e-6 + 1e-5 |want|, rosenna/compare.py) against the first variant's.
The models: the examples' U-Net (poisson_guess) and bench/frontier.py's depthwise-separable net
(its ONNX file from ``bench/frontier.py build --only dwsep``).
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rosenna.emit.cuda import field_fuse, whole_field  # noqa: E402
from rosenna.generate import Options, generate  # noqa: E402

ARCH = "-gencode=arch=compute_90,code=sm_90"
#: name -> (max_loads of field_fuse.schedule (0: every op its own phase, main before fusion),
#: threads per block, whether every call runs the persistent kernel: on min(needed, resident) blocks).
VARIANTS = {"unfused": (0, 256, False), "fuse2": (2, 256, False), "fuse4": (4, 256, False),
            "fuse4-t1024": (4, 1024, False), "fuse4-t512": (4, 512, False), "fuse4-persist": (4, 256, True)}
MODELS = {"unet": os.path.join("examples", "surrogates", "poisson_guess", "pguess.onnx"),
          "dwsep": os.path.join("build", "frontier", "dwsep", "dwsep.onnx")}
#: The variants each model is built in (the depthwise net has no phase to fuse: its default only).
BUILT = {"unet": list(VARIANTS), "dwsep": ["fuse4"]}
if os.environ.get("VARIANTS"):
    BUILT = {"unet": os.environ["VARIANTS"].split(","), "dwsep": os.environ.get("DWSEP", "fuse4").split(",")}

#: The per-call choice as the kernel file writes it, and the variant that always runs the persistent kernel.
CHOICE = "    if (needed > resident)\n        return {n}_phases(count, x, y, s);\n"
PERSIST = "    if (resident < 0)\n        return {n}_phases(count, x, y, s);\n    if (needed > resident)\n        needed = resident;\n"

COMPARE = r'''
import struct, sys
def load(p):
    raw = open(p, "rb").read()
    return struct.unpack(f"{len(raw) // 4}f", raw)
base, other, ny = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
a, b = base[-ny:], other[-ny:]
bad = sum(1 for u, v in zip(a, b) if not abs(u - v) <= 1e-6 + 1e-5 * abs(u))
print(f"  {sys.argv[4]}: {bad} of {len(a)} outputs outside tol against {sys.argv[5]}")
'''


def build(out):
    os.makedirs(out, exist_ok=True)
    runs = []
    for model, path in MODELS.items():
        if not os.path.exists(path):
            raise SystemExit(f"{path}: missing; run `.venv/bin/python bench/frontier.py build --only dwsep` first")
        for variant in BUILT[model]:
            loads, threads, persist = VARIANTS[variant]
            d = os.path.join(out, model, variant)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            field_fuse.schedule.__defaults__ = (loads,)
            whole_field.CUDA_THREADS = threads
            plan, _ = generate(path, d, Options(name=model, lang="c", embed=True))
            if persist:
                src = os.path.join(d, f"{model}_kernel.cu")
                text = open(src).read()
                assert CHOICE.format(n=model) in text and "    const long needed = " in text
                text = text.replace(CHOICE.format(n=model), PERSIST.format(n=model))
                open(src, "w").write(text.replace("    const long needed = ", "    long needed = "))
            lib = subprocess.run(["make", "-s", "-f", f"{model}.mk", "ROSENNA_BACKEND=cuda", "CC=gcc",
                                  "ROSENNA_OFFLOAD_FLAGS=", f"DEVFLAGS=-O3 {ARCH} -Xptxas -v", f"lib{model}.a"],
                                 cwd=d, capture_output=True, text=True)
            if lib.returncode:
                raise SystemExit(f"{model}/{variant}: {lib.stderr[-3000:]}")
            open(os.path.join(d, "ptxas.txt"), "w").write(lib.stderr)
            subprocess.run(["nvcc", "-O3", ARCH, f"-DNAME={model}", f'-DHDR="{model}.h"', f"-DFRONTIER_NX={plan.nx}",
                            f"-DFRONTIER_NY={plan.ny}", "-I", d, os.path.join("bench", "frontier.cu"),
                            os.path.join(d, f"lib{model}.a"), "-o", os.path.join(d, "frontier")], check=True)
            for f in os.listdir(d):
                if f not in ("frontier", "ptxas.txt", f"{model}_kernel.cu"):
                    os.remove(os.path.join(d, f))
            subprocess.run(["strip", os.path.join(d, "frontier")], check=True)
            phases = field_fuse.schedule(plan, loads).phases
            runs.append((model, variant, plan.ny, len(phases)))
            print(f"{model} {variant}: {len(phases)} phases", flush=True)
    open(os.path.join(out, "compare.py"), "w").write(COMPARE)
    lines = ["#!/bin/bash", "# Generated by bench/field_variants.py: run from the repository root.", "set -e",
             'D="$(dirname "$0")"', 'echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"']
    for model, variant, ny, phases in runs:
        base = BUILT[model][0]
        lines += [f'echo "{model} {variant} ({phases} phases): µs per call, median of 41"',
                  f'"$D/{model}/{variant}/frontier" 1,16,256 41 /tmp/dump-{model}-{variant}.bin | '
                  "awk '{printf \"  batch %s: %.1f us (min %.1f)\\n\", $2, $4 * 1000, $6 * 1000}'"]
        lines.append(f'"$D/{model}/{variant}/frontier" 256 3 /tmp/dump256-{model}-{variant}.bin > /dev/null')
        if variant != base:
            for n, tag in (("", "1 sample"), ("256", "256 samples")):
                lines.append(f'python3 "$D/compare.py" /tmp/dump{n}-{model}-{base}.bin /tmp/dump{n}-{model}-{variant}.bin '
                             f'{ny * (256 if n else 1)} "{variant} at {tag}" {base}')
    open(os.path.join(out, "run.sh"), "w").write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(build(sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "dev-field18")))
