"""Calibrated site profiles: ``rosenna gpu-gate --calibrate`` times tuning choices on this node and
writes the winners into a toolchain profile overlay that later ``generate`` runs pick up.

A default of :class:`rosenna.strategy.Tuning` is a measurement on one GPU. On a site's own GPU
the gate times, one knob at a time, each candidate value (``MEASURED`` for the GPU; with
``--host-fallback`` the host batch's knobs, :data:`HOST_MEASURED`): the model is generated with
that value and the whole gate runs on it, so a candidate that gives wrong answers fails and is never
chosen. The objective is the ``batch`` harness's time per point (``<name>_infer_batch``, the path
the knobs shape), embedded weights. A candidate whose generated code is byte-identical to the
current value's is not timed (it cannot differ: ``host_block_double`` on a float model). The
fastest passing candidate wins only when it beats the current value by more than :data:`MARGIN`;
the next knob is timed with the winners so far (one pass, knob by knob).

The winners go into ``<overlay dir>/<profile>.yaml``: ``extends: <profile>`` (a profile that extends
its own name extends the next one of that name down the search path) and ``tuning: <section>:``,
the section the profile's GPU architecture names (``sm_90``, ``gfx90a``), ``default`` for host
knobs. The overlay folder must come before the profile's own folder on the search path
(``ROSENNA_TOOLCHAIN_PATH``, then the user's folder): checked before anything is timed. A second
calibration updates the overlay; a file there that is not one is never overwritten.
``calibrate-report.md`` and ``.json`` in the output folder hold every measurement.
"""

import hashlib
import json
import os
import platform
import re
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

from rosenna.errors import UsageError

#: The host batch path's knobs, timed on the host (``--host-fallback``): points per block and the
#: scratch a block may take. (field, candidates); the Tuning default is timed too.
HOST_MEASURED = (
    ("host_block_single", (32, 8, 16, 64)),
    ("host_block_double", (16, 4, 8, 32)),
    ("host_block_bytes", (64 * 1024, 16 * 1024, 256 * 1024)),
)
#: A candidate replaces the current value only when faster by more than this fraction.
MARGIN = 0.05
#: The first line of an overlay this module wrote; a file without it is never overwritten.
OVERLAY_MARK = "# rosenna gpu-gate --calibrate overlay"
#: The harness whose time per point is the objective.
OBJECTIVE = ("batch", "embedded")


def knobs(asked, host_fallback):
    """``[(field, candidates, named)]`` to time: every measured knob (``asked`` empty or ``["all"]``), or the
    fields named as ``KEY`` (its usual candidates) or ``KEY=V1,V2`` / ``KEY=V1:V2`` (exactly these values).

    Raises:
        UsageError: an unknown field, or a value of the wrong kind (the Tuning's own check).
    """
    from rosenna.strategy import MEASURED, Tuning

    table = dict(HOST_MEASURED if host_fallback else MEASURED)
    asked = [a for a in (asked or ()) if a != "all"]
    if not asked:
        return [(key, values, False) for key, values in table.items()]
    chosen = []
    for item in asked:
        key, eq, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq:
            if key not in table:
                raise UsageError(f"--calibrate {item!r}: {key} has no candidates of its own here; give them "
                                 f"({key}=V1,V2) or choose from {', '.join(table)}")
            chosen.append((key, table[key], False))
            continue
        # ":" too: sbatch --export=ALL,ROSENNA_GATE_ARGS=... splits its value at commas.
        texts = [v.strip() for v in re.split(r"[,:]", values) if v.strip()]
        if not texts:
            raise UsageError(f"--calibrate {item!r}: give the values to time, e.g. {key}=8,16")
        parsed = [getattr(Tuning().parse_overrides([f"{key}={t}"], where="--calibrate"), key) for t in texts]
        chosen.append((key, tuple(dict.fromkeys(parsed)), True))
    return chosen


