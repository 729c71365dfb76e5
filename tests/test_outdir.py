"""The output directory (issue 12, groups 5 and 7): names that cannot collide with rosenna's own or
with each other, and `generate` replacing a model's set as one unit, whenever it is killed."""

import json
import os
import re
import shutil

import pytest

from rosenna import emit, outdir
from rosenna import generate as gen
from rosenna.cli import main
from rosenna.generate import Options, build_plan, default_name, generate


def _cli(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_reserved_name_refused(model, tmp_path, capsys):
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "rosenna_rt", "--out", str(tmp_path)], capsys)
    assert rc == 2 and "rosenna's own" in err and len(err.strip().splitlines()) == 1, err
    assert not [f for f in os.listdir(tmp_path) if not f.startswith(".")]
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "ROSENNA", "--out", str(tmp_path)], capsys)
    assert rc == 2 and "rosenna's own" in err


def test_reserved_stem_renamed(model, tmp_path):
    """A file stem rosenna_rt.onnx becomes the model m_rosenna_rt; rosenna_rt.h stays rosenna's."""
    path = tmp_path / "rosenna_rt.onnx"
    shutil.copy(model("gemm_small"), path)
    assert default_name(str(path)) == "m_rosenna_rt" and default_name("Rosenna.onnx") == "m_Rosenna"
    plan, _ = generate(str(path), str(tmp_path / "o"), Options())
    assert plan.name == "m_rosenna_rt"
    assert (tmp_path / "o" / "rosenna_rt.h").read_text() == emit.runtime_header()


@pytest.mark.parametrize("first,second", [("x", "x_model"), ("x_model", "x"), ("x", "x_fortran"), ("x", "X"),
                                          ("x", "x_f"), ("x", "x_kernel")])
def test_colliding_names_refused_in_one_directory(model, tmp_path, capsys, first, second):
    out = str(tmp_path / "o")
    assert _cli(["generate", model("gemm_small"), "--name", first, "--out", out], capsys)[0] == 0
    before = {f: (tmp_path / "o" / f).read_bytes() for f in os.listdir(out)}
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", second, "--out", out], capsys)
    assert rc == 2 and "choose another --name or another --out" in err, err
    assert {f: (tmp_path / "o" / f).read_bytes() for f in os.listdir(out)} == before
    # different directories, or names that only look alike, are fine
    assert _cli(["generate", model("gemm_small"), "--name", second, "--out", str(tmp_path / "p")], capsys)[0] == 0
    assert _cli(["generate", model("gemm_small"), "--name", first + "y", "--out", out], capsys)[0] == 0


def test_set_files_cover_every_generated_and_built_file(model):
    """outdir.SET_FILES is the one list of a set's names: every file emit renders and every file a
    recipe builds in $(ROSENNA_DIR) is in it, so a new file cannot escape the collision checks."""
    for embed in (True, False):
        _, plan = build_plan(model("two_in_two_out"), Options(name="nm", embed=embed))
        files = emit.render(plan, "both", "stamp", Options().profile())
        owned = set(outdir.set_files("nm")) | set(outdir.SHARED_FILES)
        assert set(files) <= owned
        for fname in (f for f in files if f.endswith(".mk")):
            targets = set(re.findall(r"\$\(ROSENNA_DIR\)/([\w.]+)", files[fname]))
            assert targets <= owned, (fname, targets - owned)
    for a, b in (("x", "x_model"), ("x", "x_fortran"), ("x", "x_f"), ("x", "x_device")):
        # without the prefix rule these would share files: the table says so
        assert set(outdir.set_files(a)) & set(outdir.set_files(b)) and outdir.conflict(a, b)
    assert outdir.conflict("x", "xy") is None and outdir.conflict("abc", "ab") is None


# --- generate is atomic for the whole set ---------------------------------------------------------

def _visible(out):
    return {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out) if not f.startswith(".")}


