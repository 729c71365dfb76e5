"""Variants of the CUDA whole-field path side by side on one GPU (the study behind results/measurement-log.md
"The whole-field phase study"): each variant is the kernel file generated with one setting of the phase fusion
(rosenna/strategy/field/fusion.py), built with bench/frontier.cu into its own driver.

    .venv/bin/python bench/studies/field18/field_variants.py build/dev-field18     # here: generate and build
    bash build/dev-field18/run.sh                                  # there: time, compare outputs

``run.sh`` runs one driver linking every variant (each generated under its own name) and prints
one line per model, variant and batch: µs per call (median of 41 CUDA-event timings) and the
outputs outside verify's float32 tolerance (|got - want| <= 1e-6 + 1e-5 |want|,
rosenna/compare.py) against the model's first variant (for the first: the outputs not finite).
The models: the examples' U-Net (poisson_guess) and bench/frontier.py's depthwise-separable net
(its ONNX file from ``bench/frontier.py build --only dwsep``).
"""

import concurrent.futures
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.dirname(HERE))), os.path.dirname(os.path.dirname(HERE))]

import bench_header  # noqa: E402 (bench/)
from rosenna import strategy  # noqa: E402
from rosenna.generate import Options, generate  # noqa: E402
from rosenna.strategy import Tuning  # noqa: E402

DEFAULT = Tuning()

ARCH = "-gencode=arch=compute_90,code=sm_90"
MB = 1 << 20
#: The generator's settings every variant starts from (the defaults of round B of results/measurement-log.md,
#: "The whole-field phase study";
#: the cluster kernel off), and per variant what it changes: tuning fields as "tuning.NAME": value, plus "form": which of <name>_run's forms every call takes ("choice": the
#: generated choice, "persist": the persistent kernel on min(needed, resident) blocks, "launch":
#: the launched phases).
BASE = {"tuning.field_inline_loads": 0, "tuning.field_decode": False, "tuning.field_threads": 256,
        "tuning.cuda_whole_batch_bytes": 128 * MB, "tuning.cluster_samples": 0,
        "tuning.whole_constant_limit": DEFAULT.whole_constant_limit,
        "tuning.cluster_blocks": 16, "tuning.cluster_threads": 256, "tuning.cluster_per_call": False, "tuning.cluster_min_blocks": 0,
        "tuning.cluster_jam": True, "tuning.field_epilogues": "", "tuning.epilogue_pull": True,
        "tuning.epilogue_push": True, "form": "choice", "tuning.constant_limit": DEFAULT.constant_limit}
VARIANTS = {"main": {},
            "unfused": {"tuning.cuda_whole_batch_bytes": 64 * MB},
            "fuse2": {"tuning.field_inline_loads": 2, "tuning.field_decode": True},
            "fuse4": {"tuning.field_inline_loads": 4, "tuning.field_decode": True},
            "exact2": {"tuning.field_inline_loads": 2}, "exact4": {"tuning.field_inline_loads": 4},
            "t512": {"tuning.field_threads": 512}, "persist": {"form": "persist"},
            "launch": {"form": "launch"},
            # (programmatic dependent launch of the launched phases, "pdl" and "pdl-launch", was
            # measured in round A of 2026-12-03 on commit e330fdb: results/measurement-log.md, "The clustered whole-field study")
            # the clustered kernel at every batch: blocks x threads, jammed convolutions or not
            **{f"c{b}x{t}{'' if jam else 'p'}": {"tuning.cluster_samples": 256, "tuning.cluster_blocks": b,
                                               "tuning.cluster_threads": t, "tuning.cluster_jam": jam}
               for b in (4, 8, 16) for t in (128, 256, 512, 1024) for jam in (True, False)}}
# the clustered kernel, its blocks per cluster chosen per call (up to 16) and read at run time (main's
# default from f28daa8 until the epilogue study), 256, 512 or 1024 threads per block
VARIANTS.update({f"auto{t}": {"tuning.cluster_samples": 256, "tuning.cluster_blocks": 16, "tuning.cluster_threads": t,
                              "tuning.cluster_jam": False, "tuning.cluster_per_call": True} for t in (256, 512, 1024)})
# the weights in __device__ memory, not __constant__ (the tuning's whole_constant_limit 0)
VARIANTS.update({f"{v}-dev": dict(VARIANTS[v], **{"tuning.whole_constant_limit": 0}) for v in ("main", "auto256", "c16x256p")})
# every weight in __constant__ memory (the U-Net's 31 KB; the tuning's constant_limit is 6 KB)
VARIANTS.update({f"{v}-const": dict(VARIANTS[v], **{"tuning.constant_limit": 60 * 1024}) for v in ("main", "auto1024", "auto256", "c16x256p")})
# the producer-side epilogues (field_epilogue.py: conv + pool, conv + upsampling + Add)
VARIANTS.update({f"{v}-epi": dict(VARIANTS[v], **{"tuning.field_epilogues": "all"})
                 for v in ("main", "launch", "persist", "auto256", "c16x256p", "c16x256p-dev")})
