"""The whole-field kernels of ``<name>_kernel.cu``: ``<name>_infer_one`` as kernel launches.

What runs in which phase is the strategy's (:class:`rosenna.strategy.Field`, decided by
rosenna/strategy/field/: the regions of :func:`rosenna.parallel.launch_groups`, those whose
elements are cheap computed where they are read or by their producer's threads, per form; the
convs run as implicit GEMMs or shared-memory tiles; the samples per step); this module renders
it. The phases of the CUDA/HIP path: on sm_90 and later, for a few samples, one launch of thread-block
clusters, a cluster per sample, cluster barriers between the phases
(:mod:`rosenna.emit.cuda.field_cluster`); else one
persistent kernel with grid-wide barriers, a thread per element of each region's collapsed loops,
when the GPU holds every phase's threads at once; one launch per phase, a thread per 8 jammed
output channels, when it does not (:func:`infer_one`). For a plan whose per-point
locals are too large for a thread (``plan.path == "whole"``) the batched entry point is
``<name>_infer_one`` per sample (:data:`KIND`).
"""

from rosenna.emit.cuda import conv_igemm, conv_smem, field_cluster, field_fuse
from rosenna.emit.cuda.base import Kind
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, count, resolver, used_scalars
from rosenna.strategy import of as strategy_of

# The kernels' shapes are the tuning's: field_threads (the launched phases' threads per block),
# field_persistent_threads (<name>_field's) and field_persistent_waves (how far <name>_run takes
# the persistent kernel).


def launch_body(plan, launch, renderer=None, depth=1, tid="tid"):
    """The statements of one launch's kernel after the thread index ``tid`` is known: each member
    on its range of ``tid`` (``if (tid < a) {...} else if (tid < b) {...}``), threads past the
    last range doing nothing. A member's part is what one region's kernel did per thread: its
    loop indices from its offset in the range, its private scalars, its body. Plain C over the C
    file's names, so a host harness can run it too (tests/test_infer_one.py does)."""
    renderer = renderer or Renderer(C, plan.precision, resolver(plan, C, whole_field=True))
    t, pad = plan.ctype, "    " * depth
    lines, start = [], 0
    for k, m in enumerate(launch.members):
        end = start + m.threads
        lines.append(pad + ("if" if k == 0 else "} else if") + f" ({tid} < {end}l) {{")
        inner = pad + "    "
        shape = " x ".join(str(loop.extent) for loop in m.chain)
        what = (f"{shape} threads" if len(m.chain) > 1 else count(m.threads, "thread")) if m.kind == "parallel" \
            else "serial, one thread"
        lines.append(inner + f"/* {m.op + ', ' if m.op else ''}region {k}: {what} */")
        if m.kind == "parallel":
            index = tid
            if start:
                lines.append(inner + f"const long r = {tid} - {start}l;")
                index = "r"
            stride = m.threads
            for loop in m.chain:
                stride //= loop.extent
                part = index if stride == 1 else f"{index} / {stride}l"
                lines.append(inner + f"const int {loop.var} = (int)({part} % {loop.extent}l);")
        if hasattr(renderer, "enter"):  # a FieldRenderer: which loops the loads' indices range over
            renderer.enter(m.chain, m.body)
        scalars = used_scalars(m.body)
        if scalars:
            lines.append(inner + f"{t} {', '.join(scalars)};")
        lines += renderer.lines(m.body, depth + 1)
        start = end
    lines.append(pad + "}")
    return lines


def buffer_symbol(sched, i):
    """The kernel file's buffer for scratch buffer i of the schedule's plan, every sample's."""
    return field_fuse.buffer_symbol(sched.plan, i)


def batch_body(sched, launch, depth=1):
    """The statements of one launch's kernel after its global thread index ``g`` is known (and
    below ``count`` times the launch's threads): the sample ``s`` and the thread index within it,
    that sample's pointers into x, y and the intermediates, then :func:`launch_body` over them.
    Plain C over the C file's weight names, the :func:`buffer_symbol` buffers and the schedule's
    value functions, so a host harness runs it too (tests/test_infer_one.py does)."""
    pad, total = "    " * depth, launch.threads
    body = launch_body(sched.plan, launch, field_fuse.renderer(sched), depth)
    lines = [pad + f"const long s = g / {total}l, tid = g - s * {total}l;"]
    lines += [pad + decl for decl in field_fuse.pointers(sched.plan, "\n".join(body))]
    return lines + body


