"""``rosenna gpu-gate`` as a library: prove a generated model runs on the GPU, right and fast.

The gate generates the model twice (embedded and file-loaded weights), builds it, and runs the
harnesses of :mod:`rosenna.gate.harness`:

1. ``c-omp``: ``<name>_infer`` per point inside a C ``omp target teams distribute parallel for``
   (and ``c-acc``: inside an OpenACC ``parallel loop gang vector``, when OpenACC flags are given);
2. ``fortran-omp``: the same from Fortran, explicit-shape dummies (and ``fortran-acc``);
3. ``batch``: device-resident data handed to ``<name>_infer_batch`` (the native CUDA kernel with
   ``--backend cuda``; the OpenMP one with ``omp``);
4. ``cuda-user``: the user's own CUDA kernel calling ``<name>_infer`` per thread (cuda only).

Each is compared with onnxruntime on the first :data:`CHECK` points (the tolerance of ``rosenna
verify``), timed over N distinct points (median of repeats, data on the device outside the
timed window), checked to have run on the device, and run at 0 and :data:`STEPS` extra steps over
resident data under a CUPTI injection counter: the difference is what the loop moved between host
and device, which must be nothing. A planted-transfer run shows the counter sees a copy.
``host_fallback`` runs on a machine with no GPU (CI): omp backend, no device or transfer checks.

The result: ``gate-report.md`` (every command and the tail of its output, the table, PASS/FAIL)
and ``gate-report.json`` in ``out``; :func:`run` returns the report dict, ``report["pass"]``.
"""

import json
import os
import platform
import shlex
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from rosenna import __version__, zoo
from rosenna.compare import compare
from rosenna.errors import BuildError, UsageError
from rosenna.emit import whole
from rosenna.gate import harness

#: Points compared with onnxruntime.
CHECK = 256
#: Small host-to-device blocks a runtime may copy per launch of an offload region (measured on the
#: H200: libgomp's OpenMP plugin copies one of 24 B (C) or 56 B (Fortran), its OpenACC one two of
#: 16 B (C) or 30 B (Fortran)): the region's arguments, not data.
LAUNCH_ARG_BLOCKS = 2

#: Steps of the transfer-counted loop.
STEPS = 4
#: Tolerances keyed on the ONNX model's dtype (as rosenna verify).
BACKENDS = ("cuda", "hip", "omp")


@dataclass
class Config:
    model: str = "gemm_big"  # a zoo name or an .onnx path
    cc: str = None
    fc: str = None  # "none": skip the Fortran harness
    flags: str = None  # OpenMP offload flags for cc and fc
    acc_flags: str = None  # OpenACC flags for cc and fc: runs the OpenACC harnesses (host fallback: -fopenacc)
    backend: str = None
    host_fallback: bool = False
    points: int = 1_000_000
    out: str = "gpu-gate"
    devcc: str = None
    devflags: str = None
    host_cc: str = "gcc"  # compiles <name>.c of the native-kernel archive
    reps: int = 11
    label: str = ""  # names the compiler set in the report


@dataclass
class Row:
    harness: str
    weights: str
    status: str = "FAIL"
    on_device: object = None
    max_abs_err: float = None
    worst: str = ""
    ns_per_point: float = None
    transfers: object = None  # (copies, bytes) in the counted loop, or "n/a"
    note: str = ""


@dataclass
class Gate:
    config: Config
    log: list = field(default_factory=list)  # (command, rc, output tail)

    # -- running commands ---------------------------------------------------------------------
    def sh(self, argv, cwd=None, env=None, check=True, timeout=900):
        text = " ".join(shlex.quote(a) for a in argv)
        try:
            proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except (OSError, subprocess.TimeoutExpired) as exc:
            out, rc = str(exc), -1
        self.log.append((text if cwd is None else f"(cd {cwd} && {text})", rc, out[-3000:]))
        if check and rc != 0:
            raise BuildError(f"`{text}` failed with status {rc}:\n{out[-2000:]}")
        return rc, out


#: The note of a harness that does not apply to a whole-field plan (and is not run).
SKIP_WHOLE = "not run: whole-field plan, its device path is <name>_infer_one (the batch harnesses)"


