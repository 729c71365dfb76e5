"""The generic batched kernel: one thread per point calling ``<name>_point`` (any plan)."""

from rosenna.emit.cuda.base import Kind

# Threads per block of the one-point-per-thread kernels: the tuning's point_threads.


class Point(Kind):
    label = "point"
    plan_weights = True
    point_fn = True

    def kernel(self, plan, choice, acts):
        n, t, threads = plan.name, plan.ctype, plan.tuned.point_threads
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
