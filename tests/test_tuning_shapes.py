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


@pytest.fixture(scope="module")
def mlp128(tmp_path_factory):
    from rosenna import zoo

    return zoo.save("mlp128", str(tmp_path_factory.mktemp("shapes") / "mlp128.onnx"))


def wide_text(path, tmp_path, **values):
    """``<name>_kernel.cu`` of mlp128 (the wide 3xTF32 kernel's model) under the defaults with ``values``."""
    out = tmp_path / "_".join(f"{k}{v}" for k, v in values.items())
    gen.generate(path, str(out), gen.Options(lang="c", tuning=Tuning().replace(**values)))
    return (out / "mlp128_kernel.cu").read_text()


def test_wide_kernel_shape(mlp128, tmp_path):
    """wide_persistent gives the wide kernel a persistent grid (no more blocks than are resident);
    wide_compact_from decides its compact fragments (the template's last argument), which a
    persistent grid takes only with wide_persistent_compact."""
    default = wide_text(mlp128, tmp_path)
    assert "mlp128_tc_kernel<<<(unsigned)((long)n + 127) / 128" in default
    assert "wanted < resident ? wanted : resident" not in default
    persistent = wide_text(mlp128, tmp_path, wide_persistent=True)
    assert "mlp128_tc_kernel<<<(unsigned)(wanted < resident ? wanted : resident)" in persistent
    assert "rosenna_tcw_stage<17, 256, 2, 8, 2, 132, false>(" in default  # 16-byte fragments at 128 wide
    compact = wide_text(mlp128, tmp_path, wide_compact_from=1, wide_persistent=True)
    assert "rosenna_tcw_stage<17, 256, 2, 8, 2, 132, true>(" in compact
    assert "wanted < resident ? wanted : resident" not in compact  # compact fragments: launched per block
    both = wide_text(mlp128, tmp_path, wide_compact_from=1, wide_persistent=True, wide_persistent_compact=True)
    assert "wanted < resident ? wanted : resident" in both
    # each weight once: the compact fragments have half the literals (every copy written as literals)
    assert (len(wide_text(mlp128, tmp_path, wide_compact_from=1, compile_pack_floats=0))
            < len(wide_text(mlp128, tmp_path, compile_pack_floats=0)))


def test_dmma_shape(tmp_path):
    """dmma_tiles_32 sets the FP64 DMMA kernel's tiles per warp (its points per block) for a 32-wide
    chain, dmma_blocks_32 its __launch_bounds__' blocks per SM."""
    import numpy as np
    import onnx

    from rosenna import zoo

    path = str(tmp_path / "d4.onnx")
    onnx.save(zoo.mlp("d4", [4, 32, 32, 2], ["Tanh", "Tanh", None], np.float64, seed=4), path)

    def text(**values):
        out = tmp_path / ("gen" + "".join(f"_{k}{v}" for k, v in values.items()))
        gen.generate(path, str(out), gen.Options(lang="c", tuning=Tuning().replace(**values)))
        return (out / "d4_kernel.cu").read_text()

    default, other = text(), text(dmma_tiles_32=4, dmma_blocks_32=1)
    assert "__launch_bounds__(256, 2) d4_tc_kernel(int n, const double" in default
    assert "__launch_bounds__(256) d4_tc_kernel(int n, const double" in other
    assert "(long)n + 127) / 128" in default and "(long)n + 255) / 256" in other


def test_igemm_shape(convnet):
    """igemm_warps sizes the implicit-GEMM conv's blocks and launch; igemm_max_mt, igemm_partial and
    igemm_unroll_kt its tile template's arguments (m16 tiles, k8 tiles per partial sum, unrolled steps)."""
    default = kernel_text(convnet)
    assert "__launch_bounds__(128) convnet_igemm1(" in default
    assert "convnet_igemm1<<<(unsigned)((count * 128l + 3) / 4), 128, 0, s>>>" in default
    assert "9, 1, 1, 2, 8, false, 2, 5>(in, ty * 4, tx * 8, F, acc);" in default
    text = kernel_text(convnet, igemm_warps=8, igemm_max_mt=1, igemm_partial=3, igemm_unroll_kt=4)
    assert "__launch_bounds__(256) convnet_igemm1(" in text
    assert "convnet_igemm1<<<(unsigned)((count * 256l + 7) / 8), 256, 0, s>>>" in text
    assert "9, 1, 1, 1, 8, false, 3, 1>(in, ty * 2, tx * 8, F, acc);" in text


