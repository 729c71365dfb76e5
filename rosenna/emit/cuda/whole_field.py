"""The whole-field kernels of ``<name>_kernel.cu``: ``<name>_infer_one`` as kernel launches.

The regions of a whole-field plan and which of them may share a launch come from the loop
analysis (:func:`rosenna.parallel.launch_groups`); here they become CUDA/HIP kernels, a thread
per element of each region's collapsed loops. For a plan whose per-point locals are too large
for a thread (``plan.path == "whole"``) the batched entry point is ``<name>_infer_one`` per sample
(:data:`KIND`).
"""

from rosenna.emit.cuda.base import Kind
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, buffer_ident, resolver, used_scalars
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
        what = f"{shape} threads" if m.kind == "parallel" else "serial, one thread"
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


def infer_one(plan):
    """``<name>_infer_one`` for ``<name>_kernel.cu``: one kernel launch per group of regions that
    may run concurrently (:func:`launch_groups`; in practice one per op), a thread per element of
    each member region's collapsed loops (a serial region is one thread), the intermediates in
    static ``__device__`` buffers. Returns "" when the plan has no ``<name>_infer_one``.

    The kernels read the weights under the C file's names (``<name>_w...``), which the kernel file
    declares in ``__constant__`` or ``__device__`` storage.
    """
    if not plan.has_infer_one:
        return ""
    n, t = plan.name, plan.ctype
    renderer = Renderer(C, plan.precision, resolver(plan, C, whole_field=True))
    buffers = "\n".join(f"static __device__ {t} {C.symbol(n, buffer_ident(i))}[{size}];"
                         for i, size in enumerate(plan.scratch))
    kernels, launches = [], []
    for k, launch in enumerate(launch_groups(plan)):
        total = launch.threads
        notes = "; ".join(launch.notes) or f"launch {k}"
        regions_note = "1 region" if len(launch.members) == 1 else f"{len(launch.members)} regions"
        lines = [f"/* {notes} ({regions_note}, {total} threads) */",
                 (f"__global__ void __launch_bounds__({CUDA_THREADS}) {n}_launch{k}(const {t} *ROSENNA_RESTRICT x, "
                  f"{t} *ROSENNA_RESTRICT y)"),
                 "{",
                 f"    const long tid = (long)blockIdx.x * {CUDA_THREADS} + threadIdx.x;"]
        code = launch_body(plan, launch, renderer)
        unused = [f"    (void){p};" for p in ("x", "y") if not any(f"{p}[" in line for line in code)]
        lines += code + unused + ["}"]
        kernels.append("\n".join(lines))
        blocks = (total + CUDA_THREADS - 1) // CUDA_THREADS
        threads = min(total, CUDA_THREADS)
        launches.append(f"    {n}_launch{k}<<<{blocks}, {threads}, 0, s>>>(x, y);")
    ready = "    if (!ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    return f"""
/* {n}_infer_one: one sample over the whole field, one launch per group of regions that may run
   concurrently (in practice one per op); each region of a launch on its own range of threads. */
{buffers}

{chr(10).join(kernels)}

/* x[{plan.nx}] and y[{plan.ny}] are device pointers; launches on the caller's stream, never
   synchronises. The buffers are shared by every call: calls on different streams must not overlap. */
extern "C" int {n}_infer_one(const {t} *x, {t} *y, void *stream)
{{
    rosennaStream_t s = (rosennaStream_t)stream;
{ready}{chr(10).join(launches)}
    return rosennaGetLastError() == rosennaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
}}
"""


class WholeField(Kind):
    label = "whole-field"
    plan_weights = True

    def fits(self, choice):
        return choice.plan.path == "whole"

    def launch(self, plan, choice):
        n = plan.name
        return "", (f"    for (int i = 0; i < n; ++i) {{\n"
                    f"        const int status = {n}_infer_one(x + (long)i * {plan.nx}, y + (long)i * {plan.ny}, stream);\n"
                    f"        if (status != ROSENNA_STATUS_OK)\n            return status;\n    }}")


KIND = WholeField()
