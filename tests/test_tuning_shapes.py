"""Kernel shapes are Tuning fields: a non-default value changes the generated text as it says, and
the default leaves it as it was (bench/snapshot_generated.py checks the whole of it)."""

import pytest

import op_models
from rosenna import generate as gen
from rosenna.strategy import Tuning

CLUSTERED = dict(cluster_samples=256, cluster_min_phases=0)


@pytest.fixture(scope="module")
def convnet(tmp_path_factory):
    return op_models.convnet(tmp_path_factory.mktemp("shapes") / "convnet.onnx")


def kernel_text(path, **values):
    """The CUDA whole-field kernel file's text of the conv net under the defaults with ``values``."""
    from rosenna.emit.cuda import whole_field

    _, plan = gen.build_plan(path, gen.Options(lang="c", tuning=Tuning().replace(**values)))
    return whole_field.infer_one(plan)


def test_whole_field_block_shapes(convnet):
    """field_threads sizes the launched phases' blocks, field_persistent_threads <name>_field's
    (and its launch), field_persistent_waves lets the persistent kernel stride."""
    default = kernel_text(convnet, smem_conv="")
    assert "__launch_bounds__(256) convnet_phase0(" in default and "__launch_bounds__(256) convnet_field(" in default
    assert "needed > 2l * resident" not in default
    text = kernel_text(convnet, smem_conv="", field_threads=512, field_persistent_threads=128, field_persistent_waves=2)
    assert "__launch_bounds__(512) convnet_phase0(" in text and "(long)blockIdx.x * 512 + threadIdx.x" in text
    assert "__launch_bounds__(128) convnet_field(" in text and "dim3((unsigned)needed), dim3(128)" in text
    assert "needed > 2l * resident" in text


def test_cluster_shape(convnet):
    """cluster_blocks and cluster_threads shape <name>_cluster, its launch and <name>_run's test;
    8 blocks need no non-portable cluster attribute."""
    default = kernel_text(convnet, **CLUSTERED)
    assert "/* 16 blocks per cluster: a constant step */" in default
    assert "__launch_bounds__(256) convnet_cluster(" in default and "NonPortableClusterSizeAllowed" in default
    text = kernel_text(convnet, **CLUSTERED, cluster_blocks=8, cluster_threads=128)
    assert "/* 8 blocks per cluster: a constant step */" in text and "step = 1024l;" in text
    assert "__launch_bounds__(128) convnet_cluster(" in text and "config.blockDim = dim3(128);" in text
    assert "(long)count * 8 <= resident" in text and "NonPortableClusterSizeAllowed" not in text


def test_tiles_keep_to_the_block(convnet):
    """A shared-memory tile that needs more threads than the clustered or persistent block has is
    not taken there (the direct loops are), rather than failing."""
    default = kernel_text(convnet, **CLUSTERED)
    assert "convnet_sm, 256);" in default
    text = kernel_text(convnet, **CLUSTERED, cluster_threads=32, field_persistent_threads=32)
    assert "convnet_sm, 32);" not in text and "convnet_sm, 256);" not in text
    assert "__launch_bounds__(32) convnet_cluster(" in text and "__launch_bounds__(32) convnet_field(" in text
