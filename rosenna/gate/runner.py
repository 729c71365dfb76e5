"""Running the gate: generate, build (:mod:`.build`), run each harness, compare, count transfers,
and rewrite the report (:mod:`.report`) after every row.

``progress`` (a callable taking one line) hears of each harness as it starts and as it ends, with
its time per point and PASS/FAIL; the CLI prints those lines as they come.
"""

import os
import shlex

import numpy as np

from rosenna import zoo
from rosenna.compare import compare, low_precision_tolerance
from rosenna.errors import UsageError
from rosenna.gate import build, report
from rosenna.gate.config import WEIGHTS, check_device, resolved
from rosenna.gate.report import Row

#: Points compared with onnxruntime.
CHECK = 256
#: Small host-to-device blocks a runtime may copy per launch of an offload region (measured on the
#: H200: libgomp's OpenMP plugin copies one of 24 B (C) or 56 B (Fortran), its OpenACC one two of
#: 16 B (C) or 30 B (Fortran)): the region's arguments, not data.
LAUNCH_ARG_BLOCKS = 2
#: Steps of the transfer-counted loop.
STEPS = 4
#: The note of a harness that does not apply to a whole-field plan (and is not run).
SKIP_WHOLE = "not run: whole-field plan, its device path is <name>_infer_batch (the batch harnesses)"


def _model_path(config, out):
    if config.model in zoo.MODELS:
        path = os.path.join(out, f"{config.model}.onnx")
        zoo.save(config.model, path)
        return path
    if not os.path.isfile(config.model):
        raise UsageError(f"--model {config.model!r}: neither a built-in model ({', '.join(zoo.MODELS)}) nor a file")
    return os.path.abspath(config.model)


def _reference(model_path, plan, x):
    """onnxruntime on each of the first CHECK points, with the plan's input shapes."""
    from rosenna.extras import onnxruntime

    ort = onnxruntime()
    reference = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in reference.get_inputs()]
    rows = []
    for p in range(x.shape[0]):
        feed = {}
        for name, s in zip(names, plan.inputs):
            feed[name] = x[p, s.offset:s.offset + s.size].reshape(s.shape)
        outs = reference.run(None, feed)
        rows.append(np.concatenate([np.asarray(o, np.float64).reshape(-1) for o in outs]))
    return np.array(rows)


def _transfers(output):
    """(data copies, data bytes, launch-argument copies, their bytes) from the counter's line.

    Launch-argument copies are host-to-device copies of at most 256 bytes (the counter's
    LAUNCH_ARGS_MAX); every other copy, in any direction, is data.
    """
    for line in output.splitlines():
        if line.startswith("ROSENNA_TRANSFERS "):
            parts = line.split()
            if parts[1] == "unavailable":
                return None
            fields = dict(zip(parts[1::3], zip(map(int, parts[2::3]), map(int, parts[3::3]))))
            small = fields.get("small_htod", (0, 0))
            copies = fields["htod"][0] + fields["dtoh"][0] - small[0]
            nbytes = fields["htod"][1] + fields["dtoh"][1] - small[1]
            return copies, nbytes, small[0], small[1]
    return None