def check_overlay_dir(profile, overlay_dir, environ=None):
    """The overlay's path, after checking it can work: raise UsageError (nothing written) when a
    file there is not an overlay, or the folder does not come before the profile's own on the
    search path (the overlay would never be read)."""
    from rosenna.toolchain import search_path

    path = Path(overlay_dir).expanduser().resolve() / f"{profile.name}.yaml"
    if path.exists() and not path.read_text(encoding="utf-8").startswith(OVERLAY_MARK):
        raise UsageError(f"{path} exists and is not a calibration overlay (its first line is not "
                         f"'{OVERLAY_MARK}'): give another --overlay-dir")
    dirs = [d.path.resolve() for d in search_path(environ)]
    own = Path(profile.source).resolve().parent
    where = path.parent
    if where not in dirs or (own in dirs and dirs.index(where) > dirs.index(own)) or \
            (where == own and path != Path(profile.source).resolve()):
        raise UsageError(f"--overlay-dir {overlay_dir}: profiles there are not read before {profile.source}; put it "
                         "first on ROSENNA_TOOLCHAIN_PATH (e.g. ROSENNA_TOOLCHAIN_PATH=DIR:...), or leave "
                         "--overlay-dir out for your own folder")
    return path


def _code(model_path, tuning, embed=True):
    """The sha256 of every file generate writes for ``tuning`` (the C, Fortran and kernel files)."""
    from rosenna.generate import Options, generate

    with tempfile.TemporaryDirectory() as tmp:
        generate(model_path, tmp, Options(lang="both", embed=embed, tuning=tuning))
        digest = hashlib.sha256()
        # The provenance comments name the tuning (Fortran's wrapped over lines): the code is compared,
        # with whitespace and comment leaders collapsed, the tuning's words taken out.
        stamp = f" {tuning.describe()}".encode()
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as f:
                text = re.sub(rb"\s+(?:!\s*)?", b" ", f.read())
            digest.update(name.encode() + b"\0" + text.replace(stamp, b"") + b"\0")
        return digest.hexdigest()


def _objective(report):
    for row in report["rows"]:
        if (row["harness"], row["weights"]) == OBJECTIVE and row["status"] == "PASS":
            return row["ns_per_point"]
    return None


