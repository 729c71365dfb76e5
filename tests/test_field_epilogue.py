"""Producer-side epilogues of the CUDA/HIP whole-field phases (rosenna/strategy/field/epilogue.py):
a conv's threads mapped to pool windows, a conv's thread writing its upsampled-and-added elements.
The fused phases as the kernel file holds them run on the host (tests/test_infer_one.py
emulate_launches, tests/test_field_fuse.py emulate_clusters) against onnxruntime, on the small U-Net
and on nets unlike it (MaxPools, 3 channels, a conv output read by an epilogue and a later op, an
odd extent a pool does not divide, a Resize upsampling)."""

import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import op_models
from rosenna import generate as gen
from rosenna import strategy
from rosenna.emit.cuda import field_fuse
from rosenna.strategy.field import convs, epilogue as field_epilogue, fusion, rewrite as field_rewrite
from rosenna.loopir import Assign, Idx, Loop, Ref, Var
from rosenna.parallel import launch_groups
from rosenna.strategy import Tuning
from test_field_fuse import emulate_clusters
from test_infer_one import assert_close, emulate_launches, reference


@pytest.fixture(scope="module")
def unet_path(tmp_path_factory):
    return op_models.unet(tmp_path_factory.mktemp("unet") / "unet.onnx")


def odd_net(path, size=8, channels=3, odd=False):
    """field[1, 1, S, S] -> a = Conv (channels); p = MaxPool 2x2/2 of a; b = Conv of p; the Reshape/
    Concat nearest upsampling of b plus a; c = Conv of that; q = MaxPool of c; t = q + b (b's second
    reader); out = Conv of t to one channel. With ``odd`` the field is S + 1 wide and tall and the
    net stops after b: the pool leaves a's last row and column unread."""
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    n = size + 1 if odd else size

    def conv(name, src, cin, cout):
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.w"),
                      numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), f"{name}.b")])
        nodes.append(helper.make_node("Conv", [src, f"{name}.w", f"{name}.b"], [name], pads=[1, 1, 1, 1]))
        return name

    def pool(name, src):
        nodes.append(helper.make_node("MaxPool", [src], [name], kernel_shape=[2, 2], strides=[2, 2]))
        return name

    c, h = channels, size // 2
    b = conv("b", pool("p", conv("a", "field", 1, c)), c, c)
    if odd:
        out, shape = conv("out", b, c, 1), [1, 1, h, h]
    else:
        prev = b
        for j, dims in enumerate([[1, c, h * h, 1], [1, c, h, 2 * h], [1, c, 2 * h, 2 * h]]):
            inits.append(numpy_helper.from_array(np.array(dims, np.int64), f"r{j}.shape"))
            nodes.append(helper.make_node("Reshape", [prev, f"r{j}.shape"], [f"r{j}"]))
            prev = f"r{j}"
            if j < 2:
                nodes.append(helper.make_node("Concat", [prev, prev], [f"u{j}"], axis=3))
                prev = f"u{j}"
        nodes.append(helper.make_node("Add", [prev, "a"], ["s"]))
        nodes.append(helper.make_node("Add", [pool("q", conv("c", "s", c, c)), b], ["t"]))
        out, shape = conv("out", "t", c, 1), [1, 1, h, h]
    graph = helper.make_graph(nodes, "oddnet", [helper.make_tensor_value_info("field", TensorProto.FLOAT, [1, 1, n, n])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    import onnx

    onnx.save(model, str(path))
    return str(path)


def resize_net(path, size=8, channels=3):
    """field -> a = Conv; p = AveragePool 2x2/2; b = Conv; Resize nearest x2 of b (its 4 loop nests);
    + a; Conv to one channel."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name) for name, shape in
             (("a.w", (channels, 1, 3, 3)), ("a.b", (channels,)), ("b.w", (channels, channels, 3, 3)),
              ("b.b", (channels,)), ("o.w", (1, channels, 3, 3)), ("o.b", (1,)))]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes = [helper.make_node("Conv", ["field", "a.w", "a.b"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "b.w", "b.b"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["b", "", "scales"], ["u"], mode="nearest"),
             helper.make_node("Add", ["u", "a"], ["s"]),
             helper.make_node("Conv", ["s", "o.w", "o.b"], ["out"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "resizenet",
                              [helper.make_tensor_value_info("field", TensorProto.FLOAT, [1, 1, size, size])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    import onnx

    onnx.save(model, str(path))
    return str(path)


@pytest.fixture
def epilogues():
    """The tuning of every form of <name>_run with the epilogues."""
    return Tuning().replace(field_epilogues="all")


def _ops(sched):
    return [[note.split(":")[0] for note in launch.notes] for launch in sched.phases]


def test_phases(tmp_path, unet_path):
    """The small U-Net's 14 phases become 6 (each down conv with its pool, the bottom and up1 convs
    with their upsampling and skip Add); poisson_guess's 26 become 10; the odd net's 10 become 5
    (the MaxPools of a and c pulled, b pushed through the Concats into the Add, its output stored
    for t), and with a pool that does not divide its conv's 9 x 9 nothing is fused."""
    _, plan = gen.build_plan(unet_path, gen.Options(lang="c"))
    assert len(fusion.schedule(plan, epilogues=False).phases) == 14
    assert _ops(fusion.schedule(plan, epilogues=True)) == [
        ["Conv", "AveragePool"], ["Conv", "AveragePool"], ["Conv", "Concat", "Concat", "Add"],
        ["Conv+Relu", "Concat", "Concat", "Add"], ["Conv"], ["Conv"]]
    _, plan = gen.build_plan("examples/surrogates/poisson_guess/pguess.onnx", gen.Options(lang="c"))
    fused = fusion.schedule(plan, epilogues=True)
    assert (len(launch_groups(plan)), len(fused.phases)) == (26, 10)
    # a fused phase is no conv's alone: no implicit GEMM or shared-memory tile takes it (the last two convs)
    assert sorted(convs.conv_phases(fused)) == [8, 9]
    # buffers shared anew by each value's own size: 306 KB per sample against the plan's 436
    assert (sum(fused.plan.scratch), sum(plan.scratch)) == (76416, 109056)
    _, plan = gen.build_plan(odd_net(tmp_path / "odd.onnx"), gen.Options(lang="c"))
    sched = fusion.schedule(plan, epilogues=True)
    assert _ops(sched) == [["Conv", "MaxPool"], ["Conv", "Concat", "Concat", "Add"], ["Conv", "MaxPool"], ["Add"],
                           ["Conv"]]
    stored = [{s.target.buf for m in launch.members for s in _walk(m.body) if isinstance(s, Assign)
               and isinstance(s.target, Ref)} for launch in sched.phases]
    assert stored[0] == {"a", "p"} and stored[1] == {"b", "s"} and stored[2] == {"q"}  # c read by its pool alone
    _, plan = gen.build_plan(odd_net(tmp_path / "odd9.onnx", odd=True), gen.Options(lang="c"))
    assert len(fusion.schedule(plan, epilogues=True).phases) == len(launch_groups(plan))


def _walk(stmts):
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from _walk(s.body)


@pytest.mark.parametrize("form", ["launches", "persistent", "cluster"])
def test_unet_epilogues_emulated(tmp_path, unet_path, form, monkeypatch):
    """The kernel file's fused phases (jammed launches, the persistent kernel's, the clustered
    kernel's; that form alone fused), threads in order and in reverse, against onnxruntime."""
    from rosenna.emit.cuda import whole_field

    tuning = Tuning().replace(field_epilogues=form)
    _, plan = gen.build_plan(unet_path, gen.Options(lang="c", infer_one=True, tuning=tuning))
    field = strategy.decide(plan).field
    phases = [len(s.phases) for s in (field.launched, field.persistent, field.cluster)]
    assert phases == [6 if f == form else 14 for f in ("launches", "persistent", "cluster")]
    # the clustered kernel's intermediates its own where its phases differ: the others' step unchanged
    assert (whole_field.cluster_buffer(field) is field_fuse.buffer_symbol) == (form != "cluster")
    if form == "cluster":
        assert list(field.scratch) == field.launched.plan.scratch
        plan, x, forwards, backwards = emulate_clusters(unet_path, tmp_path / "gen",  # direct loops: the host runs them
                                                        tuning=tuning.replace(cluster_samples=256, smem_cluster=False))
    else:
        plan, x, forwards, backwards = emulate_launches(unet_path, tmp_path / "gen", persistent=form == "persistent",
                                                        tuning=tuning)
    kernel = (tmp_path / "gen" / f"{plan.name}_kernel.cu").read_text()
    assert "window element 3: Conv: down1 */" in kernel and ", the 2 elements that read it */" in kernel
    want = reference(unet_path, plan, x)
    assert_close(forwards, want, what="threads in order")
    assert_close(backwards, want, what="threads in reverse")
    if form == "persistent":  # the same terms in the same order: the unfused phases' outputs bit for bit
        _, _, unfused, _ = emulate_launches(unet_path, tmp_path / "unfused", persistent=True)
        assert np.array_equal(forwards, unfused)


@pytest.mark.parametrize("net", ["odd", "odd9", "resize"])
def test_odd_nets_emulated(tmp_path, epilogues, net):
    """The odd net (MaxPools, 3 channels, b stored for its second reader), the 9 x 9 conv whose
    pool leaves a remainder (not fused), the Resize net (its conv, Resize and Add in one phase) in
    the persistent kernel's phases, against onnxruntime."""
    path = resize_net(tmp_path / "rz.onnx") if net == "resize" else odd_net(tmp_path / "odd.onnx", odd=net == "odd9")
    if net == "resize":
        _, plan = gen.build_plan(path, gen.Options(lang="c"))
        sched = fusion.schedule(plan, epilogues=True)
        assert _ops(sched) == [["Conv", "AveragePool"], ["Conv", "Resize", "Add"], ["Conv"]]
        from rosenna.emit.cuda import whole_field

        lines = [line.strip() for launch in sched.phases for line in whole_field.batch_body(sched, launch)]
        assert not [a for a, b in zip(lines, lines[1:]) if a.startswith("/*") and b.startswith("/*")], \
            "a comment of a section whose statements were all dropped (the Resize's unread stores)"
    plan, x, forwards, backwards = emulate_launches(path, tmp_path / "gen", persistent=True, tuning=epilogues)
    want = reference(path, plan, x)
    assert_close(forwards, want, what="threads in order")
    assert_close(backwards, want, what="threads in reverse")


def _broken(how):
    """fusion.schedule with the epilogues and one stored element of a fused phase broken:
    the first store of the skip connection dropped, or moved one element on."""
    def schedule(plan):
        sched = fusion.schedule(plan, epilogues=True)
        for launch in sched.phases:
            for m in launch.members:
                for k, s in enumerate(m.body):
                    if isinstance(s, Assign) and isinstance(s.target, Ref) and isinstance(s.expr, Var):
                        if how == "dropped":
                            del m.body[k]
                        else:
                            m.body[k] = Assign(Ref(s.target.buf, s.target.idx + Idx((), 1)), s.expr)
                        return sched
        raise AssertionError("no fused store")
    return schedule


@pytest.mark.parametrize("how", ["dropped", "moved"])
def test_a_broken_fused_store_shows(tmp_path, unet_path, how):
    """The emulation catches a fused phase's store of the skip connection dropped or misplaced
    (so the tests above would)."""
    plan, x, forwards, _ = emulate_launches(unet_path, tmp_path / "gen", persistent=True, schedule=_broken(how))
    with pytest.raises(AssertionError):
        assert_close(forwards, reference(unet_path, plan, x), what="broken")


def test_checked_refuses_a_wrong_fusion(unet_path):
    """field_epilogue's element check: a pushed phase whose stores miss an element is refused."""
    _, plan = gen.build_plan(unet_path, gen.Options(lang="c"))
    groups = launch_groups(plan)
    version = fusion._versions(plan, groups)
    k = next(k for k, g in enumerate(groups) if g.notes[0].startswith("Concat"))
    value = fusion._value_of(plan, groups[k - 1], version)
    fused = field_epilogue.push(plan, groups[k - 1], groups[k], value, version, {value})
    assert fused is not None and field_epilogue._checked(fused, groups[k - 1], groups[k], version) is fused
    fused.members[0].body.pop()  # the last region's copies
    assert field_epilogue._checked(fused, groups[k - 1], groups[k], version) is None


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_cluster_ptx_barriers(tmp_path, unet_path, monkeypatch):
    """The small U-Net with the epilogues in its clustered kernel alone (sm_90 PTX): 6 phases, 5
    cluster barriers (14 and 13 unfused), over arrays of its own for 16 samples; the persistent
    kernel's 13 grid barriers and the batch's 256 samples per step unchanged. (cicc -O0: the barriers are asm, the optimiser
    adds nothing to check and takes 10x the time.)"""
    tuning = Tuning().replace(cluster_samples=16, field_epilogues="cluster")
    plan, _ = gen.generate(unet_path, str(tmp_path), gen.Options(lang="c", embed=True, infer_one=True, tuning=tuning))
    kernel = tmp_path / f"{plan.name}_kernel.cu"
    text = kernel.read_text()
    assert text.count("grid.sync();") == 13 and "static __device__ float unet_wsc0[16 * " in text
    assert "static __device__ float unet_wsf0[256 * " in text
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-Xcicc", "-O0", str(kernel), "-o", str(tmp_path / "k.ptx")], check=True,
                   capture_output=True)
    ptx = (tmp_path / "k.ptx").read_text()
    entry = ptx[ptx.index(f".entry _Z{len(plan.name) + 8}{plan.name}_cluster"):]
    assert entry[:entry.index("\n}\n")].count("barrier.cluster.arrive.release;") == 5