def _defaults(config):
    c = Config(**asdict(config))
    if c.host_fallback:
        c.backend = c.backend or "omp"
        c.cc = c.cc or os.environ.get("CC", "gcc")
        c.fc = c.fc or os.environ.get("FC", "gfortran")
        c.flags = c.flags if c.flags is not None else "-fopenmp"
        c.acc_flags = c.acc_flags if c.acc_flags is not None else "-fopenacc"
    else:
        c.backend = c.backend or ("cuda" if shutil.which("nvcc") else "hip" if shutil.which("hipcc") else "omp")
        c.cc = c.cc or os.environ.get("CC", "gcc")
        c.fc = c.fc or os.environ.get("FC", "gfortran")
        c.flags = c.flags if c.flags is not None else "-fopenmp -foffload=nvptx-none"
    if c.backend not in BACKENDS:
        raise UsageError(f"--backend {c.backend!r}: choose one of {', '.join(BACKENDS)}")
    if c.backend == "cuda":
        c.devcc = c.devcc or "nvcc"
        c.devflags = c.devflags or "-O3 -arch=sm_90"
    elif c.backend == "hip":
        c.devcc = c.devcc or "hipcc"
        c.devflags = c.devflags or "-O3 --offload-arch=gfx90a"
    if c.points < 1:
        raise UsageError("--points must be at least 1")
    return c


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
    import onnxruntime as ort

    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    dtype = np.float64 if plan.precision == "double" else np.float32
    rows = []
    for p in range(x.shape[0]):
        feed = {}
        for name, s in zip(names, plan.inputs):
            feed[name] = x[p, s.offset:s.offset + s.size].astype(dtype).reshape(s.shape)
        outs = session.run(None, feed)
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
    for line in output.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[1])
    return None


