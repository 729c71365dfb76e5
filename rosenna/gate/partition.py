"""One report for a partition: the gate reports of many nodes merged, slow nodes flagged, failing nodes named.

A partition job (``rosenna gpu-gate --print-job slurm --nodes N``) runs one gate per node, each
writing ``<out>/nodes/<node>/gate-report.json``; ``rosenna gpu-gate --merge <out>`` reads them all
and writes ``partition-report.md`` and ``partition-report.json`` beside ``nodes/``:

- a row per node: node, host, GPU model, driver, and each harness's PASS/FAIL with its time
  (ns per point, the gate's median of repeats);
- a node slower than the partition's median by more than :data:`SLOW_MARGIN` (25 %) on any
  harness is flagged SLOW: it passed, but an admin should look (thermal throttling, a wrong
  clock, a GPU in the wrong PCIe slot); the median is over the nodes that ran that harness;
- a node fails when its gate failed, did not finish (``complete: false``: killed at the wall
  time), or wrote no report at all (its gate never started, or its folder is missing);
- the failing nodes in one line, ready for ``scontrol update NodeName=<list> State=DRAIN
  Reason=...``; the merge exits 1 when there is any.

The JSON carries :data:`SCHEMA_VERSION`.
"""

import json
import os
import re
import statistics

from rosenna.errors import UsageError

#: Bumped when a key of partition-report.json changes meaning or goes away.
SCHEMA_VERSION = 1
#: A node whose time on a harness exceeds the median of the partition by more than this fraction is SLOW.
SLOW_MARGIN = 0.25
NODE_DIR = "nodes"
REPORT = "partition-report"


def expand_hostlist(text):
    """The node names of a Slurm hostlist: ``n[1-3,7],gpu-a01`` -> n1, n2, n3, n7, gpu-a01.

    Ranges keep their zero padding (``a[01-03]`` -> a01, a02, a03). Only one bracket per name, which is
    what Slurm's own node names use.

    Raises:
        UsageError: for brackets that do not close or a range that does not count up.
    """
    names, parts, depth, current = [], [], 0, ""
    for char in text or "":
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    for part in parts:
        part = part.strip()
        if not part:
            continue
        match = re.fullmatch(r"([^\[\]]*)\[([0-9,\-]+)\]([^\[\]]*)", part)
        if not match:
            if "[" in part or "]" in part:
                raise UsageError(f"--nodelist {text!r}: cannot read {part!r} (write n[1-3] or n1,n2,n3)")
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            high = high or low
            if not low.isdigit() or not high.isdigit() or int(high) < int(low):
                raise UsageError(f"--nodelist {text!r}: {item!r} is not a range that counts up")
            names += [f"{prefix}{i:0{len(low)}d}{suffix}" for i in range(int(low), int(high) + 1)]
    return names


def _node_row(name, path):
    """One node's row from its gate-report.json (or the reason there is none)."""
    row = {"node": name, "host": None, "gpu": None, "driver": None, "job": None, "status": "FAIL",
           "harnesses": {}, "slow": [], "why": "", "report": None}
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except FileNotFoundError:
        row["why"] = "no gate report (the gate did not start or was killed before its first row)"
        return row
    except (OSError, ValueError) as exc:
        row["why"] = f"unreadable gate report: {exc}"
        return row
    row["report"] = os.path.relpath(os.path.join(os.path.dirname(path), "gate-report.md"),
                                    os.path.dirname(os.path.dirname(os.path.dirname(path))))
    machine = report.get("machine") or {}
    row["host"] = machine.get("host")
    gpu = machine.get("gpu") or ""
    model, _, driver = gpu.partition(",")
    row["gpu"], row["driver"] = model.strip() or None, driver.strip() or None
    row["job"] = (report.get("job") or {}).get("id")
    for r in report.get("rows", ()):
        row["harnesses"][f"{r['harness']} {r['weights']}"] = {"status": r["status"], "ns_per_point": r.get("ns_per_point"),
                                                              "note": r.get("note", "")}
    failed = [k for k, h in row["harnesses"].items() if h["status"] not in ("PASS", "SKIP")]
    if report.get("pass"):
        row["status"] = "PASS"
    elif not report.get("complete", True):
        row["why"] = "the gate did not finish (stopped at its wall time, or still running)"
    elif failed:
        first = row["harnesses"][failed[0]]
        row["why"] = f"{', '.join(failed)} failed" + (f": {first['note']}" if first["note"] else "")
    else:
        row["why"] = "the gate did not pass (see its report)"
    return row