def _debris(out):
    return [f for f in os.listdir(out) if f.startswith(outdir.STAGING_PREFIX) and os.path.isdir(os.path.join(out, f))]


def _committed(out):
    return any(os.path.isfile(os.path.join(out, d, outdir.JOURNAL)) for d in _debris(out))


def test_generate_killed_at_every_step(model, tmp_path):
    """The old set is file-loaded (with .rwt), the new one embedded (different text, no .rwt).
    A child process runs generate and dies at its k-th step, for every k: before the journal's
    commit --out holds the old set exactly; after it the journal is complete until the new set is
    (then the old set's leftover .rwt is gone too); the next run's
    recovery leaves the old or the new set exactly, the new one whenever the journal was
    committed, and no .rosenna-* folder."""
    path = model("gemm_big")
    old_dir, new_dir = str(tmp_path / "old"), str(tmp_path / "new")
    generate(path, old_dir, Options(name="mdl", embed=False))
    generate(path, new_dir, Options(name="mdl", embed=True))
    old, new = _visible(old_dir), _visible(new_dir)
    assert old != new and "mdl.rwt" in old and "mdl.rwt" not in new
    outcomes = []
    for step in range(60):
        out = str(tmp_path / f"k{step}")
        shutil.copytree(old_dir, out)
        pid = os.fork()
        if pid == 0:  # the child: generate, dying at its step-th crash point
            os.environ["ROSENNA_TEST_CRASH_AT"] = str(step)
            try:
                generate(path, out, Options(name="mdl", embed=True))
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WEXITSTATUS(status) == 137
        committed = _committed(out)
        if not committed:  # not begun, not committed (old set untouched) or finished
            assert _visible(out) in (old, new), step
        with outdir.Lock(out):
            outdir.recover(out)
        after = _visible(out)
        assert after in (old, new), (step, sorted(after))
        assert not _debris(out), step
        if committed or not killed:
            assert after == new, step
        outcomes.append((killed, committed))
        if not killed:
            break
        shutil.rmtree(out)
    assert outcomes[-1] == (False, False), "the last step was reached: every step was tried"
    assert (True, False) in outcomes and (True, True) in outcomes
    # the manifest names the new set only
    manifest = json.load(open(os.path.join(out, outdir.manifest_name("mdl"))))
    assert sorted(manifest["files"]) == sorted(new)


def test_next_run_removes_old_debris(model, tmp_path):
    """A staging folder of an older rosenna (killed mid-write) is removed by the next run."""
    out = tmp_path / "o"
    (out / ".rosenna-abc123").mkdir(parents=True)
    (out / ".rosenna-abc123" / "mdl.rwt").write_bytes(b"x" * 1000)
    generate(model("gemm_small"), str(out), Options(name="mdl"))
    assert not _debris(str(out))



def test_a_set_recovered_by_the_next_run_is_checked_for_clashes(tmp_path):
    """Set ``x`` killed just after its journal's commit (no file moved yet, so its manifest is not
    in --out): the next generate rolls it forward and must then see ``x`` among the other sets, so
    ``X`` is refused (it read the directory once, before the recovery, and missed ``x``)."""
    out = str(tmp_path / "o")
    for step in range(60):
        shutil.rmtree(out, ignore_errors=True)
        pid = os.fork()
        if pid == 0:
            os.environ["ROSENNA_TEST_CRASH_AT"] = str(step)
            try:
                os.makedirs(out)
                gen.write_set(out, "x", {"x.c": b"int x;\n", "x.h": b"extern int x;\n"})
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        if _committed(out):
            break
    assert _committed(out) and not os.path.exists(os.path.join(out, outdir.manifest_name("x")))
    with pytest.raises(gen.UsageError, match="differ only in case"):
        gen.write_set(out, "X", {"X.c": b"int X;\n"})
    assert os.path.isfile(os.path.join(out, "x.c")) and not os.path.exists(os.path.join(out, "X.c"))

