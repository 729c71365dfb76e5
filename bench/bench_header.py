"""bench/rosenna_bench.cuh, the header every H200 bench driver includes: its tolerance block
written from rosenna/compare.py (the one rule verify, the gate and conformance use), and a copy of
it beside the sources a bench script builds.

    python3 bench/bench_header.py      # rewrite the block in bench/rosenna_bench.cuh from compare.py

A script that writes a driver into a build folder calls ``install(folder)`` and compiles there;
bench/frontier.cu and bench/gen_bench.cu include the header beside them.
"""

import os
import sys

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rosenna_bench.cuh")
BEGIN = "// BEGIN tolerance: written by bench/bench_header.py from rosenna/compare.py's TOLERANCE; do not edit\n"
END = "// END tolerance\n"


def block():
    """The #define lines of the tolerance block, from rosenna.compare.TOLERANCE."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(HEADER)))
    from rosenna.compare import TOLERANCE

    lines = []
    for dtype, macro in (("float32", "F32"), ("float64", "F64")):
        tol = TOLERANCE[dtype]
        lines += [f"#define ROSENNA_BENCH_{macro}_ATOL {tol.atol!r}\n", f"#define ROSENNA_BENCH_{macro}_RTOL {tol.rtol!r}\n"]
    return "".join(lines)


def text():
    """The header with its tolerance block as compare.py says now."""
    with open(HEADER) as fh:
        old = fh.read()
    head, rest = old.split(BEGIN, 1)
    return head + BEGIN + block() + END + rest.split(END, 1)[1]


def install(folder):
    """Write the header (block current) into ``folder``; return its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, os.path.basename(HEADER))
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text())
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    print(f"{install(os.path.dirname(HEADER))}: tolerance block from rosenna/compare.py")