def test_loop_jam_and_unroll(convnet, tmp_path):
    """host_jam caps the output channels a host SIMD loop sums at once (8 per pass by default on
    this net's 16-channel convs, 4 with host_jam=4); host_unroll keeps the tap loops as loops;
    cuda_jam the channels a CUDA launched phase computes per thread. The plan's loops
    (host_conv=false): the register-blocked convs have blocks of their own (tests/test_host_conv.py)."""
    def c_text(**values):
        out = tmp_path / ("c" + "".join(f"_{k}{v}" for k, v in values.items()))
        gen.generate(convnet, str(out), gen.Options(lang="c", tuning=Tuning().replace(host_conv=False, **values)))
        return (out / "convnet.c").read_text()

    default = c_text()
    assert "acc_7" in default and default.count("for (int") == 712
    narrow = c_text(host_jam=4)
    assert "acc_3" in narrow and "acc_4" not in narrow
    rolled = c_text(host_unroll=1, host_unroll_whole=0)
    assert rolled.count("for (int") > 712
    assert "acc_7" in kernel_text(convnet, smem_conv="") and "acc_7" not in kernel_text(convnet, smem_conv="", cuda_jam=2)


def test_shape_fields_are_bounded():
    """A block size past the hardware's 1,024 threads or a cluster past 16 blocks is refused with
    a one-line error, on the command line and in a profile's schema alike."""
    from rosenna.strategy.tuning import TuningError, tuning_schema

    for item, words in (("cluster_threads=2048", "at most 1024"), ("cluster_blocks=32", "at most 16"),
                        ("field_threads=0", "at least 1"), ("igemm_warps=33", "at most 32")):
        with pytest.raises(TuningError, match=words):
            Tuning().parse_overrides([item])
    fields = tuning_schema()["patternProperties"]["^(default|sm_[0-9]{2,3}a?|gfx[0-9a-f]+)$"]["properties"]
    assert fields["cluster_threads"]["maximum"] == 1024 and "maximum" not in fields["whole_threshold"]


def test_point_and_chain_blocks(tmp_path):
    """point_threads sizes the one-point-per-thread kernel (gemm_small's narrow FP32 kernel);
    chain_warps the 3xTF32 register-chain kernel's blocks (a 5-64-64-3 SiLU-like MLP)."""
    import onnx

    from rosenna import zoo

    small = zoo.save("gemm_small", str(tmp_path / "gemm_small.onnx"))
    onnx.save(zoo.mlp("c64", [5, 64, 64, 3], ["Sigmoid", "Sigmoid", None], seed=5), str(tmp_path / "c64.onnx"))

    def text(path, name, **values):
        out = tmp_path / (name + "".join(f"_{k}{v}" for k, v in values.items()))
        gen.generate(path, str(out), gen.Options(lang="c", tuning=Tuning().replace(**values)))
        return (out / f"{name}_kernel.cu").read_text()

    assert "__launch_bounds__(256) gemm_small_batch_kernel(" in text(small, "gemm_small")
    assert "__launch_bounds__(128) gemm_small_batch_kernel(" in text(small, "gemm_small", point_threads=128)
    chain = text(str(tmp_path / "c64.onnx"), "c64")
    assert "__launch_bounds__(128) c64_tc_kernel(" in chain and "base += (long)gridDim.x * 64)" in chain
    chain8 = text(str(tmp_path / "c64.onnx"), "c64", chain_warps=8)
    assert "__launch_bounds__(256) c64_tc_kernel(" in chain8 and "base += (long)gridDim.x * 128)" in chain8
