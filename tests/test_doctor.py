"""`rosenna doctor`: it finds GCC's offload pieces where GCC would, and names what provides a
missing one."""

import os

from rosenna.cli import main
from rosenna.toolchain import doctor

FAKE_GCC = """#!/bin/sh
case "$1" in
  --version) echo "gcc (Fake) 13.2.0";;
  -print-prog-name=accel/nvptx-none/mkoffload) echo "{root}/libexec/accel/nvptx-none/mkoffload";;
  -print-file-name=libgomp-plugin-nvptx.so.1) echo "{root}/lib/libgomp-plugin-nvptx.so.1";;
  -print-prog-name=*) echo "${{1#-print-prog-name=}}";;
  -print-file-name=*) echo "${{1#-print-file-name=}}";;
esac
"""


def _fake_gcc(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcc = bin_dir / "gcc"
    gcc.write_text(FAKE_GCC.format(root=tmp_path))
    gcc.chmod(0o755)
    for piece in ("libexec/accel/nvptx-none/mkoffload", "lib/libgomp-plugin-nvptx.so.1"):
        (tmp_path / piece).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / piece).write_text("")
    return {"PATH": str(bin_dir)}


def test_gcc_offload_found_where_gcc_finds_it(tmp_path):
    checks = {c.area: c for c in doctor.gcc_offload(env=_fake_gcc(tmp_path))}
    nvptx, amdgcn = checks["gcc offload: nvptx-none"], checks["gcc offload: amdgcn-amdhsa"]
    assert nvptx.status == doctor.OK and str(tmp_path / "libexec/accel/nvptx-none/mkoffload") in nvptx.detail
    assert amdgcn.status == doctor.MISSING and "gcc-offload-amdgcn" in amdgcn.fix
    assert "libgomp-plugin-amdgcn1" in amdgcn.fix


def test_missing_mkoffload_names_the_debian_package(tmp_path):
    env = _fake_gcc(tmp_path)
    os.remove(tmp_path / "libexec/accel/nvptx-none/mkoffload")
    nvptx = doctor.gcc_offload(env=env)[0]
    assert nvptx.status == doctor.PARTIAL and "mkoffload not found" in nvptx.detail
    assert nvptx.fix.startswith("Debian/Ubuntu: apt-get install gcc-offload-nvptx")


def test_nothing_on_path_is_reported_not_raised(tmp_path):
    env = {"PATH": str(tmp_path)}
    checks = doctor.host_compilers(env) + doctor.gcc_offload(env=env) + doctor.clang_offload(env) + \
        doctor.vendor_tools(env)
    assert all(c.status == doctor.MISSING and c.fix for c in checks), [c for c in checks if not c.fix]


def test_doctor_command(capsys):
    assert main(["doctor", "--no-gpu"]) == 0
    out = capsys.readouterr().out
    for area in ("host: gcc", "gcc offload: nvptx-none", "clang offload", "NVIDIA HPC SDK", "onnxruntime"):
        assert area in out
    assert main(["doctor", "--no-gpu", "--json"]) == 0
    assert '"area": "gcc offload: amdgcn-amdhsa"' in capsys.readouterr().out
