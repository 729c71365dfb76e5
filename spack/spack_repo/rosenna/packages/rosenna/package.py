# Copyright rosenna developers.
#
# SPDX-License-Identifier: BSD-3-Clause
"""Spack recipe for rosenna (Package API v2, Spack 1.x).

Kept in the rosenna repository beside the code it installs; docs/spack.md records how it was
tested with a Spack 1.x checkout and the spack-packages builtin repository.
"""

import glob
import os

from spack_repo.builtin.build_systems.python import PythonPackage

from spack.package import *


class Rosenna(PythonPackage):
    """Compile ONNX models into per-point C and Fortran inference routines that run inside a
    scientific solver's own CPU and GPU loops (OpenMP/OpenACC offload, CUDA/HIP kernels)."""

    # rosenna's public home (the GitHub organisation and PyPI project named here) is still to be
    # created; until then a site points url/git at its own copy with packages.yaml
    # package_attributes, or puts the release sdist in a mirror (docs/spack.md).
    homepage = "https://github.com/rosenna/rosenna"
    pypi = "rosenna/rosenna-0.1.0.tar.gz"
    git = "https://github.com/rosenna/rosenna.git"

    # GitHub account of the rosenna developers (the project's, until maintainers are named).
    maintainers("rosenna")

    license("BSD-3-Clause", checked_by="rosenna")

    version("main", branch="main")
    # Each release: the reproducible sdist (buildsys/reproducible_sdist.py: the same bytes from one
    # commit) of its release commit, cut by buildsys/release.py; docs/releasing.md says how to
    # rebuild it and compare, and tests/test_packaging.py does.
    # 0.2.0: release commit 72bec0d1062408c5006ae846a504910b68ab3454, sdist built with setuptools 84.2.1
    version("0.2.0", sha256="d6a53ed11e458355e16da4c4f747aa03b3c83d8fa2403a6c2207e1d6343c7ec1")
    # 0.1.0: release commit 2adc9154b3b1bd9d2b802b5695678ca285a49e3d, sdist built with setuptools 84.2.1
    version("0.1.0", sha256="f480ac7640f12f4c18751495d6fac9a40789c8fdf6ee666b55d99ac6cbec2854")

    variant(
        "verify",
        default=True,
        description="Depend on onnxruntime and the C and Fortran compilers that `rosenna verify` "
        "and `rosenna gpu-gate` use; pip's rosenna[verify]. Cost: Spack builds onnxruntime from "
        "source (a large CMake build with protobuf, abseil-cpp, re2 and more), tens of minutes and "
        "most of the install's time; ~verify installs a generate-only rosenna in seconds",
    )

    # Keep in step with install_requires in setup.cfg: tests/test_packaging.py compares them.
    depends_on("python@3.9:", type=("build", "run"))
    depends_on("py-setuptools@61:", type="build")
    depends_on("py-onnx@1.14:", type=("build", "run"))
    depends_on("py-numpy@1.22:", type=("build", "run"))
    depends_on("py-archspec@0.2:", type=("build", "run"))
    depends_on("py-pyyaml@5.4:", type=("build", "run"))
    depends_on("py-jsonschema@4.0:", type=("build", "run"))
    with when("+verify"):
        depends_on("py-onnxruntime@1.15:", type=("build", "run"))
        # verify compiles the generated C and Fortran with the compilers of the spec. "build"
        # too: Spack's python recipe expects a compiler wrapper beside any c dependency.
        depends_on("c", type=("build", "run"))
        depends_on("fortran", type=("build", "run"))

    @property
    def import_modules(self):
        """What `spack test run` imports: rosenna's entry points, and every run dependency by its
        own module name (rosenna imports some of them only when a command needs them, so
        importing rosenna alone would pass without them)."""
        modules = ["rosenna", "rosenna.cli", "rosenna.toolchain", "rosenna.generate",
                   "onnx", "numpy", "archspec.cpu", "yaml", "jsonschema"]
        if self.spec.satisfies("+verify"):
            modules += ["onnxruntime", "rosenna.verify"]
        return modules

    @property
    def toolchains_dir(self):
        """The site profile folder inside the prefix; rosenna searches it before its built-ins."""
        return join_path(self.prefix.share, "rosenna", "toolchains")

    @run_after("install")
    def make_toolchains_dir(self):
        mkdirp(self.toolchains_dir)

    def setup_run_environment(self, env):
        """Site profiles: the module (and `spack load`) puts this install's profile folder on
        ROSENNA_TOOLCHAIN_PATH, so a batch job that loads the module finds them even where the
        scheduler passes no environment (PBS without -V). A site keeps its profiles in a folder of
        its own and adds it in modules.yaml (docs/spack.md), which changes no hash: the profiles
        are configuration, edited without reinstalling."""
        env.prepend_path("ROSENNA_TOOLCHAIN_PATH", self.toolchains_dir)

    def _compiler_env(self):
        """CC and FC for verify: the compilers the spec was concretized with."""
        return {
            "CC": self.spec["c"].package.cc,
            "FC": self.spec["fortran"].package.fortran,
        }

    def test_version(self):
        """rosenna --version prints the version of the spec"""
        rosenna = which(self.prefix.bin.rosenna, required=True)
        out = rosenna("--version", output=str.split, error=str.split)
        expected = "rosenna" if self.spec.satisfies("@main") else f"rosenna {self.version}"
        assert expected in out, f"expected {expected!r} in {out!r}"

    def test_generate_verify_gemm_small(self):
        """generate gemm_small, then verify it against onnxruntime with the spec's compilers"""
        rosenna = which(self.prefix.bin.rosenna, required=True)
        rosenna("zoo", "gemm_small", "-o", "gemm_small.onnx")
        rosenna("generate", "gemm_small.onnx", "--out", "gemm_small")
        generated = os.listdir("gemm_small")
        assert any(f.endswith(".c") for f in generated), f"no C source in {generated}"
        assert any(f.endswith((".f90", ".F90")) for f in generated), f"no Fortran in {generated}"
        if not self.spec.satisfies("+verify"):
            raise SkipTest("verify needs +verify (onnxruntime and the compilers)")
        compilers = self._compiler_env()
        print("verify with " + " ".join(f"{k}={v}" for k, v in compilers.items()))
        with set_env(**compilers):
            out = rosenna("verify", "gemm_small.onnx", output=str.split, error=str.split)
        assert "FAIL" not in out, out

    def test_toolchain_profiles(self):
        """the built-in profiles are installed and rosenna lists them"""
        builtin = join_path(self.toolchains_dir, "builtin")
        assert glob.glob(join_path(builtin, "gcc.yaml")), f"no gcc.yaml in {builtin}"
        rosenna = which(self.prefix.bin.rosenna, required=True)
        out = rosenna("toolchain", "list", output=str.split, error=str.split)
        assert "gcc" in out, out