def infer_one(subject):
    """``<name>_infer_one`` and the batched whole-field path for ``<name>_kernel.cu``, as the
    strategy (``subject``: a :class:`rosenna.strategy.Strategy`, or a plan to decide one for)
    decided them (:class:`rosenna.strategy.Field`). Its phases, each over every element of its
    member regions' collapsed loops for up to its ``samples`` samples (a serial region is one
    thread per sample): ``<name>_run`` runs them as one launch of ``<name>_cluster``
    (:mod:`field_cluster`) for up to its ``cluster_samples`` samples where the binary and the
    GPU have clusters (sm_90), else one of two ways, chosen per call by how much work the widest
    phase has:

    - when the GPU holds a thread for every element of every phase at once, one cooperative
      persistent kernel ``<name>_field``: the phases separated by ``grid.sync()`` instead of launch
      boundaries, one launch per call (a 1-sample U-Net: 26 launches become 1);
    - otherwise one kernel ``<name>_phase<k>`` per phase in stream order, each phase's convolutions
      unrolled-and-jammed over 8 output channels (the strategy's ``Field.jammed``): fewer threads doing 8 FMAs per
      load, which pays only when there are more elements than resident threads.

    In every form a conv the strategy tiles runs as shared-memory tiles (:mod:`conv_smem`), and in
    the launched phases one it gives the implicit GEMM as a 3xTF32 implicit GEMM (:mod:`conv_igemm`).

    H200 measurements that chose this rule are in results/measurement-log.md, "The whole-field launch study". The
    intermediates of those samples live in static ``__device__`` buffers. ``<name>_infer_one`` is
    this for one sample; ``<name>_infer_batch`` (:class:`WholeField`) for n. Returns "" when the plan
    has no ``<name>_infer_one``.

    The kernels read the weights under the C file's names (``<name>_w...``), which the kernel file
    declares in ``__constant__`` or ``__device__`` storage.
    """
    strategy = strategy_of(subject)
    field, plan = strategy.field, strategy.plan
    if field is None:
        return ""
    n, t = plan.name, plan.ctype
    sched, held, clustered, samples, few = field.launched, field.persistent, field.cluster, field.samples, field.cluster_samples
    buffers = "\n".join(f"static __device__ {t} {buffer_symbol(sched, i)}[{samples} * {size}];"
                         for i, size in enumerate(field.scratch))
    if few and field.cluster_own_buffers:
        buffers += f"\n/* The clustered kernel's own (its phases differ), for up to {min(samples, few)} samples: */\n" + "\n".join(
            f"static __device__ {t} {cluster_buffer(field)(clustered.plan, i)}[{min(samples, few)} * {size}];"
            for i, size in enumerate(clustered.plan.scratch))
    groups, widest = held.phases, field.widest
    jammed = list(field.jammed["launched"])  # a thread computes up to 8 output channels of a conv
    convs = field.igemm  # the phases run as implicit GEMMs where the call and device allow
    forms = dict(launched=sched, persistent=held, **({"cluster": clustered} if few else {}))
    tiles = field.tiles  # in shared memory
    persistent = _persistent(held, groups, tiles["persistent"])
    launched = _launched(sched, jammed, samples, convs, tiles["launched"])
    cluster = (field_cluster.kernel(clustered, cluster_phases(field, cluster_buffer(field)))
               if few else "")
    values = field_fuse.value_functions(sched, persistent + launched + cluster)
    values = f"\n/* The phases computed where they are read. */\n{values}\n" if values else ""
    cluster = f"\n{cluster}\n\n{field_cluster.launcher(n, t, plan.tuned)}\n" if cluster else ""
    clusters = ("#if defined(__CUDACC__) && !defined(__HIPCC__)\n"
                f"/* Blocks of {n}_cluster resident at once on each device (0: not yet asked; -1: it does not run). */\n"
                f"static int {n}_clusters[64];\n#endif\n" if cluster else "")
    ready = "    if (!ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    faults = _faults(plan, buffer_symbol(sched, plan.fault_buffer), samples) if plan.fault_buffer is not None else ""
    run = (f"    const int status = {n}_run(1, x, y, (rosennaStream_t)stream);\n"
           f"    return status == ROSENNA_STATUS_OK ? {n}_field_faults(1, (rosennaStream_t)stream) : status;"
           if faults else f"    return {n}_run(1, x, y, (rosennaStream_t)stream);")
    waits = ("waits for the one\n   flag it reads back (INDEX: an index was outside its axis)" if faults
             else "never\n   synchronises")
    return f"""
#if defined(__HIPCC__)
#include <hip/hip_cooperative_groups.h>
#else
#include <cooperative_groups.h>
#endif

/* The whole-field path: count samples (at most {samples}) at once, as one persistent kernel or one
   launch per phase ({n}_run chooses). The intermediates of {samples} samples: */
{buffers}
{values}
{conv_igemm.source(sched.plan, convs)}
{conv_smem.source({form: (forms[form].plan, chosen) for form, chosen in tiles.items()})}
{persistent}

{launched}
{cluster}
/* Blocks of {n}_field resident at once on each device (0: not yet asked; -1: no cooperative launch). */
static int {n}_resident[64];
{clusters}
/* count <= {samples} samples x[count][{plan.nx}] -> y[count][{plan.ny}], device pointers, on stream s.{field_cluster.note(n, few)} When
   the resident blocks hold a thread for every element of the widest phase ({count(widest, 'thread')} per
   sample), one cooperative launch of {n}_field with no more blocks than that; otherwise (or where
   cooperative launches are not available) {n}_phases. */
static int {n}_run(int count, const {t} *x, {t} *y, rosennaStream_t s)
{{
    int device = 0;
    if (rosennaGetDevice(&device) != rosennaSuccess)
        return ROSENNA_STATUS_LAUNCH;
{field_cluster.choice(n, few, plan.tuned)}    int resident = device < 64 ? __atomic_load_n(&{n}_resident[device], __ATOMIC_RELAXED) : -1;
    if (resident == 0) {{
        int sms = 0, per_sm = 0, cooperative = 0;
        if (rosennaDeviceGetAttribute(&cooperative, rosennaDevAttrCooperativeLaunch, device) != rosennaSuccess ||
            rosennaDeviceGetAttribute(&sms, rosennaDevAttrMultiProcessorCount, device) != rosennaSuccess ||
            rosennaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {n}_field, {plan.tuned.field_persistent_threads}, 0) != rosennaSuccess ||
            !cooperative || sms * per_sm == 0)
            resident = -1;
        else
            resident = sms * per_sm;
        __atomic_store_n(&{n}_resident[device], resident, __ATOMIC_RELAXED);
    }}
{conv_igemm.prefer(plan, convs)}{_choice(n, widest, plan.tuned)}
    void *args[] = {{(void *)&x, (void *)&y, (void *)&count}};
    if (rosennaLaunchCooperativeKernel((const void *){n}_field, dim3((unsigned)needed), dim3({plan.tuned.field_persistent_threads}), args, 0, s) != rosennaSuccess)
        return ROSENNA_STATUS_LAUNCH;
    return ROSENNA_STATUS_OK;
}}

{faults}
/* x[{plan.nx}] and y[{plan.ny}] are device pointers; launches on the caller's stream, {waits}. The buffers are shared by every call: calls on different streams must not overlap. */
extern "C" int {n}_infer_one(const {t} *x, {t} *y, void *stream)
{{
{ready}{run}
}}
"""