def merge(out, nodelist=None, nodes=None, margin=SLOW_MARGIN):
    """Merge ``out/nodes/*/gate-report.json`` into ``out/partition-report.{md,json}``; return the report.

    Args:
        out: the partition job's output folder.
        nodelist: the nodes that were to be gated (a hostlist string); each one missing fails.
        nodes: how many nodes were to be gated, when their names are not known beforehand (a job
            array): fewer reports than that fail the merge.
        margin: the SLOW fraction over the median.

    Raises:
        UsageError: ``out`` is not a folder, or there is nothing to merge and nothing expected.
    """
    if not os.path.isdir(out):
        raise UsageError(f"--merge {out!r}: no such folder (the partition job's output folder, with nodes/ in it)")
    node_root = os.path.join(out, NODE_DIR)
    found = sorted(os.listdir(node_root)) if os.path.isdir(node_root) else []
    expected = expand_hostlist(nodelist) if nodelist else []
    names = expected + [n for n in found if n not in expected]
    if not names:
        raise UsageError(f"--merge {out!r}: no node reports in {node_root} and no --nodelist to say which were expected")
    rows = [_node_row(n, os.path.join(node_root, n, "gate-report.json")) for n in names]
    for row in rows:
        if expected and row["node"] not in expected and row["status"] == "PASS":
            row["why"] = "not in --nodelist (gated anyway)"
    # SLOW: over the median of the nodes that passed that harness by more than the margin.
    medians = {}
    for key in sorted({k for r in rows for k in r["harnesses"]}):
        times = [r["harnesses"][key]["ns_per_point"] for r in rows
                 if key in r["harnesses"] and r["harnesses"][key]["status"] == "PASS"
                 and r["harnesses"][key]["ns_per_point"] is not None]
        if times:
            medians[key] = statistics.median(times)
    for row in rows:
        for key, h in row["harnesses"].items():
            median = medians.get(key)
            if h["status"] == "PASS" and median and h["ns_per_point"] is not None and h["ns_per_point"] > median * (1 + margin):
                row["slow"].append(f"{key} {h['ns_per_point'] / median:.2f}x median")
    failing = [r["node"] for r in rows if r["status"] != "PASS"]
    missing_count = None
    if nodes is not None and len([r for r in rows if r["report"]]) < nodes:
        missing_count = nodes - len([r for r in rows if r["report"]])
    report = {
        "schema_version": SCHEMA_VERSION,
        "nodes_expected": expected or nodes,
        "slow_margin": margin,
        "medians_ns_per_point": medians,
        "rows": rows,
        "failing": failing,
        "missing": missing_count,
        "slow": [r["node"] for r in rows if r["slow"]],
        "drain": drain_line(failing),
        "pass": not failing and not missing_count,
    }
    _write(out, report)
    return report


def drain_line(failing):
    """The scontrol line that drains the failing nodes, or "" when none failed."""
    if not failing:
        return ""
    return f'scontrol update NodeName={",".join(failing)} State=DRAIN Reason="rosenna gpu-gate FAIL"'


def markdown(report):
    keys = list(report["medians_ns_per_point"]) or sorted({k for r in report["rows"] for k in r["harnesses"]})
    state = "PASS" if report["pass"] else "FAIL"
    nodes = len(report["rows"])
    lines = [f"# rosenna gpu-gate over {nodes} node(s): {state}", "",
             f"- failing nodes: {', '.join(report['failing']) or 'none'}",
             f"- slow nodes (a harness over the partition's median by more than {report['slow_margin']:.0%}): "
             f"{', '.join(report['slow']) or 'none'}"]
    if report["missing"]:
        lines.append(f"- {report['missing']} node(s) expected wrote no report")
    if report["drain"]:
        lines += ["", "Drain the failing nodes:", "", "```", report["drain"], "```"]
    lines += ["", "| node | host | GPU | driver | " + " | ".join(keys) + " | result |",
              "| --- | --- | --- | --- | " + " | ".join("---" for _ in keys) + " | --- |"]
    for r in report["rows"]:
        cells = []
        for key in keys:
            h = r["harnesses"].get(key)
            if h is None:
                cells.append("-")
            else:
                ns = f" {h['ns_per_point']:.2f} ns" if h["ns_per_point"] is not None else ""
                cells.append(f"{h['status']}{ns}")
        result = r["status"] + (" SLOW: " + "; ".join(r["slow"]) if r["slow"] else "") + (f" ({r['why']})" if r["why"] else "")
        lines.append(f"| {r['node']} | {r['host'] or '-'} | {r['gpu'] or '-'} | {r['driver'] or '-'} | "
                     + " | ".join(cells) + f" | {result.replace('|', '/')} |")
    lines += ["", "Median ns/point per harness: " + (", ".join(f"{k} {v:.2f}" for k, v in report["medians_ns_per_point"].items())
                                                    or "none (no harness passed)"),
              "", "Each node's own report: nodes/<node>/gate-report.md."]
    return "\n".join(lines) + "\n"


def _write(out, report):
    for ext, text in (("json", json.dumps(report, indent=1) + "\n"), ("md", markdown(report))):
        path = os.path.join(out, f"{REPORT}.{ext}")
        with open(f"{path}.tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(f"{path}.tmp", path)
