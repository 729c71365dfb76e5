"""The generic batched kernel: one thread per point calling ``<name>_point`` (any plan)."""

from rosenna.emit.cuda.base import Kind
from rosenna.loopir import counts_faults

#: The device int the batched kernel sets when a point had an index outside its axis
#: (``<name>_index_faults``); ``<name>_infer_batch`` reads it back (:func:`fault_check`).
FAULT_FLAG = "index_faults"
FAULT_FLAG_DOC = ("/* Set to 1 by every thread whose point had an index outside its axis (the same value from any\n"
                  "   number of threads: no atomics, no effect on the outputs); read back and cleared by the batch. */")


def fault_check(plan):
    """The end of ``<name>_infer_batch`` for a plan that counts faults: one int brought back on the
    caller's stream and waited for (the only transfer and the only wait of the call); cleared, one
    more int, only when it was set. Returns the status."""
    n = plan.name
    return (f"    int faults = 0;\n"
            f"    if (rosennaGetLastError() != rosennaSuccess\n"
            f"        || rosennaMemcpyFromSymbolAsync(&faults, {n}_{FAULT_FLAG}, sizeof faults, 0, rosennaMemcpyDeviceToHost,\n"
            f"                                        (rosennaStream_t)stream) != rosennaSuccess\n"
            f"        || rosennaStreamSynchronize((rosennaStream_t)stream) != rosennaSuccess)\n"
            f"        return ROSENNA_STATUS_LAUNCH;\n"
            f"    if (!faults)\n        return ROSENNA_STATUS_OK;\n"
            f"    const int cleared = 0;\n"
            f"    if (rosennaMemcpyToSymbolAsync({n}_{FAULT_FLAG}, &cleared, sizeof cleared, 0, rosennaMemcpyHostToDevice,\n"
            f"                                   (rosennaStream_t)stream) != rosennaSuccess\n"
            f"        || rosennaStreamSynchronize((rosennaStream_t)stream) != rosennaSuccess)\n"
            f"        return ROSENNA_STATUS_LAUNCH;\n"
            f"    return ROSENNA_STATUS_INDEX;")

# Threads per block of the one-point-per-thread kernels: the tuning's point_threads.


class Point(Kind):
    label = "point"
    plan_weights = True
    point_fn = True

    def kernel(self, plan, choice, acts):
        n, t, threads = plan.name, plan.ctype, plan.tuned.point_threads
        if counts_faults(plan.body):  # <name>_point returns whether the point had an index outside its axis
            return (f"{FAULT_FLAG_DOC}\nstatic __device__ int {n}_{FAULT_FLAG};\n\n"
                    f"__global__ void __launch_bounds__({threads}) {n}_batch_kernel(int n, const {t} *ROSENNA_RESTRICT x, "
                    f"{t} *ROSENNA_RESTRICT y)\n"
                    "{\n"
                    f"    const long i = (long)blockIdx.x * {threads} + threadIdx.x;\n"
                    f"    if (i < n && {n}_point(x + i * {plan.nx}, y + i * {plan.ny}))\n"
                    f"        {n}_{FAULT_FLAG} = 1;\n"
                    "}")
        return (f"__global__ void __launch_bounds__({threads}) {n}_batch_kernel(int n, const {t} *ROSENNA_RESTRICT x, "
                f"{t} *ROSENNA_RESTRICT y)\n"
                "{\n"
                f"    const long i = (long)blockIdx.x * {threads} + threadIdx.x;\n"
                "    if (i < n)\n"
                f"        {n}_point(x + i * {plan.nx}, y + i * {plan.ny});\n"
                "}")

    def launch(self, plan, choice):
        threads = plan.tuned.point_threads
        return "", (f"    {plan.name}_batch_kernel<<<(unsigned)((n + {threads - 1}) / {threads}), "
                    f"{threads}, 0, (rosennaStream_t)stream>>>(n, x, y);")


KIND = Point()
