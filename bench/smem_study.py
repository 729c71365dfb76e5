"""Shared-memory tiled convs of the CUDA whole-field path (rosenna/emit/cuda/conv_smem.py) against the
kernels they replace, on one GPU (docs/benchmarks.md, "Shared-memory conv tiles").

    .venv/bin/python bench/smem_study.py build/dev-smem18     # here: export, generate, build
    bash build/dev-smem18/run.sh                             # there: time, check

The driver and the way variants are built are bench/field_variants.py's (one process, every variant's
``<name>_infer_batch`` at 1, 16 and 256 samples, µs per call as the median of 41 CUDA-event timings,
outputs outside verify's float32 tolerance against the model's first variant). Models: the examples'
U-Net (poisson_guess, 8 channels), bench/frontier.py's depthwise-separable net (2 -> 24 channels,
16x16; its ONNX file from ``bench/frontier.py build --only dwsep``), the gate's conv net
(tests/op_models.convnet: 2 -> 8 -> 8 -> 1 over 64x64) and bench/igemm_study.py's 32-channel net
(4 -> 32 -> 32 -> 32 -> 2 over 64x64). Variants: ``main`` (no tiled convs: the generator's default
before this study), ``cluster`` (main with the clustered kernel for up to 16 samples, as shipped on
sm_90), and ``s-c<C>r<R>``: every eligible conv tiled with C output channels and R rows per thread
(``-ni``: tiled even where the implicit GEMM would take the call). The build directory holds only
``run.sh`` and the driver; sources and libraries stay in ``build/smem-study``.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import field_variants  # noqa: E402
from rosenna.emit.cuda import conv_smem  # noqa: E402

WORK = os.path.join("build", "smem-study")


def _tiled(channels, rows, igemm_first=True):
    return {"limits.SMEM_CONV": "all", "conv_smem.CHANNELS": channels, "conv_smem.ROWS": rows,
            "conv_smem.IGEMM_FIRST": igemm_first}


VARIANTS = {"cluster": {"limits.CUDA_CLUSTER_SAMPLES": 16, "field_cluster.JAM": False},
            **{f"s-c{c}r{r}": _tiled(c, r) for c in (1, 2, 4, 8) for r in (1, 2, 4)},
            **{f"s-c{c}r{r}-ni": _tiled(c, r, False) for c in (1, 2, 4, 8) for r in (1, 2, 4)}}
BUILT = {"unet": ["main", "cluster", "s-c4r2", "s-c8r2", "s-c1r1", "s-c4r2-ni"],
         "dwsep": ["main", "cluster", "s-c4r2", "s-c4r1", "s-c4r4"],
         "convnet": ["main", "s-c4r2", "s-c8r2", "s-c1r1", "s-c4r2-ni"],
         "conv32": ["main", "s-c4r2", "s-c8r4", "s-c4r2-ni"]}
if os.environ.get("VARIANTS"):  # model:variant,variant;model:...
    BUILT = {m: v.split(",") for m, v in (part.split(":") for part in os.environ["VARIANTS"].split(";"))}


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
    field_variants.MODULES["conv_smem"] = conv_smem
    field_variants.BASE.update({"limits.SMEM_CONV": "", "conv_smem.CHANNELS": conv_smem.CHANNELS,
                                "conv_smem.ROWS": conv_smem.ROWS, "conv_smem.IGEMM_FIRST": True})
    field_variants.build(WORK)
    os.makedirs(out, exist_ok=True)
    for f in ("run.sh", "variants"):
        shutil.copy(os.path.join(WORK, f), os.path.join(out, f))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "dev-smem18")))
