"""Hostile output folders (issue 29, item 1): nothing read back from --out or --keep may name a path
outside it or a file the set does not own. Planted journals, manifests, lock links, links in a kept
folder and a folder where a file goes change nothing outside the set; the refusals are one line that
says what to delete by hand; a move that fails says truthfully which files are new."""

import json
import os

import pytest

from rosenna import outdir
from rosenna.cli import main


def _cli(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_refusal(rc, err, *words):
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


@pytest.fixture
def victim(tmp_path):
    """A file outside the output folder that no run into it may touch."""
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    return path


def _plant_journal(out, journal, folder=".rosenna-mdl-evil"):
    stage = out / folder
    stage.mkdir(parents=True)
    (stage / "mdl.c").write_text("int planted;\n")
    (stage / outdir.JOURNAL).write_text(json.dumps(journal))
    return stage


@pytest.mark.parametrize("journal", [
    {"name": "mdl", "move": [], "remove": ["../victim.txt"]},
    {"name": "mdl", "move": ["../victim.txt"], "remove": []},
    {"name": "mdl", "move": [], "remove": ["solver.c"]},
    {"name": "mdl", "move": [], "remove": ["rosenna_rt.h"]},
    {"name": "other", "move": ["other.c"], "remove": []},
    {"name": "mdl", "move": "mdl.c", "remove": []},
    ["not", "an", "object"],
])
def test_planted_journal_is_refused_and_left_alone(model, tmp_path, victim, capsys, journal):
    out = tmp_path / "o"
    (tmp_path / "victim.txt").write_text("precious\n")
    stage = _plant_journal(out, journal)
    (out / "solver.c").write_text("user's own\n")
    (out / "rosenna_rt.h").write_text("another set's\n")
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)
    _one_line_refusal(rc, err, str(stage), "delete it by hand")
    assert victim.read_text() == "precious\n" and (out / "solver.c").read_text() == "user's own\n"
    assert (out / "rosenna_rt.h").read_text() == "another set's\n"
    assert (stage / outdir.JOURNAL).exists() and (stage / "mdl.c").exists()  # left alone
    assert not (out / "mdl.c").exists()


def test_journal_link_or_foreign_staging_folder_refused(model, tmp_path, victim, capsys):
    out = tmp_path / "o"
    stage = out / ".rosenna-mdl-link"
    stage.mkdir(parents=True)
    os.symlink(victim, stage / outdir.JOURNAL)
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)
    _one_line_refusal(rc, err, "symbolic link", "delete it by hand")
    assert victim.read_text() == "precious\n"
    if os.geteuid() != 0:
        return
    os.unlink(stage / outdir.JOURNAL)
    os.chown(stage, 65534, 65534)  # another user's (debris or not): never removed, never obeyed
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)
    _one_line_refusal(rc, err, "another user", "delete it by hand")
    assert stage.is_dir()


def test_planted_manifest_cannot_delete_the_users_file(model, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "solver.c").write_text("user's own\n")
    manifest = out / outdir.manifest_name("mdl")
    manifest.write_text(json.dumps({"name": "mdl", "files": ["mdl.c", "solver.c", "../victim.txt"]}))
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)
    _one_line_refusal(rc, err, "solver.c", "delete it by hand")
    assert (out / "solver.c").read_text() == "user's own\n" and not (out / "mdl.c").exists()
    if os.geteuid() == 0:  # a manifest that is another user's is not obeyed either
        manifest.write_text(json.dumps({"name": "mdl", "files": ["mdl.c"]}))
        os.chown(manifest, 65534, 65534)
        rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)
        _one_line_refusal(rc, err, "another user")
    # a genuine manifest still drives the removal of the set's own leftovers
    manifest.unlink()
    assert _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out), "--no-embed"], capsys)[0] == 0
    assert (out / "mdl.rwt").exists()
    assert _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out), "--embed-weights"], capsys)[0] == 0
    assert not (out / "mdl.rwt").exists() and (out / "solver.c").exists()


def test_lock_link_and_fifo_refused(model, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    target = tmp_path / "created-through-link"
    os.symlink(target, out / outdir.LOCK)
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)
    _one_line_refusal(rc, err, "symbolic link", "delete it by hand")
    assert not target.exists() and not (out / "mdl.c").exists()
    os.unlink(out / outdir.LOCK)
    os.mkfifo(out / outdir.LOCK)
    rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)
    _one_line_refusal(rc, err, "not a regular file")


