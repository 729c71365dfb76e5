import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import models  # noqa: E402


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


