"""The whole-field kernel of ``<name>_kernel.cu``: ``<name>_infer_one`` as one persistent launch.

The regions of a whole-field plan and which of them may share a launch come from the loop
analysis (:func:`rosenna.parallel.launch_groups`); here they become the phases of one CUDA/HIP
kernel, a thread per element of each region's collapsed loops, grid-wide barriers between them. For a plan whose per-point locals are too large
for a thread (``plan.path == "whole"``) the batched entry point is ``<name>_infer_one`` per sample
(:data:`KIND`).
"""

from rosenna.emit.cuda.base import Kind
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, buffer_ident, count, resolver, used_scalars
from rosenna.emit.whole import batch_buffer, batch_samples, sample_pointers, sample_resolver
from rosenna.emit.host_field import jam
from rosenna.parallel import Launch, Member, launch_groups

#: Threads per block of the whole-field kernels.
CUDA_THREADS = 256


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
        scalars = used_scalars(m.body)
        if scalars:
            lines.append(inner + f"{t} {', '.join(scalars)};")
        lines += renderer.lines(m.body, depth + 1)
        start = end
    lines.append(pad + "}")
    return lines


def launches(plan):
    """The phases of ``<name>_field``: :func:`launch_groups`, each parallel member region
    unrolled-and-jammed (:func:`rosenna.emit.host_field.jam`, the host path's transformation): a
    thread computes up to 8 output channels of a conv from one pass over its inputs (every input
    loaded once feeds 8 FMAs; the weights are uniform across a warp), or, where the channels index
    the inputs (depthwise, one output channel), a few neighbouring rows. Each sum keeps its terms
    and their order, so the results do not change by a bit; a loop that does not divide leaves a
    remainder region of its own."""
    out = []
    for launch in launch_groups(plan):
        members = []
        for m in launch.members:
            pieces = jam(plan, m.chain, m.body) if m.kind == "parallel" else [(m.chain, m.body)]
            for k, (chain, body) in enumerate(pieces):
                members.append(Member(m.kind, chain, body, m.notes if k == 0 else [], m.op, m.reads, m.writes))
        out.append(Launch(members))
    return out


def buffer_symbol(plan, i):
    """The kernel file's buffer for intermediate i (:func:`rosenna.emit.whole.batch_buffer`)."""
    return batch_buffer(plan, i)


def batch_body(plan, launch, depth=1):
    """The statements of one launch's kernel after its global thread index ``g`` is known (and
    below ``count`` times the launch's threads): the sample ``s`` and the thread index within it,
    that sample's pointers into x, y and the intermediates, then :func:`launch_body` over them.
    Plain C over the C file's weight names and the :func:`buffer_symbol` buffers, so a host harness
    runs it too (tests/test_infer_one.py does)."""
    pad, total = "    " * depth, launch.threads
    body = launch_body(plan, launch, Renderer(C, plan.precision, sample_resolver(plan)), depth)
    lines = [pad + f"const long s = g / {total}l, tid = g - s * {total}l;"]
    lines += [pad + decl for decl in sample_pointers(plan, "\n".join(body))]
    return lines + body


def infer_one(plan):
    """``<name>_infer_one`` and the batched whole-field path for ``<name>_kernel.cu``: one kernel
    launch per call. The groups of regions that may run concurrently (:func:`launch_groups`; in
    practice one per op) become the phases of one persistent kernel, each phase a grid-stride loop
    over every element of its member regions' collapsed loops for up to :func:`batch_samples`
    samples (a serial region is one thread per sample), the phases separated by a grid-wide
    barrier. The kernel is launched cooperatively (the runtime checks that every block is resident,
    so the barrier cannot hang) with as many blocks as the GPU holds at once, or fewer when no phase
    has work for more. At one sample that is one launch and ``phases - 1`` barriers instead of one
    launch per op; over many samples the grid-stride loops keep every SM busy as separate launches
    did. The intermediates of those samples live in static ``__device__`` buffers.
    ``<name>_infer_one`` is that for one sample; ``<name>_infer_batch`` (:class:`WholeField`) for n.
    Returns "" when the plan has no ``<name>_infer_one``.

    The kernels read the weights under the C file's names (``<name>_w...``), which the kernel file
    declares in ``__constant__`` or ``__device__`` storage.
    """
    if not plan.emits_infer_one:
        return ""
    n, t = plan.name, plan.ctype
    samples = batch_samples(plan)
    buffers = "\n".join(f"static __device__ {t} {buffer_symbol(plan, i)}[{samples} * {size}];"
                         for i, size in enumerate(plan.scratch))
    groups = launches(plan)
    phases, widest = [], max(launch.threads for launch in groups)
    for k, launch in enumerate(groups):
        notes = "; ".join(launch.notes) or f"phase {k}"
        lines = ([f"    grid.sync();  /* phase {k - 1}'s stores are visible to every thread */"] if k else [])
        lines += [f"    /* phase {k}: {notes} ({count(len(launch.members), 'region')}, "
                  f"{count(launch.threads, 'thread')} per sample) */",
                  f"    for (long g = first; g < count * {launch.threads}l; g += step) {{"]
        lines += batch_body(plan, launch, depth=2)
        lines.append("    }")
        phases.append("\n".join(lines))
    code = "\n".join(phases)
    unused = "".join(f"    (void){p};\n" for p in ("x", "y") if f"{p}s = " not in code)
    ready = "    if (!ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    return f"""