def _faults(plan, symbol, samples):
    """``<name>_field_faults(count, s)``: the fault flags of the first ``count`` samples of the
    phases (:func:`rosenna.loopir.flag_faults`; a pair of floats per sample in ``symbol``, the
    first set to 1 by any element whose index was outside its axis), brought back once per call
    on the caller's stream and waited for; written back cleared only when one was set. Plain
    stores set them, from any number of threads: no atomics, nothing reordered."""
    n, t = plan.name, plan.ctype
    return f"""
/* The fault flags of the first count samples of the last call (a pair per sample, the first set by
   any element whose index was outside its axis): one copy back on stream s and one wait per call;
   cleared, one more copy, only when one was set. Returns OK, INDEX or LAUNCH. */
static int {n}_field_faults(int count, rosennaStream_t s)
{{
    {t} flags[2 * {samples}];
    if (rosennaGetLastError() != rosennaSuccess
        || rosennaMemcpyFromSymbolAsync(flags, {symbol}, sizeof({t}) * 2 * count, 0, rosennaMemcpyDeviceToHost, s)
               != rosennaSuccess
        || rosennaStreamSynchronize(s) != rosennaSuccess)
        return ROSENNA_STATUS_LAUNCH;
    int faulted = 0;
    for (int i = 0; i < 2 * count; ++i) {{
        faulted |= i % 2 == 0 && flags[i] != 0;
        flags[i] = 0;
    }}
    if (!faulted)
        return ROSENNA_STATUS_OK;
    if (rosennaMemcpyToSymbolAsync({symbol}, flags, sizeof({t}) * 2 * count, 0, rosennaMemcpyHostToDevice, s)
            != rosennaSuccess
        || rosennaStreamSynchronize(s) != rosennaSuccess)
        return ROSENNA_STATUS_LAUNCH;
    return ROSENNA_STATUS_INDEX;
}}
"""


