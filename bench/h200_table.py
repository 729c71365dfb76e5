"""One table of every kernel kind and every harness on the GPU: the bench's and the gate's ns per point.

Reads what `bash bench/h200.sh table` leaves in a results folder (run there, on the GPU machine):

- ``frontier.txt``: `bench/frontier.py run`'s output (rosenna's batched kernel beside PyTorch eager
  and torch.compile at 16M points; conv nets in µs per call at 1, 16 and 256 samples); a run cut
  short still has its live lines;
- the gate's reports (every per-point harness: the native batch kernel, the user's CUDA kernel
  calling ``<name>_infer`` and ``<name>_infer_warp``, OpenMP and OpenACC loops in C and Fortran
  under GCC 12, OpenMP under clang-16): ``gate-reports.json`` (:data:`REPORTS`, every run's
  ``gate-report.json`` under its run name, which ``--collect`` adds to), the older layout
  ``gate/<run>/gate-report.json``, and for a run with neither (its report did not come back) the
  rows its log ``gate.txt`` printed;

and the kernel kinds from the frontier build's generated headers (``--build``, default
build/frontier). It prints one Markdown table (``--out FILE``: writes it, whole or not at all), or
with ``--readme FILE`` rewrites the block between ``<!-- h200-table:begin -->`` and
``<!-- h200-table:end -->`` in FILE:

    python3 bench/h200_table.py results/h200/<date>                       # print
    python3 bench/h200_table.py results/h200/<date> --readme docs/performance.md   # rewrite the docs table
    python3 bench/h200_table.py RESULTS --collect GATE_OUT                # add a gate run's report

Embedded weights are shown (the file-loaded rows of the gate are within a few % of them); a gate
row that did not pass is shown with its status, never as a number. A gate run that was cut or
skipped (bench/h200.sh's time budget) is named in a line under the table.
"""

import argparse
import glob
import json
import os
import re
import sys

#: The gate's harnesses as columns: (harness name in the report, compiler family, column title).
GATE_COLUMNS = [
    ("batch", "gcc", "`_infer_batch` (gate)"),
    ("cuda-user", "gcc", "user kernel + `_infer`"),
    ("cuda-warp", "gcc", "user kernel + `_infer_warp`"),
    ("c-omp", "clang", "C `omp target`, clang-16"),
    ("c-omp", "gcc", "C `omp target`, GCC 12"),
    ("fortran-omp", "gcc", "F `omp target`, GCC 12"),
    ("c-acc", "gcc", "C `acc parallel`, GCC 12"),
    ("fortran-acc", "gcc", "F `acc parallel`, GCC 12"),
    ("batch-omp", "clang", "whole-field C `omp target` batch, clang-16"),
    ("batch-omp", "gcc", "whole-field C `omp target` batch, GCC 12"),
]
BENCH_COLUMNS = ["kernel kind", "unit", "`_infer_batch` (bench, 16M)", "PyTorch eager", "torch.compile"]
BEGIN, END = "<!-- h200-table:begin -->", "<!-- h200-table:end -->"
#: The bench's conv nets keep their batch in the row name; the gate's conv net is one row of its own.
ROW = re.compile(r"^\| (?P<model>[\w.-]+) \| (?P<batch>\d+) \| (?P<unit>[\w/]+) \| (?P<ours>[^|]+) \| "
                 r"(?P<eager>[^|]+) \| (?P<comp>[^|]+) \| [^|]+ \| (?P<bad>\d+) of (?P<total>\d+) \|")
SHORT = re.compile(r"([\w-]+)(?:.*?\(on CUDA (sm_\d+\+): the ([^;)]*))?")
#: Every gate run's gate-report.json, under its run name, in one file (bench/h200.sh copies each
#: there as it ends: a report deeper in the results folder may not come back from the machine).
REPORTS = "gate-reports.json"
#: The gate's log: `rosenna gpu-gate`'s progress lines, and bench/h200.sh's "== gate RUN: ..." lines.
LOG_BUILD = re.compile(r"^building (embedded|file-loaded) \(\w+\) in (?P<dir>\S+)$")
LOG_ROW = re.compile(r"^(?P<harness>[\w-]+)\s+(?P<weights>embedded|file-loaded)\s+(?P<status>PASS|FAIL|SKIP)\s+"
                     r"(?P<ns>[\d.e+-]+|-)")
LOG_END = re.compile(r"^(PASS|FAIL): \S+gate-report\.md$")
LOG_SAID = re.compile(r"^== gate (?P<run>\S+): (?P<what>.+)$")  # bench/h200.sh: a run skipped, stopped, reportless
FRONTIER_END = re.compile(r"^\(\d+ s\)$")
#: Each run's gate-report.md in gate-reports.md starts with this and its name.
MD_RUN = "# gate run"
RUN_NAME = re.compile(r"^[a-z]+-((?:gcc|clang)\w*)-(.+)$")