def calibrate(config, profile, asked, out, overlay_dir, progress=print):
    """Time the knobs of ``asked`` with the gate and write the overlay; return the calibration report.

    Args:
        config: the gate's :class:`~rosenna.gate.Config` (its ``tuning``: the starting point).
        profile: the resolved toolchain profile the overlay extends.
        asked: ``--calibrate`` values (see :func:`knobs`).
        out: the folder of the runs and of calibrate-report.md / .json.
        overlay_dir: where ``<profile>.yaml`` is written.

    Raises:
        UsageError: a bad knob or overlay folder (before anything runs), or a gate that fails with
            the starting tuning (nothing is calibrated on a failing node).
    """
    from rosenna import gate, zoo
    from rosenna.generate import target_arch
    from rosenna.strategy import Tuning

    from rosenna.gate.config import resolved

    overlay = check_overlay_dir(profile, overlay_dir)
    table = knobs(asked, config.host_fallback)
    config = replace(resolved(config), tuning=config.tuning)
    section = "default" if config.host_fallback else (target_arch(profile) or "default")
    os.makedirs(out, exist_ok=True)
    model_path = config.model
    if config.model in zoo.MODELS:
        model_path = os.path.join(out, f"{config.model}.onnx")
        zoo.save(config.model, model_path)
    best = config.tuning or Tuning()
    base = dict(weights="embedded", acc_flags=config.acc_flags if config.acc_flags is not None else "", fc="none")
    trials, chosen, timed = [], {}, {}

    def run(tuning, label):
        key = _code(model_path, tuning)
        if key not in timed:
            c = replace(config, tuning=tuning, model=model_path, out=os.path.join(out, label), **base)
            report = gate.run(c, progress=None)
            timed[key] = (_objective(report), report["pass"], label)
        return key, timed[key]

    start_key, (start_ns, start_ok, _) = run(best, "start")
    progress(f"start: {best.describe()}: batch {start_ns} ns/point, {'PASS' if start_ok else 'FAIL'}")
    if not start_ok or start_ns is None:
        raise UsageError(f"the gate fails with the starting tuning ({best.describe()}); see {out}/start/gate-report.md. "
                         "Fix the node before calibrating it")
    for field, candidates, explicit in table:
        current = getattr(best, field)
        # Values named on the command line are timed as named; a knob's usual candidates with the current value.
        values = list(candidates) if explicit else list(dict.fromkeys((current, *candidates)))
        current_key = _code(model_path, best)
        results = []
        for value in values:
            tuning = best.replace("--calibrate", **{field: value})
            key = _code(model_path, tuning)
            if value != current and key == current_key:
                trials.append({"field": field, "value": value, "status": "same code", "ns_per_point": None,
                               "note": f"generates the same code as {field}={current}: not timed"})
                continue
            _, (ns, ok, label) = run(tuning, f"{field}-{value}")
            results.append((value, ns, ok))
            trials.append({"field": field, "value": value, "status": "PASS" if ok else "FAIL", "ns_per_point": ns,
                           "note": "" if label == f"{field}-{value}" else f"same code as run {label}"})
            progress(f"{field}={value}: batch {ns} ns/point, {'PASS' if ok else 'FAIL'}")
        passing = [(ns, value) for value, ns, ok in results if ok and ns is not None]
        if not passing:
            continue
        ns, value = min(passing, key=lambda t: t[0])
        _, (current_ns, _, _) = run(best, "start")  # timed already: the start, or the last knob's winner
        if value != current and ns > current_ns * (1 - MARGIN):
            value = current  # not clearly faster than the current value: keep it
        chosen[field] = value
        best = best.replace("--calibrate", **{field: value})
    report = {"schema_version": 1, "profile": profile.name, "section": section, "overlay": str(overlay),
              "model": config.model, "points": config.points, "objective": " ".join(OBJECTIVE), "margin": MARGIN,
              "host": platform.node(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "start": {"tuning": (config.tuning or Tuning()).describe(), "ns_per_point": start_ns},
              "trials": trials, "chosen": chosen, "result": best.describe()}
    write_overlay(overlay, profile, section, chosen, report)
    _write_report(out, report)
    return report


def write_overlay(path, profile, section, values, report):
    """Write (or update) the overlay ``path``: ``extends`` the profile, ``tuning.<section>`` set to ``values``."""
    data = {}
    if path.exists():
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data["extends"] = profile.name
    data.setdefault("description", f"{profile.name}, calibrated by rosenna gpu-gate --calibrate")
    data.setdefault("tuning", {}).setdefault(section, {}).update(values)
    head = (f"{OVERLAY_MARK}: tuning for {profile.name} measured on {report['host']}, {report['date']}\n"
            f"# (model {report['model']}, {report['points']} points; the measurements: calibrate-report.md of that run).\n"
            "# A later calibration updates this file; edit it like any profile.\n")
    text = head + yaml.safe_dump({k: data[k] for k in ("extends", "description", "tuning") if k in data}
                                 | {k: v for k, v in data.items() if k not in ("extends", "description", "tuning")},
                                 sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _write_report(out, report):
    lines = [f"# rosenna gpu-gate --calibrate: {report['profile']} ({report['section']})", "",
             f"- host {report['host']}, {report['date']}; model {report['model']}, {report['points']} points; "
             f"objective: the {report['objective']} harness's ns/point (median of the gate's repeats)",
             f"- start: {report['start']['tuning']}, {report['start']['ns_per_point']} ns/point",
             f"- a candidate wins when faster than the current value by more than {report['margin']:.0%}",
             f"- result: {report['result']}, written to {report['overlay']} (tuning.{report['section']})", "",
             "| knob | value | status | ns/point | note |", "| --- | --- | --- | ---: | --- |"]
    for t in report["trials"]:
        ns = f"{t['ns_per_point']:.4f}" if t["ns_per_point"] is not None else "-"
        mark = " (chosen)" if report["chosen"].get(t["field"]) == t["value"] else ""
        lines.append(f"| {t['field']} | {t['value']}{mark} | {t['status']} | {ns} | {t['note'] or '-'} |")
    for ext, text in (("json", json.dumps(report, indent=1) + "\n"), ("md", "\n".join(lines) + "\n")):
        path = os.path.join(out, f"calibrate-report.{ext}")
        with open(f"{path}.tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(f"{path}.tmp", path)