VARIANTS.update({f"c16x{t}p-epi": dict(VARIANTS[f"c16x{t}p"], **{"tuning.field_epilogues": "all"})
                 for t in (512, 1024)})
# the clustered kernel with a register cap of 2 blocks per SM (``__launch_bounds__(256, 2)``)
VARIANTS.update({f"{v}-mb2": dict(VARIANTS[v], **{"tuning.cluster_min_blocks": 2}) for v in ("c16x256p", "c16x256p-epi")})
# the epilogues in the clustered kernel alone: all, with a register cap, pulled pools or pushed upsamplings only
CLUSTER_EPI = {"tuning.field_epilogues": "cluster"}
VARIANTS.update({"c16x256p-epic": dict(VARIANTS["c16x256p"], **CLUSTER_EPI),
                 "c16x256p-epic-mb2": dict(VARIANTS["c16x256p-mb2"], **CLUSTER_EPI),
                 "c16x256p-pullc": dict(VARIANTS["c16x256p"], **CLUSTER_EPI, **{"tuning.epilogue_push": False}),
                 "c16x256p-pushc": dict(VARIANTS["c16x256p"], **CLUSTER_EPI, **{"tuning.epilogue_pull": False})})
# the clustered kernel with phases computed where they are read
VARIANTS.update({f"{c}-{fused}": dict(VARIANTS[c], **VARIANTS[fused]) for c in ("c16x256", "c16x1024p", "auto1024")
                 for fused in ("fuse2", "fuse4", "exact2", "exact4")})
MODELS = {"unet": os.path.join("examples", "surrogates", "poisson_guess", "pguess.onnx"),
          "dwsep": os.path.join("build", "frontier", "dwsep", "dwsep.onnx")}
#: The variants each model is built in, the first the reference of the others' outputs.
BUILT = {"unet": ["main", "c16x1024p", "c16x512p", "c8x1024p", "c16x1024", "c16x1024p-fuse2"],
         "dwsep": ["main", "c16x1024p", "c16x256p"]}
if os.environ.get("VARIANTS"):
    BUILT = {"unet": os.environ["VARIANTS"].split(","), "dwsep": os.environ.get("DWSEP", "main").split(",")}

#: The per-call choice as the kernel file writes it, and what the forms replace it with.
CHOICE = "    if (needed > resident)\n        return {n}_phases(count, x, y, s);\n"
FORMS = {"persist": "    if (resident < 0)\n        return {n}_phases(count, x, y, s);\n    if (needed > resident)\n        needed = resident;\n",
         "launch": "    return {n}_phases(count, x, y, s);\n"}


def configure(variant):
    """The settings of ``variant``, with ``settings["tuning"]`` the :class:`rosenna.strategy.Tuning`
    of its "tuning.NAME" keys."""
    settings = dict(BASE, **VARIANTS[variant])
    settings["tuning"] = DEFAULT.replace(**{k.split(".")[1]: v for k, v in settings.items() if k.startswith("tuning.")})
    return settings


DRIVER = r"""// Generated by bench/studies/field18/field_variants.py: every variant's <name>_infer_batch timed in one process
// (rosenna_bench.cuh: the measurement, the inputs, verify's float32 rule).
#include <cstdlib>
#include <cstring>

#include "rosenna_bench.cuh"

%(decls)s

using namespace rosenna_bench;

static const Variant variants[] = {
%(table)s
};

int main()
{
    const int sizes[] = {1, 16, 256}, reps = 41;
    long nx = 0, ny = 0;
    for (const Variant &v : variants) {
        nx = std::max(nx, v.nx);
        ny = std::max(ny, v.ny);
    }
    float *x, *y;
    CK(cudaMalloc(&x, 256 * nx * sizeof(float)));
    CK(cudaMalloc(&y, 256 * ny * sizeof(float)));
    fill_inputs(256 * nx, x);
    const char *base = "", *only = getenv("ONLY");  // ONLY=model/variant: that variant alone (a profiler's run)
    std::vector<float> want[3], got;
    for (const Variant &v : variants) {
        const bool first = strcmp(base, v.model) != 0;
        if (first)
            base = v.model;
        char name[256];
        snprintf(name, sizeof name, "%%s/%%s", v.model, v.name);
        if (only && strcmp(only, name) != 0)
            continue;
        printf("%%s %%s (%%d phases): us per call, median of %%d\n", v.model, v.name, v.phases, reps);
        for (int k = 0; k < 3; ++k) {
            const int n = sizes[k];
            CK(cudaMemset(y, 0xFF, 256 * ny * sizeof(float)));
            for (int i = 0; i < WARMUPS; ++i)
                if (v.batch(n, x, y, 0) != 0) {
                    fprintf(stderr, "%%s %%s: infer_batch(%%d) failed\n", v.model, v.name, n);
                    return 1;
                }
            CK(cudaDeviceSynchronize());
            got.resize(n * v.ny);
            CK(cudaMemcpy(got.data(), y, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
            Timing t;
            if (time_calls(reps, [&] { v.batch(n, x, y, 0); }, &t))
                return 1;
            long bad = 0;
            if (first) {
                want[k] = got;
                for (float g : got)
                    bad += !std::isfinite(g);
            } else {
                bad = outside(got.data(), want[k].data(), got.size());
            }
            printf("  batch %%3d: %%8.1f us (min %%8.1f)  %%ld of %%zu outputs %%s\n", n, 1000 * t.median,
                   1000 * t.min, bad, got.size(), first ? "not finite" : "outside tol against the first variant");
        }
    }
    return 0;
}
"""


