"""Shared-memory tiled convs of the CUDA whole-field path (rosenna/emit/cuda/conv_smem.py) against the
kernels they replace, on one GPU (results/measurement-log.md, "Shared-memory conv tiles").

    .venv/bin/python bench/studies/smem18/smem_study.py build/dev-smem18     # here: export, generate, build
    bash build/dev-smem18/run.sh                             # there: time, check

The driver and the way variants are built are bench/studies/field18/field_variants.py's (one process, every variant's
``<name>_infer_batch`` at 1, 16 and 256 samples, µs per call as the median of 41 CUDA-event timings,
outputs outside verify's float32 tolerance against the model's first variant). Models: the examples'
U-Net (poisson_guess, 8 channels), bench/frontier.py's depthwise-separable net (2 -> 24 channels,
16x16; its ONNX file from ``bench/frontier.py build --only dwsep``), the gate's conv net
(tests/op_models.convnet: 2 -> 8 -> 8 -> 1 over 64x64) and bench/studies/igemm18/igemm_study.py's 32-channel net
(4 -> 32 -> 32 -> 32 -> 2 over 64x64). Variants: ``main`` (no tiled convs: the generator's default
before this study), ``cluster`` (main with the clustered kernel for up to 16 samples, as shipped on
sm_90), and ``s-c<C>r<R>``: every eligible conv tiled with C output channels and R rows per thread
(``-ni``: tiled even where the implicit GEMM would take the call; ``cl-``: with the clustered kernel;
``-L``: tiled in the launched phases only); ``shipped`` (the generator's defaults), ``shipped-nocl``
(without the clustered kernel), and those with one form's tiling changed (``-p21``: 2 channels x
1 row per thread in the persistent kernel, ``-c12``: 1 x 2 in the clustered one).
``WORK`` names the folder of sources and libraries, ``VARIANTS`` (``model:variant,...;model:...``)
what is built. The build directory holds only
``run.sh`` and the gzipped drivers (``variants-<WORK's name>.gz``: builds with another ``WORK`` add
theirs, and ``run.sh`` runs them all); sources and libraries stay in ``WORK``.
"""

import gzip
import os
import shutil
import sys

_STUDIES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(os.path.dirname(_STUDIES)), os.path.dirname(_STUDIES), os.path.join(_STUDIES, "field18"),
                os.path.join(_STUDIES, "igemm18")]

import field_variants  # noqa: E402
from rosenna.strategy import Tuning  # noqa: E402

FORMS = ("launched", "persistent", "cluster")

WORK = os.environ.get("WORK", os.path.join("build", "smem-study"))


def _shape(form, channels, rows):
    """The tuning keys of ``channels`` x ``rows`` per thread (and depthwise rows) in ``form``."""
    return {f"tuning.smem_channels_{form}": channels, f"tuning.smem_rows_{form}": rows,
            f"tuning.smem_depthwise_rows_{form}": rows}


def _shipped_shapes():
    """The tuning keys of the generator's default tile shapes in every form."""
    default = Tuning()
    return {f"tuning.smem_{what}_{form}": getattr(default, f"smem_{what}_{form}")
            for form in FORMS for what in ("channels", "rows", "depthwise_rows")}


def _tiled(channels, rows, igemm_first=True):
    """Every eligible conv tiled, with ``channels`` x ``rows`` per thread in every form."""
    shapes = {}
    for form in FORMS:
        shapes.update(_shape(form, channels, rows))
    return {"tuning.smem_conv": "all", **shapes, "tuning.smem_igemm_first": igemm_first}


