"""Golden files: a small model's generated C, Fortran and CUDA, byte for byte.

tests/golden/gemm_small/ holds what ``rosenna generate gemm_small.onnx --embed-weights`` writes
for the built-in gemm_small, for a generic x86_64 CPU and sm_80 (header, C file, kernel file, Fortran module, runtime header; the
.mk files are left out: they name the host's compilers). A change to generated text, wanted or
not, shows here as a diff; when it is wanted, regenerate the files and commit them with the
change that made them:

    .venv/bin/python tests/test_golden.py --update
"""

import difflib
import pathlib
import sys
import tempfile

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "gemm_small"
FILES = ("rosenna_rt.h", "gemm_small.h", "gemm_small.c", "gemm_small_kernel.cu", "gemm_small_model.F90")


def generated(out):
    """Generate gemm_small into ``out``; return {file: text}."""
    from rosenna import toolchain, zoo
    from rosenna.generate import Options, generate

    model = zoo.save("gemm_small", str(pathlib.Path(out) / "gemm_small.onnx"))
    # A fixed CPU and GPU: the stamp names them, and this host's must not matter.
    profile = toolchain.resolve(None, target="x86_64", gpu_arch="sm_80")
    generate(model, str(pathlib.Path(out) / "gen"), Options.from_profile(profile, lang="both", embed=True))
    return {f: (pathlib.Path(out) / "gen" / f).read_text() for f in FILES}


def test_generated_files_match_the_golden_files(tmp_path):
    got = generated(tmp_path)
    for name in FILES:
        want = (GOLDEN / name).read_text()
        if got[name] != want:
            diff = "".join(list(difflib.unified_diff(want.splitlines(True), got[name].splitlines(True),
                                                     f"golden/{name}", f"generated/{name}"))[:60])
            raise AssertionError(f"{name} differs from tests/golden/gemm_small/{name}; if the change is "
                                 f"wanted: .venv/bin/python tests/test_golden.py --update\n{diff}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_golden.py --update")
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in generated(tmp).items():
            (GOLDEN / name).write_text(text)
            print(GOLDEN / name)
