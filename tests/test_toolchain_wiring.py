"""generate/verify --toolchain: the profile's compilers, flags and thresholds reach the output."""

from rosenna.cli import main


def test_gcc_profile_verifies_for_real(model, tmp_path, capsys):
    rc = main(["verify", model("gemm_big"), "--toolchain", "gcc", "--cases", "4", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("PASS") == 5  # infer and infer_batch in C and Fortran, and the verdict


def test_site_profile_feeds_generate(model, tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    site.mkdir()
    (site / "mysite.yaml").write_text(
        "description: a site's gcc with its own flags and a tiny embed threshold\n"
        "extends: gcc\n"
        "flags:\n  host: -fopenmp -O1\n"
        "thresholds:\n  embed_threshold: 10\n  constant_limit_bytes: 4096\n")
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(site))
    rc = main(["generate", model("gemm_small"), "--toolchain", "mysite", "--out", str(tmp_path / "o")])
    assert rc == 0, capsys.readouterr().err
    mk = (tmp_path / "o" / "gemm_small.mk").read_text()
    assert "ROSENNA_OFFLOAD_FLAGS ?= -fopenmp -O1" in mk
    assert (tmp_path / "o" / "gemm_small.rwt").exists()  # 15 parameters > embed_threshold 10


def test_unknown_toolchain_is_refused(model, tmp_path, capsys):
    rc = main(["generate", model("gemm_small"), "--toolchain", "no-such-profile", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "no-such-profile" in err and "Traceback" not in err
