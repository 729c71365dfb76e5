import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import models  # noqa: E402

# generate's fsyncs (rosenna.outdir) cost ~80 ms a model here; the suite's output is scratch
os.environ.setdefault("ROSENNA_NO_FSYNC", "1")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """One directory of test models per xdist worker (each worker writes its own)."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def model(model_dir):
    """``model("gemm_small")`` -> path of the test model, written once per worker."""
    return lambda name: models.write(name, model_dir)


def have(tool):
    return shutil.which(tool) is not None




# -- test tiers ----------------------------------------------------------------------------------
# Each test gets the markers of what it needs (registered in setup.cfg): host (builds or runs code
# with gcc/gfortran/make), nvcc, hipcc, gpu. They are read off the test's own source and that of
# the module-level helpers it calls, and off its skip conditions, so a new test is tiered without
# anyone remembering to: `pytest -m "not nvcc and not hipcc"` runs where no device compiler is.
import ast  # noqa: E402
import inspect  # noqa: E402

_TIER_WORDS = {
    "nvcc": ("nvcc",),
    "hipcc": ("hipcc",),
    "gpu": ("nvidia-smi", "CUDA_VISIBLE_DEVICES", "needs a GPU"),
    "host": ("gcc", "gfortran", '"make"', "'make'", "subprocess", "run_packing", "compile", "verify(", "_build("),
}


def _test_text(item, cache={}):
    fn = getattr(item, "function", None)
    if fn is None:
        return ""
    key = (item.module.__name__, fn.__name__)
    if key not in cache:
        try:
            text = inspect.getsource(fn)
            called = {n.func.id for n in ast.walk(ast.parse(inspect.cleandoc("\n" + text)))
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            for name in called:
                helper = getattr(item.module, name, None)
                if inspect.isfunction(helper) and helper.__module__ == item.module.__name__:
                    text += inspect.getsource(helper)
        except (OSError, TypeError, SyntaxError):
            text = ""
        reasons = " ".join(str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
        cache[key] = text + reasons
    return cache[key]


def pytest_collection_modifyitems(config, items):
    for item in items:
        text = _test_text(item)
        for tier, words in _TIER_WORDS.items():
            if any(word in text for word in words) and not item.get_closest_marker(tier):
                item.add_marker(getattr(pytest.mark, tier))
