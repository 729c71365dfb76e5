"""One table of every kernel kind and every harness on the GPU: the bench's and the gate's ns per point.

Reads what `bash bench/h200.sh table` leaves in a results folder (run there, on the GPU machine):

- ``frontier.txt``: `bench/frontier.py run`'s output (rosenna's batched kernel beside PyTorch eager
  and torch.compile at 16M points; conv nets in µs per call at 1, 16 and 256 samples);
- ``gate/<run>/gate-report.json``: `rosenna gpu-gate`'s reports (every per-point harness: the native
  batch kernel, the user's CUDA kernel calling ``<name>_infer`` and ``<name>_infer_warp``, OpenMP
  and OpenACC loops in C and Fortran under GCC 12, OpenMP under clang-16);

and the kernel kinds from the frontier build's generated headers (``--build``, default
build/frontier). It prints one Markdown table, or with ``--readme FILE`` rewrites the block between
``<!-- h200-table:begin -->`` and ``<!-- h200-table:end -->`` in FILE:

    python3 bench/h200_table.py results/h200/<date>                       # print
    python3 bench/h200_table.py results/h200/<date> --readme README.md    # rewrite README's table

Embedded weights are shown (the file-loaded rows of the gate are within a few % of them); a gate
row that did not pass is shown with its status, never as a number.
"""

import argparse
import glob
import json
import os
import re
import sys

#: The gate's harnesses as columns: (harness name in the report, compiler family, column title).
GATE_COLUMNS = [
    ("batch", "gcc", "`_infer_batch` (gate, 1M)"),
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


def gate_cells(folder):
    """{model: {(harness, family): text}} from every gate-report.json under folder/gate, and the
    models whose gate ran the whole-field harnesses (their figures are per sample)."""
    cells, fields = {}, set()
    for path in sorted(glob.glob(os.path.join(folder, "gate", "*", "gate-report.json"))):
        with open(path) as fh:
            report = json.load(fh)
        family = "clang" if "clang" in os.path.basename(str(report["config"].get("cc", ""))) else "gcc"
        model = os.path.splitext(os.path.basename(str(report["model"])))[0]
        for row in report["rows"]:
            if row["weights"] != "embedded" or row["status"] == "SKIP":
                continue
            if row["status"] == "PASS" and row["ns_per_point"] is not None:
                text = f"{row['ns_per_point']:.3g}"
            else:
                text = row["status"]
            cells.setdefault(model, {})[(row["harness"], family)] = text
            if row["harness"].startswith("batch-"):
                fields.add(model)
    return cells, fields


def table(folder, build):
    bench = frontier_rows(os.path.join(folder, "frontier.txt")) if os.path.exists(
        os.path.join(folder, "frontier.txt")) else {}
    gate, fields = gate_cells(folder)
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
    return "\n".join(lines) + "\n"


def rewrite(readme, text):
    with open(readme) as fh:
        old = fh.read()
    if BEGIN not in old or END not in old:
        print(f"h200_table: {readme} has no {BEGIN} ... {END} block: add the two markers where the table goes",
              file=sys.stderr)
        return 2
    head, rest = old.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    tmp = readme + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(head + BEGIN + "\n" + text + END + tail)
    os.replace(tmp, readme)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a results folder of `bash bench/h200.sh table` (frontier.txt, gate/)")
    ap.add_argument("--build", default="build/frontier", help="the frontier build, for the kernel kinds")
    ap.add_argument("--readme", help="rewrite this file's table block instead of printing")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.results):
        print(f"h200_table: {args.results} is not a folder: give the results folder of `bash bench/h200.sh table`",
              file=sys.stderr)
        return 2
    text = table(args.results, args.build)
    if args.readme:
        return rewrite(args.readme, text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