def _cuda_root(devcc):
    """The CUDA installation nvcc belongs to, as nvcc's dry run names it (a wrapper script on PATH
    may hide it; the generated .mk finds its runtime library the same way)."""
    try:
        out = subprocess.run([devcc, "-dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        if line.startswith("#$ TOP="):
            return os.path.realpath(line[len("#$ TOP="):].strip())
    return os.path.dirname(os.path.dirname(os.path.realpath(shutil.which(devcc) or devcc)))


def _cupti_dirs(devcc):
    root = _cuda_root(devcc)
    env = os.environ.get("ROSENNA_CUPTI_DIR")
    cands = ([env] if env else []) + [os.path.join(root, "extras", "CUPTI"), root,
                                      os.path.join(root, "targets", "x86_64-linux")]
    for base in cands:
        inc = os.path.join(base, "include")
        for lib in ("lib64", "lib"):
            libdir = os.path.join(base, lib)
            if os.path.isfile(os.path.join(inc, "cupti.h")) and any(
                    f.startswith("libcupti.so") for f in (os.listdir(libdir) if os.path.isdir(libdir) else [])):
                return inc, libdir
    return None


def run(config):
    """Run the gate; returns the report dict (``report["pass"]``) and writes the report files."""
    c = _defaults(config)
    out = os.path.abspath(c.out)
    os.makedirs(out, exist_ok=True)
    gate = Gate(c)
    from rosenna.generate import Options, build_plan, generate

    model_path = _model_path(c, out)
    _, plan = build_plan(model_path, Options(lang="c"))
    n = plan.name
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, size=(c.points, plan.nx)).astype(np.float32)
    xfile = os.path.join(out, "x.bin")
    x.tofile(xfile)
    check = min(CHECK, c.points)
    ref = _reference(model_path, plan, x[:check])
    import onnx

    dtype = "float64" if onnx.load(model_path).graph.input[0].type.tensor_type.elem_type == 11 else "float32"

    counter = None
    if not c.host_fallback and c.backend == "cuda":
        dirs = _cupti_dirs(c.devcc)
        if dirs:
            src = os.path.join(out, "count_transfers.cu")
            with open(src, "w") as f:
                f.write(harness.COUNTER)
            counter = os.path.join(out, "libcount_transfers.so")
            rc, _ = gate.sh([c.devcc, "-shared", "-Xcompiler", "-fPIC", "-I", dirs[0], src, "-L", dirs[1], "-lcupti",
                             "-Xlinker", f"-rpath,{dirs[1]}", "-o", counter], check=False)
            counter = counter if rc == 0 else None

    fmt = {"n": n, "N": n.upper(), "check": check}
    whole = plan.path == "whole"
    rows, results = [], {}
    variants = (("embedded", True), ("file-loaded", False))
    for label, embed in variants:
        vdir = os.path.join(out, label)
        omp_dir, nat_dir = os.path.join(vdir, "omp"), os.path.join(vdir, c.backend)
        for d in {omp_dir, nat_dir}:
            generate(model_path, d, Options(lang="both", embed=embed))
        defs = [] if embed else ["-DROSENNA_WEIGHTS"]
        env = dict(os.environ)
        if not embed:
            env["ROSENNA_GATE_WEIGHTS"] = os.path.join(omp_dir, f"{n}.rwt")
        flags = shlex.split(c.flags)
        builds = []  # (harness name, executable or None, note, env)
        if whole:
            # The per-point routine of a whole-field plan keeps all its activations in one
            # thread's locals: no device path. What runs on the device is <name>_infer_one, one
            # parallel loop (OpenMP) or kernel (CUDA/HIP) per op; the batch harnesses call it per
            # sample, here also through the offload compiler's OpenMP build.
            builds += [(name, None, SKIP_WHOLE) for name in _per_point_names(c)]
            if c.backend != "omp":
                builds.append(("batch-omp", *_omp_batch_build(gate, c, fmt, vdir, omp_dir, defs)))
        else:
            builds += _per_point_builds(gate, c, fmt, vdir, omp_dir, defs, "omp")
            if c.acc_flags:
                acc_dir = os.path.join(vdir, "acc")
                generate(model_path, acc_dir, Options(lang="both", embed=embed))
                builds += _per_point_builds(gate, c, fmt, vdir, acc_dir, defs, "acc")
        try:
            if c.backend == "omp":
                exe, note = _omp_batch_build(gate, c, fmt, vdir, omp_dir, defs)
                if exe is None:
                    raise BuildError(note)
            else:
                gate.sh(["make", "-s", "-f", f"{n}.mk", f"ROSENNA_BACKEND={c.backend}", f"CC={c.host_cc}", "CFLAGS=-O2",
                         "ROSENNA_OFFLOAD_FLAGS=", f"DEVCC={c.devcc}", f"DEVFLAGS={c.devflags}"], cwd=nat_dir)
                if c.backend == "hip":
                    raise BuildError("the batch and user-kernel harnesses are written for the CUDA runtime; "
                                     "the hip archive was built (compile-only here)")
                src = os.path.join(vdir, "h3_batch.c")
                _write(src, harness.C_BATCH_CUDA.format(**fmt))
                exe = os.path.join(vdir, "h3_batch")
                gate.sh([c.devcc, "-O2", *defs, "-I", nat_dir, src, os.path.join(nat_dir, f"lib{n}.a"), "-o", exe])
            builds.append(("batch", exe, ""))
        except BuildError as exc:
            builds.append(("batch", None, str(exc).splitlines()[0]))
        if c.backend == "cuda" and whole:
            builds.append(("cuda-user", None, SKIP_WHOLE))
        elif c.backend == "cuda":
            try:
                src = os.path.join(vdir, "h4_cuda_user.cu")
                _write(src, harness.CUDA_USER.format(**fmt))
                exe = os.path.join(vdir, "h4_cuda_user")
                gate.sh([c.devcc, *shlex.split(c.devflags), "-rdc=true", *defs, "-I", nat_dir, src,
                         os.path.join(nat_dir, f"lib{n}_device.a"), os.path.join(nat_dir, f"lib{n}.a"), "-o", exe])
                builds.append(("cuda-user", exe, ""))
            except BuildError as exc:
                builds.append(("cuda-user", None, str(exc).splitlines()[0]))

        for name, exe, note in builds:
            row = Row(name, label, status="SKIP" if note == SKIP_WHOLE else "FAIL", note=note)
            rows.append(row)
            if exe is None:
                continue
            yfile = exe + ".y"
            runs = {}
            for steps in (0, STEPS):
                run_env = dict(env)
                run_env.pop("ROSENNA_TRANSFERS", None)  # the counter's report must reach this output
                if name.endswith("-acc") and not c.host_fallback:
                    run_env.setdefault("ACC_DEVICE_TYPE", "nvidia")
                if counter:
                    run_env["CUDA_INJECTION64_PATH"] = counter
                rc, output = gate.sh([exe, str(c.points), str(c.reps), str(steps), xfile, yfile], env=run_env, check=False)
                if rc != 0:
                    row.note = f"exit status {rc}: {output.strip().splitlines()[-1] if output.strip() else ''}"
                    break
                runs[steps] = output
            if len(runs) < 2:
                continue
            row.on_device = bool(_value(runs[STEPS], "ON_DEVICE"))
            row.ns_per_point = _value(runs[STEPS], "NS_PER_POINT")
            got = np.fromfile(yfile, dtype=np.float64 if plan.precision == "double" else np.float32)
            got = got.reshape(check, plan.ny).astype(np.float64)
            cmp = compare(got, ref, dtype, output="y")
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
                    allowed = _launch_allowance(name, plan, c)
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
            results.setdefault("exes", {})[(name, label)] = (exe, yfile, env)

    # The counter must see a planted transfer (one 4-byte copy per counted step).
    planted = None
    if counter and results.get("exes"):
        key = ("batch", "embedded") if ("batch", "embedded") in results["exes"] else next(iter(results["exes"]))
        exe, yfile, env = results["exes"][key]
        seen = []
        for steps in (0, STEPS):
            run_env = dict(env, CUDA_INJECTION64_PATH=counter)
            rc, output = gate.sh([exe, str(min(c.points, 4096)), "1", str(steps), xfile, yfile + ".plant", "1"],
                                 env=run_env, check=False)
            seen.append(_transfers(output) if rc == 0 else None)
        if seen[0] and seen[1]:
            copies = (seen[1][0] + seen[1][2]) - (seen[0][0] + seen[0][2])
            planted = {"harness": f"{key[0]} ({key[1]})", "planted": STEPS, "counted": copies,
                       "status": "PASS" if copies >= STEPS else "FAIL"}
        else:
            planted = {"harness": f"{key[0]} ({key[1]})", "planted": STEPS, "counted": None, "status": "FAIL"}

    report = _report(c, plan, rows, planted, gate.log, counter, out)
    return report


#: The per-point harnesses of each directive model: (offload flags attribute of the config,
#: C template, Fortran template, file stem of the C harness, of the Fortran one).
PER_POINT = {
    "omp": ("flags", "C_OMP", "FORTRAN_OMP", "h1_c_omp", "h2_fortran_omp"),
    "acc": ("acc_flags", "C_ACC", "FORTRAN_ACC", "h1b_c_acc", "h2b_fortran_acc"),
}


def _per_point_builds(gate, c, fmt, vdir, lib_dir, defs, model):
    """Harnesses 1 and 2 (OpenMP target) or 1b and 2b (OpenACC ``parallel loop gang vector``): the
    per-point routine inside the harness's own loop, C and Fortran, against archives built in
    ``lib_dir`` with that model's offload flags. Returns ``(name, executable or None, note)``."""
    n = fmt["n"]
    flags_attr, c_template, f_template, c_stem, f_stem = PER_POINT[model]
    offload = getattr(c, flags_attr)
    flags = shlex.split(offload)
    builds = []
    try:
        gate.sh(["make", "-s", "-f", f"{n}.mk", "ROSENNA_BACKEND=omp", f"CC={c.cc}", "CFLAGS=-O2",
                 f"ROSENNA_OFFLOAD_FLAGS={offload}"], cwd=lib_dir)
        src, exe = os.path.join(vdir, c_stem + ".c"), os.path.join(vdir, c_stem)
        _write(src, getattr(harness, c_template).format(**fmt))
        gate.sh([c.cc, "-O2", *flags, *defs, "-I", lib_dir, src, os.path.join(lib_dir, f"lib{n}.a"), "-lm", "-o", exe])
        builds.append((f"c-{model}", exe, ""))
    except BuildError as exc:
        builds.append((f"c-{model}", None, str(exc).splitlines()[0]))
    if c.fc != "none":
        try:
            gate.sh(["make", "-s", "-f", f"{n}_fortran.mk", f"FC={c.fc}", "FFLAGS=-O2",
                     f"ROSENNA_OFFLOAD_FLAGS={offload}"], cwd=lib_dir)
            src, exe = os.path.join(vdir, f_stem + ".F90"), os.path.join(vdir, f_stem)
            _write(src, getattr(harness, f_template).format(**fmt))
            mod_dir = os.path.join(vdir, f"{model}-mod")
            os.makedirs(mod_dir, exist_ok=True)
            gate.sh([c.fc, "-O2", *flags, *defs, "-I", lib_dir, "-J", mod_dir, src, os.path.join(lib_dir, f"lib{n}_f.a"),
                     "-o", exe])
            builds.append((f"fortran-{model}", exe, ""))
        except BuildError as exc:
            builds.append((f"fortran-{model}", None, str(exc).splitlines()[0]))
    return builds


def _launch_allowance(name, plan, c):
    """Launch-argument blocks a harness may show over the counted steps: LAUNCH_ARG_BLOCKS per
    OpenMP/OpenACC region launch. The per-point loops launch one region per step; an OpenMP
    ``<name>_infer_batch`` one per call, or for a whole-field plan one per region of
    ``<name>_infer_one`` per sample. CUDA/HIP harnesses launch kernels, which copy nothing."""
    if name.endswith(("-omp", "-acc")) and not name.startswith("batch"):
        return LAUNCH_ARG_BLOCKS * STEPS
    if name == "batch-omp" or (name == "batch" and c.backend == "omp"):
        per_call = len(whole.regions(plan.body)) * c.points if plan.path == "whole" else 1
        return LAUNCH_ARG_BLOCKS * per_call * STEPS
    return 0


def _per_point_names(c):
    models = ["omp"] + (["acc"] if c.acc_flags else [])
    langs = ["c"] + (["fortran"] if c.fc != "none" else [])
    return [f"{lang}-{model}" for model in models for lang in langs]


def _omp_batch_build(gate, c, fmt, vdir, lib_dir, defs):
    """Harness 3 on the OpenMP build: ``<name>_infer_batch`` on device pointers, the archive
    built with the offload compiler and flags. Returns ``(executable or None, note)``."""
    n = fmt["n"]
    try:
        gate.sh(["make", "-s", "-f", f"{n}.mk", "ROSENNA_BACKEND=omp", f"CC={c.cc}", "CFLAGS=-O2",
                 f"ROSENNA_OFFLOAD_FLAGS={c.flags}"], cwd=lib_dir)
        src, exe = os.path.join(vdir, "h3_batch.c"), os.path.join(vdir, "h3_batch_omp")
        _write(src, harness.C_BATCH_OMP.format(**fmt))
        gate.sh([c.cc, "-O2", *shlex.split(c.flags), *defs, "-I", lib_dir, src, os.path.join(lib_dir, f"lib{n}.a"),
                 "-lm", "-o", exe])
        return exe, ""
    except BuildError as exc:
        return None, str(exc).splitlines()[0]


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _machine():
    gpu = "none"
    if shutil.which("nvidia-smi"):
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.strip() or "none"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {"host": platform.node(), "gpu": gpu, "date": time.strftime("%Y-%m-%d", time.gmtime())}


def _report(c, plan, rows, planted, log, counter, out):
    ok = (all(r.status in ("PASS", "SKIP") for r in rows) and any(r.status == "PASS" for r in rows)
          and (planted is None or planted["status"] == "PASS"))
    if not c.host_fallback and planted is None:
        ok = False
    mode = "host fallback (no device checks)" if c.host_fallback else f"device, backend {c.backend}"
    report = {
        "rosenna": __version__, "model": plan.name, "points": c.points, "mode": mode,
        "machine": _machine(), "config": asdict(c),
        "transfer_counter": "CUPTI injection (CUDA_INJECTION64_PATH)" if counter else "none",
        "rows": [asdict(r) for r in rows], "planted_transfer": planted, "pass": ok,
    }
    lines = [f"# rosenna gpu-gate: {plan.name}, {'PASS' if ok else 'FAIL'}", "",
             f"- rosenna {__version__}; {report['machine']['date']}; host {report['machine']['host']}; "
             f"GPU {report['machine']['gpu']}",
             f"- mode: {mode}; points: {c.points}; repeats: {c.reps} (median); checked against onnxruntime on "
             f"{min(CHECK, c.points)} points",
             f"- compilers: cc `{c.cc}`, fc `{c.fc}`, offload flags `{c.flags}`, OpenACC flags `{c.acc_flags}`"
             + (f"; native kernel `{c.devcc} {c.devflags}`, host cc `{c.host_cc}`" if c.backend != "omp" else ""),
             f"- transfers: {report['transfer_counter']}; each harness ran at 0 and {STEPS} extra steps over resident "
             "data, the difference is what the loop moved (copies, bytes)", "",
             "| harness | weights | status | on device | max abs err | ns/point | data transfers in loop | note |",
             "| --- | --- | --- | --- | --- | ---: | --- | --- |"]
    for r in rows:
        err = f"{r.max_abs_err:.2e}" if r.max_abs_err is not None else ""
        ns = f"{r.ns_per_point:.4f}" if r.ns_per_point is not None else ""
        xfer = r.transfers if isinstance(r.transfers, str) or r.transfers is None else f"{r.transfers[0]} ({r.transfers[1]} B)"
        lines.append(f"| {r.harness} | {r.weights} | {r.status} | {r.on_device} | {err} | {ns} | {xfer} | {r.note} |")
    if planted:
        lines += ["", f"Planted transfer: {planted['planted']} copies planted in {planted['harness']}, "
                      f"{planted['counted']} counted: {planted['status']}"]
    fails = [r for r in rows if r.status != "PASS" and r.worst]
    if fails:
        lines += ["", "Worst points:"] + [f"- {r.harness} ({r.weights}): {r.worst}" for r in fails]
    lines += ["", "## Commands", ""]
    for cmd, rc, output in log:
        lines += [f"### `{cmd}`", "", f"status {rc}", "", "```", output.strip() or "(no output)", "```", ""]
    with open(os.path.join(out, "gate-report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "gate-report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    return report