def _value(output, key):
    """The number a harness printed after ``key``, or None (absent, or not a number)."""
    for line in output.splitlines():
        if line.startswith(key + " "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def launch_allowance(name, plan, c):
    """Launch-argument blocks a harness may show over the counted steps: LAUNCH_ARG_BLOCKS per
    OpenMP/OpenACC region launch. The per-point loops launch one region per step; an OpenMP
    ``<name>_infer_batch`` one per call, or for a whole-field plan one per region of
    ``<name>_infer_one`` per sample; the Fortran batch of a whole-field plan one per region per
    chunk of :func:`rosenna.emit.whole.batch_samples` samples. CUDA/HIP harnesses launch kernels,
    which copy nothing."""
    from rosenna import parallel
    from rosenna.emit import whole

    if name.endswith(("-omp", "-acc")) and not name.startswith("batch"):
        return LAUNCH_ARG_BLOCKS * STEPS
    if name.startswith("batch-fortran"):  # every region once per chunk of samples, and the call's data construct
        # H200 (the first full table): the OpenMP row counted 112 blocks and the OpenACC row 220 over 4 steps for
        # the conv net's 27 regions: 27 (one block per region) or 2 x 27, plus one per call.
        chunks = -(-c.points // whole.batch_samples(plan))
        regions = sum(kind != "comment" for kind, _, _ in parallel.regions(plan.field_body))
        return LAUNCH_ARG_BLOCKS * (regions * chunks + 1) * STEPS
    if name == "batch-omp" or (name == "batch" and c.backend == "omp"):
        per_call = len(parallel.regions(plan.field_body)) * c.points if plan.path == "whole" else 1
        return LAUNCH_ARG_BLOCKS * per_call * STEPS
    return 0


def _builds(shell, c, plan, model_path, values, vdir, embed):
    """Generate the model for one weights variant and build its harnesses."""
    from rosenna.generate import Options, generate

    omp_dir, nat_dir = os.path.join(vdir, "omp"), os.path.join(vdir, c.backend)
    for d in {omp_dir, nat_dir}:
        generate(model_path, d, Options(lang="both", embed=embed, tuning=c.tuning, precision=c.precision))
    defs = [] if embed else ["-DROSENNA_WEIGHTS"]
    builds = []
    if plan.path == "whole":
        # The per-point routine of a whole-field plan keeps all its activations in one thread's
        # locals: no device path. What runs on the device is <name>_infer_batch, one parallel loop
        # (OpenMP, OpenACC) or kernel (CUDA/HIP) per op over the samples: the batch harnesses,
        # here also through the offload compiler's OpenMP build, and from Fortran through the
        # module's OpenMP and OpenACC branches.
        builds += [(name, None, SKIP_WHOLE) for name in build.per_point_names(c)]
        if c.backend != "omp":
            builds.append(build.batch_omp(shell, c, values, vdir, omp_dir, defs))
        if c.fc != "none":
            builds.append(build.fortran(shell, c, values, vdir, omp_dir, defs, "omp", "batch-fortran-omp"))
        if c.fc != "none" and c.acc_flags:
            acc_dir = os.path.join(vdir, "acc")
            generate(model_path, acc_dir, Options(lang="fortran", embed=embed, tuning=c.tuning, precision=c.precision))
            builds.append(build.fortran(shell, c, values, vdir, acc_dir, defs, "acc", "batch-fortran-acc"))
    else:
        builds += build.per_point(shell, c, values, vdir, omp_dir, defs, "omp")
        if c.acc_flags:
            acc_dir = os.path.join(vdir, "acc")
            generate(model_path, acc_dir, Options(lang="both", embed=embed, tuning=c.tuning, precision=c.precision))
            builds += build.per_point(shell, c, values, vdir, acc_dir, defs, "acc")
    if c.backend == "omp":
        builds.append(build.batch_omp(shell, c, values, vdir, omp_dir, defs, name="batch"))
    else:
        builds.append(build.batch_native(shell, c, values, vdir, nat_dir, defs))
    if c.backend == "cuda":
        for name in ("cuda-user", "cuda-warp"):
            builds.append((name, None, SKIP_WHOLE) if plan.path == "whole"
                          else build.cuda_user(shell, c, values, vdir, nat_dir, defs, name))
    return builds, (dict(os.environ, ROSENNA_GATE_WEIGHTS=os.path.join(omp_dir, f"{plan.name}.rwt"))
                    if not embed else dict(os.environ))


def tolerance_of(graph, plan):
    """The tolerance a row is judged by: None (the model type's) unless the plan is
    ``--precision bf16`` / ``fp16``, then verify's for it (:func:`rosenna.compare.low_precision_tolerance`)."""
    if not plan.low_precision:
        return None
    from rosenna.verify import dense_layers, reduction_length

    return low_precision_tolerance(plan.low_precision, dense_layers(graph), reduction_length(graph))[0]


def _measure(shell, c, plan, row, exe, env, xfile, ref, counter, tolerance=None):
    """Run one harness at 0 and STEPS extra steps; fill ``row`` (``tolerance``: :func:`tolerance_of`)."""
    yfile = exe + ".y"
    runs = {}
    for steps in (0, STEPS):
        run_env = dict(env)
        run_env.pop("ROSENNA_TRANSFERS", None)  # the counter's report must reach this output
        if row.harness.endswith("-acc") and not c.host_fallback:
            run_env.setdefault("ACC_DEVICE_TYPE", "nvidia")
        if counter:
            run_env["CUDA_INJECTION64_PATH"] = counter
        rc, output = shell.sh([exe, str(c.points), str(c.reps), str(steps), xfile, yfile], env=run_env, check=False)
        if rc != 0:
            row.note = f"exit status {rc}: {build._last_line(output)}"
            return
        runs[steps] = output
    row.on_device = bool(_value(runs[STEPS], "ON_DEVICE"))
    row.ns_per_point = _value(runs[STEPS], "NS_PER_POINT")
    dtype = np.float64 if plan.precision == "double" else np.float32
    got = np.fromfile(yfile, dtype=dtype).reshape(ref.shape[0], plan.ny).astype(np.float64)
    cmp = compare(got, ref, "float64" if plan.precision == "double" else "float32", output="y", tolerance=tolerance)
    worst = cmp.worst_index
    row.max_abs_err = cmp.abs_err
    row.worst = (f"point {worst[0]} y[{worst[1]}]: got {cmp.got:.9g}, onnxruntime {cmp.want:.9g}, "
                 f"tolerance {cmp.allowed:.2g}")
    ok = cmp.passed
    if c.host_fallback:
        row.transfers = "n/a (host)"
    else:
        t0, t1 = _transfers(runs[0]), _transfers(runs[STEPS])
        if t0 and t1:
            data, nbytes, args, arg_bytes = (b - a for a, b in zip(t0, t1))
            row.transfers = (data, nbytes)
            # An OpenMP target (or OpenACC) region's arguments travel in one small block per
            # launch (one launch per step here); that is the runtime's launch, not data. Only
            # those harnesses get that allowance; any other copy fails every harness.
            allowed = launch_allowance(row.harness, plan, c)
            if args:
                row.note = (row.note + "; " if row.note else "") + (
                    f"{args} launch-argument block(s) of {arg_bytes // max(args, 1)} B")
            ok = ok and row.on_device and data == 0 and args <= allowed
        else:
            row.transfers = "not counted"
            ok = False
    row.status = "PASS" if ok else "FAIL"
    if not row.on_device and not c.host_fallback:
        row.note = (row.note + "; " if row.note else "") + "ran on the host"


def _planted(shell, c, exes, xfile, counter):
    """The counter must see a planted transfer (one copy per counted step)."""
    key = ("batch", "embedded") if ("batch", "embedded") in exes else next(iter(exes))
    exe, env = exes[key]
    seen = []
    for steps in (0, STEPS):
        run_env = dict(env, CUDA_INJECTION64_PATH=counter)
        rc, output = shell.sh([exe, str(min(c.points, 4096)), "1", str(steps), xfile, exe + ".y.plant", "1"],
                              env=run_env, check=False)
        seen.append(_transfers(output) if rc == 0 else None)
    copies = (seen[1][0] + seen[1][2]) - (seen[0][0] + seen[0][2]) if seen[0] and seen[1] else None
    return {"harness": f"{key[0]} ({key[1]})", "planted": STEPS, "counted": copies,
            "status": "PASS" if copies is not None and copies >= STEPS else "FAIL"}


def run(config, progress=None):
    """Run the gate; returns the report dict (``report["pass"]``) and writes the report files.

    Args:
        config: a :class:`rosenna.gate.config.Config`.
        progress: called with one line as each harness starts and ends (default: nothing).

    Raises:
        NoDevice: not on the host fallback and no GPU is visible (before anything is built).
        UsageError: for a bad model or option.
    """
    say = progress or (lambda line: None)
    c = resolved(config)
    if not c.host_fallback:
        check_device()
    out = os.path.abspath(c.out)
    os.makedirs(out, exist_ok=True)
    shell = build.Shell()
    from rosenna.generate import Options, build_plan

    model_path = _model_path(c, out)
    graph, plan = build_plan(model_path, Options(lang="c", precision=c.precision))
    tolerance = tolerance_of(graph, plan)
    real = "double" if plan.precision == "double" else "float"
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, size=(c.points, plan.nx)).astype(np.float64 if real == "double" else np.float32)
    xfile = os.path.join(out, "x.bin")
    x.tofile(xfile)
    check = min(CHECK, c.points)
    ref = _reference(model_path, plan, x[:check])
    host = report.machine()
    counter = build.counter(shell, c.devcc, out) if not c.host_fallback and c.backend == "cuda" else None
    values = {"n": plan.name, "check": check, "real": real}
    rows, exes = [], {}

    def write(complete=False, planted=None):
        result = report.build(c, plan, rows, planted, counter, checks=check, steps=STEPS, complete=complete, host=host)
        report.write(out, result, shell.log)
        return result

    write()
    for label, embed in WEIGHTS[c.weights]:
        vdir = os.path.join(out, label)
        say(f"building {label} ({real}) in {vdir}")
        builds, env = _builds(shell, c, plan, model_path, values, vdir, embed)
        for name, exe, note in builds:
            row = Row(name, f"{label} {plan.low_precision}" if plan.low_precision else label,
                      status="SKIP" if note == SKIP_WHOLE else "FAIL", note=note)
            rows.append(row)
            if exe is not None:
                say(f"{name:<17} {label:<12} running {c.points} points")
                _measure(shell, c, plan, row, exe, env, xfile, ref, counter, tolerance)
                if row.status == "PASS" or row.ns_per_point is not None:
                    exes[(name, label)] = (exe, env)
            write()  # before the row is announced: a job killed now keeps it
            ns = f"{row.ns_per_point:.4f} ns/point" if row.ns_per_point is not None else "-"
            say(f"{name:<17} {label:<12} {row.status:<4} {ns}" + (f"  {row.note}" if row.note else ""))
    planted = _planted(shell, c, exes, xfile, counter) if counter and exes else None
    if planted:
        say(f"planted transfer: {planted['counted']} of {planted['planted']} counted: {planted['status']}")
    return write(complete=True, planted=planted)