def test_store_hook_emulated(tmp_path, unet_path):
    """field_epilogue.store_hook, the epilogue a conv kernel of its own (a shared-memory tile) would
    run per output element: each up-path conv's upsampling and skip Add as statements over the
    conv output's (co, oy, ox), run as a phase of their own after the unfused conv (reading its
    element into e0), the Concat and Add phases gone, against onnxruntime."""
    from rosenna.parallel import Launch, Member

    def schedule(plan):
        groups = launch_groups(plan)
        version = fusion._versions(plan, groups)
        out, k, hooked = [], 0, 0
        while k < len(groups):
            out.append(groups[k])
            value = fusion._value_of(plan, groups[k], version)
            dims = None
            if value is not None and groups[k].notes[0].startswith("Conv"):
                extent = 1 + max(int(field_rewrite.stored_elements([m], lambda b: b == value).max())
                                 for m in groups[k].members)
                c = 4 if extent % 4 == 0 else 1
                side = int(round((extent // c) ** 0.5))
                dims = [("co", c), ("oy", side), ("ox", side)]
            hook = field_epilogue.store_hook(plan, groups, k, value, version, dims) if dims else None
            if hook is not None:
                done, stmts = hook
                index = Idx((("co", side * side), ("ox", 1), ("oy", side)), 0)
                body = [Assign(Var("e0"), Ref(value, index))] + stmts
                out.append(Launch([Member("parallel", [Loop(v, e, []) for v, e in dims], body, [], "hook", set(), {})]))
                k, hooked = k + done, hooked + 1
            k += 1
        assert hooked == 2 and len(out) == 14 - 2 * 3 + 2
        return fusion.Schedule(fusion._storage(plan, out, version, {}), tuple(out))

    plan, x, forwards, backwards = emulate_launches(unet_path, tmp_path / "gen", persistent=True, schedule=schedule)
    want = reference(unet_path, plan, x)
    assert_close(forwards, want, what="threads in order")
    assert_close(backwards, want, what="threads in reverse")