def frontier_rows(path):
    """The last table `bench/frontier.py run` printed: {(model, batch): row dict}."""
    rows = {}
    with open(path) as fh:
        for line in fh:
            m = ROW.match(line.strip())
            if m:
                rows[(m["model"], int(m["batch"]))] = m.groupdict()
    return rows


def short_kind(text):
    """'mlp-narrow (on CUDA sm_80+: the 3xTF32 tensor-core chain; ...' -> 'mlp-narrow; sm_80+: 3xTF32 tensor-core chain'."""
    m = SHORT.match(text.strip())
    if not m:
        return "-"
    return f"{m[1]}; {m[2]}: {m[3].strip()}" if m[2] else m[1]


def kernel_kind(build, model):
    """The kind the frontier build recorded (or the generated kernel's header names), or a dash."""
    manifest = os.path.join(build, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as fh:
            kind = json.load(fh).get(model, {}).get("kind")
        if kind:
            return short_kind(kind)
    for path in glob.glob(os.path.join(build, model, "*_kernel.cu")):
        with open(path) as fh:
            for line in fh:
                if "Batched kernel: " in line:
                    return short_kind(line.split("Batched kernel: ", 1)[1])
    return "-"


def _family(cc):
    return "clang" if "clang" in os.path.basename(str(cc)) else "gcc"


def _model_of(run):
    """A gate run's model from its name as bench/h200.sh gives it (cuda-gcc12nvptx-<model>)."""
    m = RUN_NAME.match(run)
    return (m[2], _family(m[1])) if m else (run.rsplit("-", 1)[-1], _family(run))


def reports(folder):
    """{run: gate-report dict}: ``gate-reports.json``, then the older ``gate/<run>/gate-report.json``."""
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "gate", "*", "gate-report.json"))):
        with open(path) as fh:
            found[os.path.basename(os.path.dirname(path))] = json.load(fh)
    path = os.path.join(folder, REPORTS)
    if os.path.exists(path):
        with open(path) as fh:
            found.update(json.load(fh))
    return found


def log_runs(path):
    """{run: {"rows": [row dict], "done": bool}}, and {run: what bench/h200.sh said of it}, from the gate's log."""
    runs, said, run = {}, {}, None
    with open(path, errors="replace") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if m := LOG_BUILD.match(line):
                run = os.path.basename(os.path.dirname(m["dir"].rstrip("/")))
                runs.setdefault(run, {"rows": [], "done": False})
            elif (m := LOG_ROW.match(line)) and run:
                ns = float(m["ns"]) if m["ns"] != "-" else None
                runs[run]["rows"].append({"harness": m["harness"], "weights": m["weights"], "status": m["status"],
                                          "ns_per_point": ns})
            elif (m := LOG_END.match(line)) and run:
                runs[run]["done"] = True
            elif m := LOG_SAID.match(line):
                said[m["run"]] = m["what"]
    return runs, said


def gate_runs(folder):
    """[(run, model, family, rows, complete)] from the reports, and for a run without one from the
    log; and the lines that name what was cut or skipped."""
    found, notes = [], []
    have = reports(folder)
    for run, report in have.items():
        model = os.path.splitext(os.path.basename(str(report["model"])))[0]
        found.append((run, model, _family(report["config"].get("cc", "")), report["rows"],
                      report.get("complete", True)))
    log = os.path.join(folder, "gate.txt")
    said = {}
    if os.path.exists(log):
        runs, said = log_runs(log)
        for run, seen in runs.items():
            if run not in have:
                found.append((run, *_model_of(run), seen["rows"], seen["done"]))
    for run, _, _, rows, complete in found:
        if not complete:
            done = sum(r["status"] != "SKIP" for r in rows)
            notes.append(f"gate run {run} stopped before its end ({done} harness row(s) done)")
    notes += [f"gate run {run}: {what}" for run, what in said.items() if run not in {f[0] for f in found}]
    return found, notes


def gate_cells(folder):
    """{model: {(harness, family): text}} from every gate run's embedded rows, the models whose gate
    ran the whole-field harnesses (their figures are per sample), and the notes of gate_runs."""
    cells, fields = {}, set()
    runs, notes = gate_runs(folder)
    for _, model, family, rows, _ in runs:
        for row in rows:
            if row["weights"] != "embedded" or row["status"] == "SKIP":
                continue
            if row["status"] == "PASS" and row["ns_per_point"] is not None:
                text = f"{row['ns_per_point']:.3g}"
            else:
                text = row["status"]
            cells.setdefault(model, {})[(row["harness"], family)] = text
            if row["harness"].startswith("batch-"):
                fields.add(model)
    return cells, fields, notes


