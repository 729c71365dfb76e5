"""The whole-field kernels of ``<name>_kernel.cu``: ``<name>_infer_one`` as kernel launches.

The regions of a whole-field plan and which of them may share a launch come from the loop
analysis (:func:`rosenna.parallel.launch_groups`); here they become CUDA/HIP kernels, a thread
per element of each region's collapsed loops. For a plan whose per-point locals are too large
for a thread (``plan.path == "whole"``) the batched entry point is ``<name>_infer_one`` per sample
(:data:`KIND`).
"""

from rosenna.emit.cuda.base import Kind
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, buffer_ident, count, resolver, used_scalars
from rosenna.emit.whole import batch_buffer, batch_samples, sample_pointers, sample_resolver
from rosenna.parallel import launch_groups

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
    launch per group of regions that may run concurrently (:func:`launch_groups`; in practice one
    per op) for up to :func:`batch_samples` samples at once, a thread per element of each member
    region's collapsed loops and sample (a serial region is one thread per sample), the
    intermediates of those samples in static ``__device__`` buffers. ``<name>_infer_one`` is that
    for one sample; ``<name>_infer_batch`` (:class:`WholeField`) for n. Returns "" when the plan has
    no ``<name>_infer_one``.

    The kernels read the weights under the C file's names (``<name>_w...``), which the kernel file
    declares in ``__constant__`` or ``__device__`` storage.
    """
    if not plan.emits_infer_one:
        return ""
    n, t = plan.name, plan.ctype
    samples = batch_samples(plan)
    buffers = "\n".join(f"static __device__ {t} {buffer_symbol(plan, i)}[{samples} * {size}];"
                         for i, size in enumerate(plan.scratch))
    kernels, launches = [], []
    for k, launch in enumerate(launch_groups(plan)):
        total = launch.threads
        notes = "; ".join(launch.notes) or f"launch {k}"
        lines = [f"/* {notes} ({count(len(launch.members), 'region')}, {count(total, 'thread')} per sample) */",
                 (f"__global__ void __launch_bounds__({CUDA_THREADS}) {n}_launch{k}(const {t} *ROSENNA_RESTRICT x, "
                  f"{t} *ROSENNA_RESTRICT y, int count)"),
                 "{",
                 f"    const long g = (long)blockIdx.x * {CUDA_THREADS} + threadIdx.x;",
                 f"    if (g >= (long)count * {total}l)",
                 "        return;"]
        code = batch_body(plan, launch)
        unused = [f"    (void){p};" for p in ("x", "y") if not any(f"{p}s = " in line for line in code)]
        lines += code + unused + ["}"]
        kernels.append("\n".join(lines))
        launches.append(f"    {n}_launch{k}<<<(unsigned)((count * {total}l + {CUDA_THREADS - 1}) / {CUDA_THREADS}), "
                        f"{min(total * samples, CUDA_THREADS)}, 0, s>>>(x, y, count);")
    ready = "    if (!ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    return f"""
/* The whole-field path: count samples (at most {samples}) at once, one launch per group of regions
   that may run concurrently (in practice one per op), each region of a launch on its own range of
   every sample's threads. The intermediates of {samples} samples: */
{buffers}

{chr(10).join(kernels)}

/* count <= {samples} samples x[count][{plan.nx}] -> y[count][{plan.ny}], device pointers, on stream s. */
static int {n}_run(int count, const {t} *x, {t} *y, rosennaStream_t s)
{{
{chr(10).join(launches)}
    return rosennaGetLastError() == rosennaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
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