def fault_check(plan, choice):
    """The end of the kernel file's ``<name>_infer_batch`` on the whole-field path for a plan that
    counts faults: the flags of every sample a step ran (:func:`_faults`), read back once."""
    samples = choice.strategy.field.samples
    return f"    return {plan.name}_field_faults(n < {samples} ? n : {samples}, (rosennaStream_t)stream);"


def cluster_buffer(field):
    """The arrays of the clustered kernel's intermediates (``field``: the strategy's
    :class:`rosenna.strategy.Field`): the other forms' (``<name>_wsf<i>``) where its schedule is
    one of theirs, else its own, ``<name>_wsc<i>``, sized for the samples it runs (so its phases
    cannot change the step of the other forms' batch)."""
    if not field.cluster_own_buffers:
        return field_fuse.buffer_symbol
    return lambda p, i: C.symbol(p.name, f"wsc{i}")


def cluster_phases(field, buffer=None):
    """The phases of ``<name>_cluster`` (:func:`field_cluster.phase_lines`) for ``field`` (a
    :class:`rosenna.strategy.Field`): its jammed ones with the tuning's ``cluster_jam``, else its
    cluster schedule's; ``buffer``: their intermediates' arrays (:func:`cluster_buffer`); the tiled
    convs' (:mod:`conv_smem`, the strategy's ``tiles["cluster"]``) as the cluster's blocks looping
    over their sample's tiles."""
    sched = field.cluster
    groups = field.jammed.get("cluster", sched.phases)
    tiles = field.tiles.get("cluster") or {}
    out = [field_cluster.phase_lines(sched, phase_note(k, launch), launch.threads,
                                     launch_body(sched.plan, launch, field_fuse.renderer(sched), depth=2), buffer)
           if k not in tiles else [f"    /* {phase_note(k, launch)} */"] + conv_smem.clustered(sched.plan, k, tiles[k])
           for k, launch in enumerate(groups)]
    if tiles:  # the shared memory of the tiled convs, declared before the first phase
        out[0] = [conv_smem.shared(sched.plan, tiles).rstrip("\n")] + \
            (["    (void)first;", "    (void)step;"] if len(tiles) == len(groups) else []) + out[0]
    return out


def _choice(n, widest, tuning):
    """``<name>_run``'s choice of form: the blocks the persistent kernel needs, and the launched
    phases past the tuning's ``field_persistent_waves`` times the resident blocks."""
    t, waves = tuning.field_persistent_threads, tuning.field_persistent_waves
    if waves == 1:
        return (f"    const long needed = (count * {widest}l + {t - 1}) / {t};\n"
                f"    if (needed > resident)\n        return {n}_phases(count, x, y, s);")
    return (f"    long needed = (count * {widest}l + {t - 1}) / {t};\n"
            f"    if (resident < 0 || needed > {waves}l * resident)\n        return {n}_phases(count, x, y, s);\n"
            f"    if (needed > resident)  /* each thread strides over up to {waves} elements of a phase */\n"
            f"        needed = resident;")


def phase_note(k, launch):
    notes = "; ".join(launch.notes) or f"phase {k}"
    return f"phase {k}: {notes} ({count(len(launch.members), 'region')}, {count(launch.threads, 'thread')} per sample)"