def _forked_write(out, data, ready):
    """Fork a child that writes the set ``data`` into ``out`` as generate does (its write_set) and
    writes a byte to ``ready`` just before (so the parent can time its kill within the writing).
    Returns the pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.write(ready, b"w")
            gen.write_set(out, "mdl", data)
        finally:
            os._exit(0)
    return pid


def _set_bytes(out):
    return {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)
            if not f.startswith(".") or f == outdir.manifest_name("mdl")}


def test_generate_sigkilled_at_random_instants(model, tmp_path):
    """The same invariant with real SIGKILLs at random instants of a forked generate's writing
    (mid-write and mid-rename included), 40 times: after the next run's recovery, old or new
    set exactly, no debris."""
    import random
    import signal
    import time

    path = model("gemm_big")
    old_dir, new_dir = str(tmp_path / "old"), str(tmp_path / "new")
    generate(path, old_dir, Options(name="mdl", embed=False))
    generate(path, new_dir, Options(name="mdl", embed=True))
    old, new = _visible(old_dir), _visible(new_dir)
    data = _set_bytes(new_dir)
    data.pop(outdir.manifest_name("mdl"))
    read, ready = os.pipe()
    out = str(tmp_path / "timing")
    shutil.copytree(old_dir, out)
    pid = _forked_write(out, data, ready)
    os.read(read, 1)
    start = time.perf_counter()
    os.waitpid(pid, 0)
    span = time.perf_counter() - start
    assert _visible(out) == new
    rng = random.Random(7)
    seen = []
    for attempt in range(40):
        out = str(tmp_path / f"r{attempt}")
        shutil.copytree(old_dir, out)
        pid = _forked_write(out, data, ready)
        os.read(read, 1)
        time.sleep(rng.uniform(0, 1.2 * span))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with outdir.Lock(out):
            outdir.recover(out)
        after = _visible(out)
        assert after in (old, new) and not _debris(out), attempt
        seen.append("new" if after == new else "old")
        shutil.rmtree(out)
    os.close(read)
    os.close(ready)
    assert len(seen) == 40, seen
    print("outcomes", seen.count("old"), "old", seen.count("new"), "new", f"span {span * 1e3:.1f} ms")


def test_fsync_order_of_the_commit(model, tmp_path, monkeypatch):
    """Durability against a power loss: every staged file is fsync'ed before the journal's commit
    (rename), the staging folder is synced before and after the commit, and --out is synced after
    the moves and before the staging folder (the record of what is left) is removed."""
    monkeypatch.delenv("ROSENNA_NO_FSYNC", raising=False)
    events = []
    real_fsync, real_replace, real_rmtree = os.fsync, os.replace, shutil.rmtree
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(a), str(b))),
                                                     real_replace(a, b))[1])
    monkeypatch.setattr(shutil, "rmtree", lambda p, **kw: (events.append(("rmtree", str(p))), real_rmtree(p, **kw))[1])
    out = str(tmp_path / "o")
    _, written = generate(model("gemm_small"), out, Options(name="mdl", embed=False))
    out = os.path.realpath(out)
    commit = next(i for i, e in enumerate(events) if e[0] == "replace" and e[2].endswith("/" + outdir.JOURNAL))
    stage = os.path.dirname(events[commit][2])
    synced_before = {e[1] for e in events[:commit] if e[0] == "fsync"}
    staged = {os.path.join(stage, os.path.basename(p)) for p in written} | {os.path.join(stage, outdir.JOURNAL + ".tmp")}
    assert staged <= synced_before, staged - synced_before
    assert events[commit - 1] == ("fsync", stage) and events[commit + 1] == ("fsync", stage)
    moves = [i for i, e in enumerate(events) if e[0] == "replace" and i > commit]
    removal = next(i for i, e in enumerate(events) if e == ("rmtree", stage))
    assert len(moves) == len(written) + 1  # the manifest too
    assert ("fsync", out) in events[moves[-1]:removal] and events[-1] == ("fsync", out)
