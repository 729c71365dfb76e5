"""Fixed code: the ``.cuh`` / ``.h`` files under ``rosenna/data/``, inlined into generated files.

The files are real sources that a compiler checks on their own (tests/test_device_code.py runs
``nvcc -fsyntax-only`` and ``hipcc`` over each); the emitter copies their bytes into
``<name>_kernel.cu``. Where a file spells a constant that Python also uses (a block size, a row
stride), :func:`load` is given the Python value and refuses a file that disagrees, so the two
cannot drift apart.
"""

import functools
import os
import re

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


@functools.lru_cache(maxsize=None)
def _read(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def load(name, **constants):
    """The text of ``rosenna/data/<name>``; each ``NAME=value`` given must appear in it as
    ``NAME = value`` (a ``constexpr``) or ``NAME(value`` (a macro's argument list)."""
    text = _read(name)
    for key, value in constants.items():
        if not re.search(rf"\b{re.escape(key)}\s*(=\s*|\()({re.escape(str(value))})\b", text):
            raise AssertionError(f"rosenna/data/{name}: {key} is not {value} as in Python")
    return text


def path(name):
    """Where ``rosenna/data/<name>`` lies (for the compile tests)."""
    return os.path.join(DATA, name)