def test_folder_where_a_file_goes_writes_nothing(model, tmp_path, capsys):
    """The old set stays whole (not .c/.h new and the rest old), on every rerun; the message says so."""
    out = tmp_path / "o"
    assert _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out)], capsys)[0] == 0
    (out / "mdl.mk").unlink()
    (out / "mdl.mk").mkdir()
    before = {f: (out / f).read_bytes() for f in os.listdir(out) if (out / f).is_file()}
    for _ in range(2):
        rc, _, err = _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out), "--no-embed"],
                          capsys)
        _one_line_refusal(rc, err, "mdl.mk is a folder", "nothing was written")
        assert {f: (out / f).read_bytes() for f in os.listdir(out) if (out / f).is_file()} == before
        assert not [f for f in os.listdir(out) if f.startswith(".rosenna-mdl-")]


def test_a_move_that_fails_says_which_files_are_new(tmp_path, monkeypatch):
    """A folder appearing where a file goes after the checks: the error names the new files and how
    to finish; the next run finishes the set."""
    from rosenna import generate as gen
    out = tmp_path / "o"
    out.mkdir()
    real_replace = os.replace

    def replace(source, dest):
        if dest.endswith("b.h") and not os.path.exists(dest):
            os.mkdir(dest)  # planted between the check and the move
        return real_replace(source, dest)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(gen.RosennaError) as caught:
        gen.write_set(str(out), "b", {"b.c": b"int b;\n", "b.h": b"extern int b;\n"})
    message = str(caught.value)
    assert "b.c;" in message.split("new: ")[1] and "stopped at b.h" in message and "run generate" in message, message
    assert "previous files are kept" not in message
    monkeypatch.setattr(os, "replace", real_replace)
    os.rmdir(out / "b.h")
    gen.write_set(str(out), "x", {"x.c": b"int x;\n"})  # any run into the folder finishes b's set
    assert (out / "b.h").read_bytes() == b"extern int b;\n"


def test_keep_refuses_links_and_shared_folders(model, tmp_path, victim, capsys):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    rc, _, err = _cli(["verify", model("gemm_small"), "--lang", "c", "--keep", str(tmp_path / "link")], capsys)
    _one_line_refusal(rc, err, "symbolic link")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    rc, _, err = _cli(["verify", model("gemm_small"), "--lang", "c", "--keep", str(shared)], capsys)
    _one_line_refusal(rc, err, "writable by group or others")
    if os.geteuid() == 0:
        os.chmod(shared, 0o755)
        os.chown(shared, 65534, 65534)
        rc, _, err = _cli(["verify", model("gemm_small"), "--lang", "c", "--keep", str(shared)], capsys)
        _one_line_refusal(rc, err, "another user")
    assert not os.listdir(real) and victim.read_text() == "precious\n"


def test_keep_writes_only_new_files(model, tmp_path, victim, capsys):
    """Links planted in a kept folder (by an earlier hand, or a copied tree) are replaced, never
    written through."""
    keep = tmp_path / "keep"
    keep.mkdir()
    for fname in ("x.bin", "y_c.bin", "verify_c.c", "verify_c", "gemm_small.c", "gemm_small.h"):
        os.symlink(victim, keep / fname)
    rc, out, err = _cli(["verify", model("gemm_small"), "--lang", "c", "--keep", str(keep)], capsys)
    assert rc == 0, err
    assert victim.read_text() == "precious\n"
    assert not [f for f in os.listdir(keep) if os.path.islink(keep / f)]


@pytest.mark.parametrize("folder", ["a b", "a$(id)b", "a'b", 'a"b', "a\nb", "a`id`b", "a;b", "a#b", "a:b"])
def test_out_paths_make_or_the_shell_would_read_as_syntax(model, tmp_path, capsys, folder):
    """The .mk recipes name files by their folder's path, unquoted for make and sh: such a path is
    refused before anything is written (a backtick in it ran a command at make)."""
    out = tmp_path / folder
    rc, _, err = _cli(["generate", model("gemm_small"), "--out", str(out)], capsys)
    _one_line_refusal(rc, err, "--out", "choose a folder")
    assert not out.exists()


def test_plain_out_path_builds_with_make(model, tmp_path, capsys):
    """The characters allowed in --out do build: make runs the .mk there."""
    import subprocess
    out = tmp_path / "run-1_a+b,c@d~e" / "out.v2"
    assert _cli(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out), "--lang", "c"], capsys)[0] == 0
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CFLAGS", "MAKEFLAGS")}
    result = subprocess.run(["make", "-s", "-f", str(out / "mdl.mk")], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and (out / "libmdl.a").exists(), result.stderr