def frontier_ended(path):
    """Whether `bench/frontier.py run` printed its closing "(N s)" line."""
    with open(path, errors="replace") as fh:
        return any(FRONTIER_END.match(line) for line in fh)


def table(folder, build):
    path = os.path.join(folder, "frontier.txt")
    bench = frontier_rows(path) if os.path.exists(path) else {}
    gate, fields, notes = gate_cells(folder)
    if not os.path.exists(path):
        notes.insert(0, "no frontier.txt: the bench did not run")
    elif not frontier_ended(path):
        notes.insert(0, "the bench (bench/frontier.py run) stopped before its end: its rows so far")
    seen = {key for per_model in gate.values() for key in per_model}
    columns = [c for c in GATE_COLUMNS if c[:2] in seen]
    known = {h for h, _, _ in GATE_COLUMNS}  # the native kernels run under both gates: GCC's column
    columns += [(h, fam, f"{h}, {fam}") for h, fam in sorted(seen) if h not in known]
    head = ["model"] + BENCH_COLUMNS + [title for _, _, title in columns]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- | --- |" + " ---: |" * (len(head) - 3)]
    models = list(dict.fromkeys([m for m, _ in bench] + sorted(gate)))
    for model in models:
        batches = sorted(b for m, b in bench if m == model) or [None]
        for batch in batches:
            b = bench.get((model, batch))
            name = model if b is None or b["unit"] == "ns/pt" else f"{model}, {batch} sample{'s' * (batch > 1)}"
            cells = [name, kernel_kind(build, model)]
            if b is None:
                cells += ["ns/sample" if model in fields else "ns/pt", "-", "-", "-"]
            else:
                flag = "" if b["bad"] == "0" else f" ({b['bad']} of {b['total']} outside tol)"
                cells += [b["unit"], b["ours"].strip() + flag, b["eager"].strip(), b["comp"].strip()]
            first = batch == batches[0]
            g = gate.get(model, {}) if first else {}
            cells += [g.get((h, fam), "-") for h, fam, _ in columns]
            lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += [""] + [f"Not complete: {note}." for note in notes]
    return "\n".join(lines) + "\n"


def _replace(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def collect(folder, run_dir):
    """Add ``run_dir``'s gate-report.json to the folder's REPORTS under the run's name, and rewrite
    gate-reports.md (every run's gate-report.md, one after another)."""
    src = os.path.join(run_dir, "gate-report.json")
    if not os.path.exists(src):
        return 0  # the run ended before its first report (a build that failed to start): its log says why
    path = os.path.join(folder, REPORTS)
    have = {}
    if os.path.exists(path):
        with open(path) as fh:
            have = json.load(fh)
    with open(src) as fh:
        have[os.path.basename(os.path.normpath(run_dir))] = json.load(fh)
    _replace(path, json.dumps(have, indent=1) + "\n")
    md = os.path.join(run_dir, "gate-report.md")
    if os.path.exists(md):
        parts = {}
        mds = path[:-len(".json")] + ".md"
        if os.path.exists(mds):
            with open(mds) as fh:
                for chunk in fh.read().split(MD_RUN)[1:]:
                    name, _, text = chunk.partition("\n")
                    parts[name.strip()] = text
        with open(md) as fh:
            parts[os.path.basename(os.path.normpath(run_dir))] = fh.read()
        _replace(mds, "".join(f"{MD_RUN} {name}\n{text}" for name, text in parts.items()))
    return 0


def rewrite(readme, text):
    with open(readme) as fh:
        old = fh.read()
    if BEGIN not in old or END not in old:
        print(f"h200_table: {readme} has no {BEGIN} ... {END} block: add the two markers where the table goes",
              file=sys.stderr)
        return 2
    head, rest = old.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    _replace(readme, head + BEGIN + "\n" + text + END + tail)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a results folder of `bash bench/h200.sh table` (frontier.txt, gate/)")
    ap.add_argument("--build", default="build/frontier", help="the frontier build, for the kernel kinds")
    ap.add_argument("--readme", help="rewrite this file's table block instead of printing")
    ap.add_argument("--out", help="write the table into this file (whole, through a temporary file)")
    ap.add_argument("--collect", metavar="GATE_OUT",
                    help=f"add the gate run in GATE_OUT (its --out folder) to RESULTS/{REPORTS}, then stop")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.results):
        print(f"h200_table: {args.results} is not a folder: give the results folder of `bash bench/h200.sh table`",
              file=sys.stderr)
        return 2
    if args.collect:
        return collect(args.results, args.collect)
    text = table(args.results, args.build)
    if args.readme:
        return rewrite(args.readme, text)
    if args.out:
        _replace(args.out, text)
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