#if defined(__HIPCC__)
#include <hip/hip_cooperative_groups.h>
#else
#include <cooperative_groups.h>
#endif

/* The whole-field path: count samples (at most {samples}) at once in one launch of {n}_field, whose
   phases are the groups of regions that may run concurrently (in practice one per op), each region
   of a phase on its own range of every sample's threads. The intermediates of {samples} samples: */
{buffers}

/* {count(len(groups), 'phase')}, each a grid-stride loop over count x its threads per sample, a grid-wide barrier
   between consecutive phases; launched cooperatively ({n}_run). */
__global__ void __launch_bounds__({CUDA_THREADS}) {n}_field(const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y, int count)
{{
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    const long first = (long)blockIdx.x * {CUDA_THREADS} + threadIdx.x, step = (long)gridDim.x * {CUDA_THREADS};
{unused}{code}
}}

/* Blocks of {n}_field resident at once on each device (0: not yet asked), asked once per device. */
static int {n}_resident[64];

/* count <= {samples} samples x[count][{plan.nx}] -> y[count][{plan.ny}], device pointers, on stream s: one
   cooperative launch of as many blocks as are resident at once, fewer when the widest phase
   ({count(widest, 'thread')} per sample) needs fewer. */
static int {n}_run(int count, const {t} *x, {t} *y, rosennaStream_t s)
{{
    int device = 0;
    if (rosennaGetDevice(&device) != rosennaSuccess)
        return ROSENNA_STATUS_LAUNCH;
    int resident = device < 64 ? __atomic_load_n(&{n}_resident[device], __ATOMIC_RELAXED) : 0;
    if (resident == 0) {{
        int sms = 0, per_sm = 0;
        if (rosennaDeviceGetAttribute(&sms, rosennaDevAttrMultiProcessorCount, device) != rosennaSuccess ||
            rosennaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {n}_field, {CUDA_THREADS}, 0) != rosennaSuccess ||
            sms * per_sm == 0)
            return ROSENNA_STATUS_LAUNCH;
        resident = sms * per_sm;
        if (device < 64)
            __atomic_store_n(&{n}_resident[device], resident, __ATOMIC_RELAXED);
    }}
    const long needed = (count * {widest}l + {CUDA_THREADS - 1}) / {CUDA_THREADS};
    const unsigned blocks = (unsigned)(needed < resident ? needed : resident);
    void *args[] = {{(void *)&x, (void *)&y, (void *)&count}};
    if (rosennaLaunchCooperativeKernel((const void *){n}_field, dim3(blocks), dim3({CUDA_THREADS}), args, 0, s) != rosennaSuccess)
        return ROSENNA_STATUS_LAUNCH;
    return ROSENNA_STATUS_OK;
}}

/* x[{plan.nx}] and y[{plan.ny}] are device pointers; launches on the caller's stream, never
   synchronises. The buffers are shared by every call: calls on different streams must not overlap. */
extern "C" int {n}_infer_one(const {t} *x, {t} *y, void *stream)
{{
{ready}    return {n}_run(1, x, y, (rosennaStream_t)stream);
}}
"""


class WholeField(Kind):
    label = "whole-field"
    plan_weights = True

    def fits(self, choice):
        return choice.plan.path == "whole"

    def launch(self, plan, choice):
        n, samples = plan.name, batch_samples(plan)
        return "", (f"    for (int start = 0; start < n; start += {samples}) {{  /* one launch per op for {samples} samples */\n"
                    f"        const int status = {n}_run(n - start < {samples} ? n - start : {samples}, "
                    f"x + (long)start * {plan.nx}, y + (long)start * {plan.ny}, (rosennaStream_t)stream);\n"
                    f"        if (status != ROSENNA_STATUS_OK)\n            return status;\n    }}")


KIND = WholeField()
