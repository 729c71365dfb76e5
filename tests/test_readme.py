"""README.md: its programs and commands run as written, and its rendered facts are current."""

import os
import re
import subprocess
import sys

from rosenna import abi, docs, ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BLOCK = re.compile(r"<!-- readme-test: (file (?P<file>\S+)|run) -->\n```\w*\n(?P<body>.*?)```", re.S)


def blocks():
    with open(README, encoding="utf-8") as handle:
        return [(m.group("file"), m.group("body")) for m in BLOCK.finditer(handle.read())]


def test_readme_programs_and_commands_run(tmp_path):
    found = blocks()
    assert sum(1 for f, _ in found if f) >= 4 and sum(1 for f, _ in found if not f) >= 1
    path = [os.path.dirname(sys.executable)]
    if not os.path.isfile(os.path.join(path[0], "rosenna")):  # this checkout on PYTHONPATH, not installed
        (tmp_path / "shims").mkdir()
        (tmp_path / "shims" / "rosenna").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rosenna "$@"\n')
        (tmp_path / "shims" / "rosenna").chmod(0o755)
        path.insert(0, str(tmp_path / "shims"))
    env = dict(os.environ, PATH=os.pathsep.join(path + [os.environ["PATH"]]))
    for fname, body in found:
        if fname:
            (tmp_path / fname).write_text(body)
            continue
        for line in body.strip().splitlines():
            proc = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
            assert proc.returncode == 0, f"README command failed: {line}\n{proc.stdout}\n{proc.stderr}"


def test_rendered_regions_are_current():
    with open(README, encoding="utf-8") as handle:
        text = handle.read()
    assert docs.render_readme(text) == text, "run: python -m rosenna.docs"


def test_status_codes_everywhere(tmp_path):
    """Every code of abi appears in the README, rosenna_rt.h and the Fortran module."""
    from rosenna.emit import c

    with open(README, encoding="utf-8") as handle:
        text = handle.read()
    from rosenna import emit

    rt = emit.runtime_header()
    for code, key, meaning in abi.STATUS_CODES:
        assert f"| {code} | `{abi.status_name(key)}`" in text
        assert re.search(rf"#define {abi.status_name(key)}\s+{code}\b", rt)


def test_every_registered_op_is_in_the_operators_reference_and_back():
    """The operators reference (docs/reference/operators.md renders docs.operators_reference)."""
    listed = set(re.findall(r"^\| (\w+) \|", docs.operators_reference(), re.M)) - {"op"}
    assert listed == set(ops.REGISTRY)
