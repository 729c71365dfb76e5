"""The project speaks of itself: no diary of how it was made (work sessions or sittings, numbered
runs as labels in prose, "new this run", work periods) and no path outside the repository (the
team's machine paths, a `.gpu/setup.sh` or `../shared` that exist on no user's machine) in any
tracked file. Raw measurement outputs under results/<machine>/<date>/ are data as the tools wrote
them and keep their file ids; results/README.md indexes them in neutral words."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (what, pattern). Written to miss the same words in code (onnxruntime's `session.run`,
#: pytest's scope="session", "runs 10 steps").
FORBIDDEN = [
    ("a work session", re.compile(r"\b(?:this|that|next|previous|last|each|every|a|the|work|development|dev|"
                                  r"device|GPU)\s+sessions?\b(?!\.|_|\()", re.I)),
    ("a numbered session", re.compile(r"\bsessions?\s+\d+", re.I)),
    ("a sitting", re.compile(r"\bsittings?\b", re.I)),
    ("a diary note", re.compile(r"\bnew this run\b|\bthis run\b(?! of)", re.I)),
    ("a run label", re.compile(r"\b[Rr]uns? \d+[a-c]?\b(?!\s*(?:steps?|points?|times|s\b|ms\b|cases|calls?|samples?|"
                               r"threads?|ranks?|repeats?|of\b|x\b|%|-|,|\.\d|>))")),
    ("a work period", re.compile(r"\bwork periods?\b", re.I)),
    ("a path of the team's machines", re.compile(r"(?<![\w.])/work/|\.\./shared\b|\.gpu/setup\.sh|(?<![\w./-])\.gpu/")),
]


def tracked_files():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode:  # an unpacked sdist: every file
        return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file())
    return [n for n in listed.stdout.decode().split("\0") if n]


def _raw_result(name):
    parts = name.split("/")
    return parts[0] == "results" and len(parts) > 2


def findings(names, root=ROOT):
    out = []
    for name in names:
        if _raw_result(name) or name == "tests/test_words.py":
            continue
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (a committed .onnx) or gone
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN:
                match = pattern.search(line)
                if match:
                    out.append(f"{name}:{number}: {what}: {match.group(0)!r}: {line.strip()[:120]}")
    return out


def test_no_diary_words_or_outside_paths_in_tracked_files():
    found = findings(tracked_files())
    assert not found, "say what the project does, not how it was made:\n" + "\n".join(found[:60])


def test_the_check_finds_what_it_looks_for(tmp_path):
    samples = {
        "a.md": "Run 17 (2026-12-03): the U-Net. New this run: tiles.\n",
        "b.py": "# measured in session 2; see ../shared/gpu/README.md\n",
        "c.sh": "source .gpu/setup.sh\ncd /work/main\n",
        "d.md": "What changed this session, in the previous sitting.\n",
        "ok.py": "outs = session.run(None, feed)  # runs 10 steps\n@pytest.fixture(scope=\"session\")\n",
    }
    for name, text in samples.items():
        (tmp_path / name).write_text(text)
    found = findings(sorted(samples), root=tmp_path)
    assert {f.split(":")[0] for f in found} == {"a.md", "b.py", "c.sh", "d.md"}, found
    assert len([f for f in found if f.startswith("a.md")]) == 2 and len([f for f in found if f.startswith("c.sh")]) == 2