CLUSTER = {"tuning.cluster_samples": 16, "tuning.cluster_jam": False}
#: the generator's defaults (tiled convs, the tuning's tile shapes per form, the clustered kernel for
#: up to 16 samples), and the same without the clustered kernel
SHIPPED = dict(CLUSTER, **{"tuning.smem_conv": "all", **_shipped_shapes()})
VARIANTS = {"cluster": CLUSTER, "shipped": SHIPPED, "shipped-nocl": dict(SHIPPED, **{"tuning.cluster_samples": 0}),
            # the shipped tilings but one form's (channels, rows) per thread: p = persistent, c = clustered
            **{f"{base}-{f[0]}{c}{r}": dict(SHIPPED, **{"tuning.cluster_samples": 16 if base == "shipped" else 0,
                                                     **_shape(f, c, r)})
               for base in ("shipped", "shipped-nocl") for f in ("persistent", "cluster") for c in (1, 2, 4) for r in (1, 2)},
            **{f"s-c{c}r{r}": _tiled(c, r) for c in (1, 2, 4, 8, 16, 32) for r in (1, 2, 4)},
            **{f"s-c{c}r{r}-ni": _tiled(c, r, False) for c in (1, 2, 4, 8, 16, 32) for r in (1, 2, 4)}}
VARIANTS.update({f"cl-{v}": dict(CLUSTER, **settings) for v, settings in list(VARIANTS.items()) if v.startswith("s-")})
# tiled in the launched phases only (the persistent and clustered kernels keep the direct loops)
VARIANTS.update({f"{v}-L": dict(settings, **{"tuning.smem_persistent": False, "tuning.smem_cluster": False})
                 for v, settings in list(VARIANTS.items())
                 if v.startswith(("s-", "cl-s-"))})
#: round B's build (round A: VARIANTS="unet:main,cluster,s-c4r2,s-c8r2,s-c8r1,s-c1r1,s-c8r2-ni;
#: dwsep:main,cluster,s-c4r2,s-c4r1,s-c4r4;convnet:main,s-c8r2,s-c8r1,s-c1r1,s-c8r2-ni;
#: conv32:main,s-c8r2,s-c32r1,s-c32r1-ni")
BUILT = {model: ["main", "shipped", "shipped-nocl"] for model in ("unet", "dwsep", "convnet", "conv32")}
if os.environ.get("VARIANTS"):  # model:variant,variant;model:...
    BUILT = {m: v.split(",") for m, v in (part.split(":") for part in os.environ["VARIANTS"].split(";"))}


RUN = """#!/bin/bash
# Generated by bench/studies/smem18/smem_study.py: run from the repository root. Each gzipped driver prints us per
# call at 1/16/256 samples and the outputs outside verify's tolerance against the model's first variant.
set -e
D="$(dirname "$0")"
T="$(mktemp -d)"
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for f in "$D"/variants-*.gz; do
    k="$(basename "$f" .gz)"
    gunzip -c "$f" > "$T/$k"
    chmod +x "$T/$k"
    echo "-- $k"
    timeout 100 "$T/$k" || echo "$k: exit $?"
done
rm -rf "$T"
"""


def models():
    """The study's ONNX files (exported into :data:`WORK` where they are not in the repository)."""
    import igemm_study
    from tests import op_models

    os.makedirs(WORK, exist_ok=True)
    paths = {"unet": field_variants.MODELS["unet"], "dwsep": field_variants.MODELS["dwsep"],
             "convnet": os.path.join(WORK, "convnet.onnx"), "conv32": os.path.join(WORK, "conv32.onnx")}
    if not os.path.exists(paths["convnet"]):
        op_models.convnet(paths["convnet"])
    if not os.path.exists(paths["conv32"]):
        igemm_study.export(WORK, "conv32")
    return {m: paths[m] for m in BUILT}


def main(out):
    field_variants.MODELS = models()
    field_variants.BUILT = BUILT
    field_variants.VARIANTS.update(VARIANTS)
    field_variants.BASE.update({"tuning.smem_conv": "", **_shipped_shapes(), "tuning.smem_igemm_first": True,
                                "tuning.smem_launched": True, "tuning.smem_persistent": True, "tuning.smem_cluster": True})
    field_variants.build(WORK)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(WORK, "variants"), "rb") as f, \
            gzip.open(os.path.join(out, f"variants-{os.path.basename(WORK)}.gz"), "wb") as g:
        shutil.copyfileobj(f, g)
    with open(os.path.join(out, "run.sh"), "w") as f:  # every driver built into `out`, one after the other
        f.write(RUN)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "dev-smem18")))
