"""The gate's report: ``gate-report.md`` for people and ``gate-report.json`` for tools.

Both are rewritten after every harness (each write replaces the file whole, through a temporary
file), so a job killed at its wall time leaves the rows done so far, marked incomplete. The JSON
carries :data:`SCHEMA_VERSION`; the Markdown shows values in words (``yes``/``no``/``-``), never
Python literals.
"""

import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass

from rosenna import __version__

#: Bumped when a key of gate-report.json changes meaning or goes away (2: profile, flags, job, host,
#: complete; rows unchanged).
SCHEMA_VERSION = 2
#: Environment variables that hold a batch job's id, first found wins.
JOB_ID_VARS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "JOB_ID")


@dataclass
class Row:
    harness: str
    weights: str
    status: str = "FAIL"
    on_device: bool = None
    max_abs_err: float = None
    worst: str = ""
    ns_per_point: float = None
    transfers: object = None  # (copies, bytes) in the counted loop, or a note
    note: str = ""


def job_id(environ=None):
    """The batch job's id and the variable it came from, or (None, None) outside a job."""
    environ = os.environ if environ is None else environ
    for var in JOB_ID_VARS:
        if environ.get(var):
            return environ[var], var
    return None, None


def machine():
    gpu = None
    if shutil.which("nvidia-smi"):
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {"host": platform.node(), "node": node_name(), "gpu": gpu, "date": time.strftime("%Y-%m-%d", time.gmtime())}


def node_name(environ=None):
    """Slurm's name of this node (SLURMD_NODENAME: several nodes may share a host), else the short host name."""
    environ = os.environ if environ is None else environ
    return environ.get("SLURMD_NODENAME") or platform.node().split(".")[0]


def words(value):
    """A value as the Markdown report shows it: no None/True/False."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def passed(c, rows, planted, complete=True):
    ok = (complete and all(r.status in ("PASS", "SKIP") for r in rows) and any(r.status == "PASS" for r in rows)
          and (planted is None or planted["status"] == "PASS"))
    return ok and (c.host_fallback or planted is not None)


def build(c, plan, rows, planted, counter, *, checks, steps, complete, host=None):
    """The report as a dict (what gate-report.json holds)."""
    mode = "host fallback (no device checks)" if c.host_fallback else f"device, backend {c.backend}"
    job, job_var = job_id()
    return {
        "schema_version": SCHEMA_VERSION,
        "rosenna": __version__, "model": plan.name, "precision": plan.low_precision or plan.precision, "points": c.points,
        "mode": mode, "machine": host or machine(),
        "job": {"id": job, "from": job_var},
        "profile": c.profile,
        "flags": {"cc": c.cc, "fc": c.fc, "cflags": c.cflags, "fflags": c.fflags, "offload": c.flags, "openacc": c.acc_flags, "backend": c.backend,
                  "devcc": c.devcc, "devflags": c.devflags, "host_cc": c.host_cc},
        "config": asdict(c),
        "checked_points": checks, "steps": steps,
        "transfer_counter": "CUPTI injection (CUDA_INJECTION64_PATH)" if counter else "none",
        "rows": [asdict(r) for r in rows], "planted_transfer": planted,
        "complete": complete, "pass": passed(c, rows, planted, complete),
    }


def _precision_words(precision):
    """The report's words for its precision (a float32 model's ``--precision bf16`` / ``fp16`` too)."""
    if precision in ("bf16", "fp16"):
        return (f"float32 model generated with --precision {precision} (dense layers in {precision}, float32 sums; "
                "judged by verify's tolerance for it, docs/low-precision.md)")
    return f"{'float64' if precision == 'double' else 'float32'} model"


def markdown(report, log):
    c, m = report["flags"], report["machine"]
    state = "PASS" if report["pass"] else ("FAIL" if report["complete"] else "INCOMPLETE (still running, or stopped)")
    profile = report["profile"]
    job = report["job"]
    lines = [f"# rosenna gpu-gate: {report['model']}, {state}", "",
             f"- rosenna {report['rosenna']}; {m['date']}; host {m['host']}"
             + (f" (node {m['node']})" if m.get("node") and m["node"] != m["host"] else "") + f"; GPU {words(m['gpu'])}; "
             f"job {words(job['id'])}" + (f" (${job['from']})" if job["from"] else ""),
             f"- mode: {report['mode']}; {_precision_words(report['precision'])}; points: {report['points']}; repeats: "
             f"{report['config']['reps']} (median); checked against onnxruntime on {report['checked_points']} points",
             "- toolchain profile: " + (f"{profile['name']} ({profile['file']})" + (
                 f", chosen because {profile['reason']}" if profile.get("reason") else "") if profile else "none (flags below)"),
             f"- compilers: cc `{c['cc']} {c.get('cflags') or ''}`, fc `{c['fc']} {c.get('fflags') or ''}`; OpenMP offload flags `{c['offload'] or '(none)'}`; OpenACC "
             + (f"flags `{c['openacc']}`" if c["openacc"] else "not run (no OpenACC flags)")
             + (f"; native kernel `{c['devcc']} {c['devflags']}`, host cc `{c['host_cc']}`" if c["backend"] != "omp" else ""),
             f"- transfers: {report['transfer_counter']}; each harness ran at 0 and {report['steps']} extra steps over "
             "resident data, the difference is what the loop moved (copies, bytes)", "",
             "| harness | weights | status | on device | max abs err | ns/point | data transfers in loop | note |",
             "| --- | --- | --- | --- | --- | ---: | --- | --- |"]
    for r in report["rows"]:
        err = f"{r['max_abs_err']:.2e}" if r["max_abs_err"] is not None else "-"
        ns = f"{r['ns_per_point']:.4f}" if r["ns_per_point"] is not None else "-"
        xfer = r["transfers"]
        xfer = words(xfer) if isinstance(xfer, str) or xfer is None else f"{xfer[0]} ({xfer[1]} B)"
        note = r["note"].replace("|", "\\|")
        lines.append(f"| {r['harness']} | {r['weights']} | {r['status']} | {words(r['on_device'])} | {err} | {ns} | "
                     f"{xfer} | {note or '-'} |")
    planted = report["planted_transfer"]
    if planted:
        lines += ["", f"Planted transfer: {planted['planted']} copies planted in {planted['harness']}, "
                      f"{words(planted['counted'])} counted: {planted['status']}"]
    fails = [r for r in report["rows"] if r["status"] != "PASS" and r["worst"]]
    if fails:
        lines += ["", "Worst points:"] + [f"- {r['harness']} ({r['weights']}): {r['worst']}" for r in fails]
    lines += ["", "## Commands", ""]
    for cmd, rc, output in log:
        lines += [f"### `{cmd}`", "", f"status {rc}", "", "```", output.strip() or "(no output)", "```", ""]
    return "\n".join(lines) + "\n"


def _replace(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write(out, report, log):
    """Write (replace) gate-report.md and gate-report.json in ``out``."""
    _replace(os.path.join(out, "gate-report.json"), json.dumps(report, indent=1, default=str) + "\n")
    _replace(os.path.join(out, "gate-report.md"), markdown(report, log))
