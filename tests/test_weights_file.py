"""The .rwt weights file (issue 12, group 6): every status code reachable from C and from Fortran,
the two readers agreeing on every case, no corrupted file ever accepted, weights zero before init
and after a failed one; C under -fsanitize=address,undefined, Fortran under -fcheck=all and
-finit-real=nan. The cases and probes are tests/fuzz_rwt.py's (which also runs the full fuzz)."""

import struct

import pytest

import fuzz_rwt
from rosenna import abi
from rosenna.emit import c, fortran


@pytest.fixture(scope="module")
def probes(tmp_path_factory, model):
    """gemm_small, file-loaded, with its C and Fortran probes (built once)."""
    work = str(tmp_path_factory.mktemp("rwt"))
    return (work,) + fuzz_rwt.build(model("gemm_small"), work)


def test_every_case_refused_alike(probes):
    """Every structured case gives its documented status in both languages; every truncation,
    every single-bit flip of the file and 300 random corruptions are refused, with one status."""
    work, plan, good, c_exe, f_exe = probes
    cases = fuzz_rwt.structured_cases(good, plan)
    assert {want for _, _, want in cases} >= {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12}
    cases += fuzz_rwt.bit_flips(good) + fuzz_rwt.random_damage(good, 300, seed=5)
    problems = fuzz_rwt.fuzz(work, cases, plan, good, c_exe, f_exe)
    assert not problems, "\n".join(problems[:30])


def test_format_v2_layout(probes):
    _, plan, good, _, _ = probes
    head = abi.read_rwt_header(good)
    assert head["magic"] == abi.RWT_MAGIC and head["endian"] == abi.RWT_ENDIAN
    assert head["version"] == abi.RWT_VERSION == 2 and head["dtype"] == 1 and head["hash"] == plan.hash
    assert head["count"] == len(plan.weights)
    assert struct.unpack("=I", good[-4:])[0] == abi.crc32c_reference(good[:-4])


def test_checksum_is_the_readers_table_driven_crc():
    """The writer's CRC-32C (lanes joined by linearity) equals the readers' bytewise algorithm
    (abi.crc32c_reference) at every length class, and the standard check value."""
    import random

    assert abi.crc32c(b"123456789") == abi.crc32c_reference(b"123456789") == 0xE3069283
    rng = random.Random(6)
    for size in (0, 1, 4095, 4096, 4097, 300_001):
        data = bytes(rng.randrange(256) for _ in range(size))
        assert abi.crc32c(data) == abi.crc32c_reference(data), size


def test_readers_render_abi_table_and_constants(model):
    """Both readers come from abi.RWT_CHECKS (one comment per check, in order) and carry no
    .rwt constant of their own: changing abi's magic changes both."""
    from rosenna.generate import Options, build_plan

    _, plan = build_plan(model("gemm_small"), Options(name="p", embed=False))
    from rosenna.strategy import of

    c_text, f_text = c.source(of(plan), "s"), fortran.module(plan, "s", 16)
    for text, mark in ((c_text, "/* "), (f_text, "! ")):
        positions = [text.index(f"{mark}{check.field}: ") for check in abi.RWT_CHECKS]
        assert positions == sorted(positions)
    old = abi.RWT_MAGIC
    try:
        abi.RWT_MAGIC = b"ZZZZWT\0\0"
        assert '"ZZZZWT\\000\\000"' in c.source(of(plan), "s")
        assert "'ZZZZWT' // achar(0) // achar(0)" in fortran.module(plan, "s", 16)
    finally:
        abi.RWT_MAGIC = old
    for module in (c, fortran):  # the emitters' own source holds no .rwt literal
        source = open(module.__file__).read()
        assert "RSNNAWT" not in source and "01020304" not in source and "EDB88320" not in source.upper()


def test_weights_format_doc_lists_the_checks():
    """docs/weights-format.md's table of checks is rendered from abi.RWT_CHECKS and current."""
    import os

    from rosenna import docs

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "weights-format.md")
    text = open(path, encoding="utf-8").read()
    assert docs.render_readme(text, docs.DOC_REGIONS["docs/weights-format.md"]) == text, "run: python -m rosenna.docs"
    for check in abi.RWT_CHECKS:
        assert f"`{check.field}` | {check.doc} |" in text
