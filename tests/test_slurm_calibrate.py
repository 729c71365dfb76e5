"""`rosenna gpu-gate --calibrate` end to end on the host (--host-fallback: the host batch's knobs):
the gate times each candidate, the winners go into a profile overlay, and `toolchain list`,
`info --tuning` and `generate` then use that overlay. Timings decide which candidate wins, so the
tests name the candidates and check what follows from whichever won."""

import json

import pytest
import yaml

from rosenna.cli import main
from rosenna.gate import calibrate

GATE = ["--host-fallback", "--model", "gemm_small", "--points", "2000", "--toolchain", "gcc"]


@pytest.fixture
def overlay_dir(tmp_path, monkeypatch):
    folder = tmp_path / "calibrated"
    folder.mkdir()
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(folder))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the timings of a shared 2-core machine, less noisy
    return folder


def test_calibration_writes_an_overlay_that_list_info_and_generate_use(overlay_dir, tmp_path, capsys, model,
                                                                       monkeypatch):
    # A named candidate replaces the current value unless it is far slower (the margin is what keeps
    # the current value on noise; here the test needs a new value to follow through).
    monkeypatch.setattr(calibrate, "MARGIN", -1e9)
    out = tmp_path / "cal"
    rc = main(["gpu-gate", *GATE, "--out", str(out), "--overlay-dir", str(overlay_dir),
               "--calibrate", "host_block_single=8,16", "--calibrate", "host_block_double=4"])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    report = json.loads((out / "calibrate-report.json").read_text())
    chosen = report["chosen"]["host_block_single"]
    assert chosen in (8, 16) and report["section"] == "default"
    timed = [t for t in report["trials"] if t["field"] == "host_block_single"]
    assert [t["value"] for t in timed] == [8, 16] and all(t["status"] == "PASS" and t["ns_per_point"] > 0 for t in timed)
    # A float model's code does not depend on host_block_double: not timed, and said so.
    (double,) = [t for t in report["trials"] if t["field"] == "host_block_double"]
    assert double["status"] == "same code" and double["ns_per_point"] is None, double
    overlay = overlay_dir / "gcc.yaml"
    text = overlay.read_text()
    assert text.startswith(calibrate.OVERLAY_MARK)
    data = yaml.safe_load(text)
    assert data["extends"] == "gcc" and data["tuning"] == {"default": {"host_block_single": chosen}}, data
    assert f"calibrated: tuning=host_block_single={chosen}" in printed.out
    markdown = (out / "calibrate-report.md").read_text()
    assert f"| host_block_single | {chosen} (chosen) | PASS |" in markdown

    assert main(["toolchain", "list"]) == 0
    listing = capsys.readouterr().out
    assert any(line.split()[:2] == ["gcc", "path"] and str(overlay) in line for line in listing.splitlines()), listing
    assert main(["info", "--tuning", "--toolchain", "gcc"]) == 0
    assert f"host_block_single = {chosen}  (set)" in capsys.readouterr().out
    gen = tmp_path / "gen"
    assert main(["generate", model("gemm_small"), "--toolchain", "gcc", "--lang", "c", "--out", str(gen)]) == 0
    source = (gen / "gemm_small.c").read_text()
    assert f"tuning=host_block_single={chosen}" in source.splitlines()[0]
    assert f"{chosen} points at a time" in source

    # A second calibration starts from the overlay and updates it in place.
    assert main(["gpu-gate", *GATE, "--out", str(tmp_path / "cal2"), "--overlay-dir", str(overlay_dir),
                 "--calibrate", "host_block_bytes=16384"]) == 0
    capsys.readouterr()
    data = yaml.safe_load(overlay.read_text())
    assert data["tuning"]["default"]["host_block_single"] == chosen and data["extends"] == "gcc"
    second = json.loads((tmp_path / "cal2" / "calibrate-report.json").read_text())
    assert second["start"]["tuning"] == f"tuning=host_block_single={chosen}"


def test_overlay_folders_that_cannot_work_are_refused_before_anything_runs(overlay_dir, tmp_path, capsys):
    (overlay_dir / "gcc.yaml").write_text("extends: gcc\ndescription: the site's own\n")
    out = tmp_path / "cal"
    assert main(["gpu-gate", *GATE, "--out", str(out), "--overlay-dir", str(overlay_dir), "--calibrate"]) == 2
    err = capsys.readouterr().err
    assert "is not a calibration overlay" in err and len(err.strip().splitlines()) == 1, err
    (overlay_dir / "gcc.yaml").unlink()
    elsewhere = tmp_path / "not-on-the-path"
    assert main(["gpu-gate", *GATE, "--out", str(out), "--overlay-dir", str(elsewhere), "--calibrate"]) == 2
    err = capsys.readouterr().err
    assert "are not read before" in err and "ROSENNA_TOOLCHAIN_PATH" in err, err
    assert main(["gpu-gate", *GATE, "--out", str(out), "--calibrate", "no_such_knob=1"]) == 2
    assert "unknown tuning key 'no_such_knob'" in capsys.readouterr().err
    assert not out.exists() and not elsewhere.exists()


def test_the_gate_keeps_the_tuning_a_tuning():
    from rosenna.gate.config import Config, resolved
    from rosenna.strategy import Tuning

    tuning = Tuning().replace(host_block_single=8)
    assert resolved(Config(host_fallback=True, tuning=tuning)).tuning is tuning
