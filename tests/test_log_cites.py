"""Code, docs and the tuning's field docs cite a measurement by its section title in the measurement
log (``results/measurement-log.md, "<title>"``): every such cite names a section the log has."""

import os
import re
import subprocess

from rosenna.strategy import Tuning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG = os.path.join(ROOT, "results", "measurement-log.md")
#: A cite: the log's path, a comma, then the title in double quotes (escaped in a Python string, or
#: after a comment's line break).
CITE = re.compile(r'measurement-log\.md\)?,\s*(?:#:?\s*|")?\s*\\?"([^"\\]+)\\?"')


def titles():
    with open(LOG, encoding="utf-8") as f:
        return [line.lstrip("#").strip() for line in f if line.startswith("#")]


def names(title, heads):
    """Whether the cited title is a section's title or the part of it before ':' or ' ('."""
    return any(h == title or h.startswith(title + ":") or h.startswith(title + " (") for h in heads)


def test_cite_pattern_reads_the_forms_in_use():
    text = 'x (results/measurement-log.md, "The epilogue study") and\n#: results/measurement-log.md,\n#: "A b"'
    assert CITE.findall(text) == ["The epilogue study", "A b"]
    assert names("The epilogue study", ["The epilogue study: the clustered kernel's regression"])
    assert not names("The epilogue", ["The epilogue study: the clustered kernel's regression"])


def test_every_cite_names_a_section_of_the_log():
    heads = titles()
    # tuning.py's cites are read from the field docs below (its source splits them over string literals)
    files = subprocess.run(["git", "ls-files", "rosenna", "bench", "docs", "examples"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    found, bad = 0, []
    for rel in files:
        if rel == "rosenna/strategy/tuning.py" or not rel.endswith((".py", ".md", ".sh", ".cuh", ".cu", ".c", ".h")):
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for title in CITE.findall(text):
            found += 1
            if not names(title, heads):
                bad.append(f"{rel}: {title!r}")
    for name in Tuning.names():
        for title in CITE.findall(Tuning.doc(name)):
            found += 1
            if not names(title, heads):
                bad.append(f"Tuning.{name}: {title!r}")
    assert found > 20, "the cite pattern no longer reads the cites"
    assert not bad, "cites of sections the measurement log does not have:\n" + "\n".join(bad)