def _launched(sched, groups, samples, convs, tiles):
    """The kernel of each (jammed) phase and ``<name>_phases``, which launches them in order (the
    phases in ``convs`` as implicit GEMMs where the call allows, :mod:`conv_igemm`; those in
    ``tiles`` otherwise in shared-memory tiles, :mod:`conv_smem`)."""
    n, t, threads = sched.plan.name, sched.plan.ctype, sched.plan.tuned.field_threads
    kernels, calls = [], []
    for k, launch in enumerate(groups):
        total = launch.threads
        code = batch_body(sched, launch)
        unused = [f"    (void){p};" for p in ("x", "y") if not any(f"{p}s = " in line for line in code)]
        if k not in tiles:  # (a tiled phase's direct kernel would never run)
            kernels.append("\n".join(
                [f"/* {phase_note(k, launch)} */",
                 f"__global__ void __launch_bounds__({threads}) {n}_phase{k}(const {t} *ROSENNA_RESTRICT x, "
                 f"{t} *ROSENNA_RESTRICT y, int count)",
                 "{",
                 f"    const long g = (long)blockIdx.x * {threads} + threadIdx.x;",
                 f"    if (g >= (long)count * {total}l)",
                 "        return;"] + code + unused + ["}"]))
        direct = (conv_smem.launch(sched.plan, k, tiles[k]) if k in tiles else
                  f"    {n}_phase{k}<<<(unsigned)((count * {total}l + {threads - 1}) / {threads}), "
                  f"{min(total * samples, threads)}, 0, s>>>(x, y, count);")
        igemm = k in convs and (sched.plan.tuned.smem_igemm_first or k not in tiles)
        calls.append((conv_igemm.launch(sched.plan, k, convs[k]) if igemm else "") + direct)
    return ("/* The phases as separate launches, each convolution unrolled-and-jammed over output channels. */\n"
            + "\n\n".join(kernels) + "\n\n"
            f"/* {count(len(groups), 'launch', 'launches')} in stream order (stream order is the barrier). */\n"
            f"static int {n}_phases(int count, const {t} *x, {t} *y, rosennaStream_t s)\n{{\n"
            + "\n".join(calls) +
            "\n    return rosennaGetLastError() == rosennaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;\n}")


def _persistent(sched, groups, tiles):
    """``<name>_field``: every phase a grid-stride loop (a block-stride loop over its tiles where
    ``tiles`` computes it, :mod:`conv_smem`), a grid-wide barrier between them."""
    n, t, threads = sched.plan.name, sched.plan.ctype, sched.plan.tuned.field_persistent_threads
    phases = []
    for k, launch in enumerate(groups):
        lines = ([f"    grid.sync();  /* phase {k - 1}'s stores are visible to every thread */"] if k else [])
        lines.append(f"    /* {phase_note(k, launch)} */")
        if k in tiles:
            assert tiles[k].tiling.used <= threads
            lines += conv_smem.persistent(sched.plan, k, tiles[k], threads)
            phases.append("\n".join(lines))
            continue
        lines.append(f"    for (long g = first; g < count * {launch.threads}l; g += step) {{")
        lines += batch_body(sched, launch, depth=2)
        lines.append("    }")
        phases.append("\n".join(lines))
    code = "\n".join(phases)
    unused = "".join(f"    (void){p};\n" for p in ("x", "y") if f"{p}s = " not in code)
    unused += "    (void)first;\n    (void)step;\n" if len(tiles) == len(groups) else ""  # every phase tiled
    return f"""/* The phases in one cooperative kernel: {count(len(groups), 'phase')}, each a grid-stride loop over count x its
   threads per sample, a grid-wide barrier between consecutive phases. */
__global__ void __launch_bounds__({threads}) {n}_field(const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y, int count)
{{
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    const long first = (long)blockIdx.x * {threads} + threadIdx.x, step = (long)gridDim.x * {threads};
{conv_smem.shared(sched.plan, tiles)}{unused}{code}
}}"""


class WholeField(Kind):
    label = "whole-field"
    plan_weights = True

    def launch(self, plan, choice):
        n, samples = plan.name, choice.strategy.field.samples  # as infer_one's buffers
        return "", (f"    for (int start = 0; start < n; start += {samples}) {{  /* {samples} samples per {n}_run */\n"
                    f"        const int status = {n}_run(n - start < {samples} ? n - start : {samples}, "
                    f"x + (long)start * {plan.nx}, y + (long)start * {plan.ny}, (rosennaStream_t)stream);\n"
                    f"        if (status != ROSENNA_STATUS_OK)\n            return status;\n    }}")


KIND = WholeField()