def _kept(d, name):
    """(kernel source, library, ptxas report) of an earlier build of variant ``name`` in ``d``, or None."""
    files = [os.path.join(d, f) for f in (f"{name}_kernel.cu", f"lib{name}.a", "ptxas.txt")]
    if not all(os.path.exists(f) for f in files):
        return None
    return open(files[0]).read(), open(files[1], "rb").read(), open(files[2]).read()


def build(out):
    os.makedirs(out, exist_ok=True)
    table, libs = [], []
    for model, path in MODELS.items():
        if not os.path.exists(path):
            raise SystemExit(f"{path}: missing; run `.venv/bin/python bench/frontier.py build --only dwsep` first")
        for variant in BUILT[model]:
            settings = configure(variant)
            form = settings["form"]
            name = f"{model}_{variant.replace('-', '_')}"
            d = os.path.join(out, "src", name)
            kept = _kept(d, name)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            plan, _ = generate(path, d, Options(name=name, lang="c", embed=True, tuning=settings["tuning"]))
            if form != "choice":
                src = os.path.join(d, f"{name}_kernel.cu")
                text = open(src).read()
                assert CHOICE.format(n=name) in text and "    const long needed = " in text
                text = text.replace(CHOICE.format(n=name), FORMS[form].format(n=name))
                open(src, "w").write(text.replace("    const long needed = ", "    long needed = "))
            if kept and open(os.path.join(d, f"{name}_kernel.cu")).read() == kept[0]:
                open(os.path.join(d, f"lib{name}.a"), "wb").write(kept[1])  # the same source: its library
                open(os.path.join(d, "ptxas.txt"), "w").write(kept[2])
            libs.append((name, d))
            field = strategy.decide(plan).field
            phases = min(len(s.phases) for s in (field.launched, field.persistent, field.cluster))  # the fused form's, if any
            table.append((name, model, variant, phases, plan.nx, plan.ny))
            print(f"{model} {variant}: {phases} phases", flush=True)

    def make(job):
        name, d = job
        if os.path.exists(os.path.join(d, f"lib{name}.a")):
            return os.path.join(d, f"lib{name}.a")
        lib = subprocess.run(["make", "-s", "-f", f"{name}.mk", "ROSENNA_BACKEND=cuda", "CC=gcc",
                              "ROSENNA_OFFLOAD_FLAGS=", f"DEVFLAGS=-O3 {ARCH} -Xptxas -v", f"lib{name}.a"],
                             cwd=d, capture_output=True, text=True)
        if lib.returncode:
            raise SystemExit(f"{name}: {lib.stderr[-3000:]}")
        open(os.path.join(d, "ptxas.txt"), "w").write(lib.stderr)
        return os.path.join(d, f"lib{name}.a")

    with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as pool:
        libs = list(pool.map(make, libs))
    decls = "\n".join(f'extern "C" int {name}_infer_batch(int n, const float *x, float *y, void *stream);'
                      for name, *_ in table)
    rows = "\n".join(f'    {{"{model}", "{variant}", {phases}, {nx}, {ny}, {name}_infer_batch}},'
                     for name, model, variant, phases, nx, ny in table)
    driver = os.path.join(out, "src", "driver.cu")
    open(driver, "w").write(DRIVER % {"decls": decls, "table": rows})
    bench_header.install(os.path.dirname(driver))
    subprocess.run(["nvcc", "-O3", ARCH, driver] + libs + ["-o", os.path.join(out, "variants")], check=True)
    subprocess.run(["strip", os.path.join(out, "variants")], check=True)
    for name, *_ in table:  # keep the kernel sources, libraries and ptxas reports
        d = os.path.join(out, "src", name)
        for f in os.listdir(d):
            if f not in ("ptxas.txt", f"{name}_kernel.cu", f"lib{name}.a"):
                os.remove(os.path.join(d, f))
    open(os.path.join(out, "run.sh"), "w").write(
        "#!/bin/bash\n# Generated by bench/studies/field18/field_variants.py: run from the repository root.\nset -e\n"
        'echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"\n'
        '"$(dirname "$0")/variants"\n')
    return 0


if __name__ == "__main__":
    sys.exit(build(sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "dev-field18")))
