"""The generic batched kernel: one thread per point calling ``<name>_point`` (any plan)."""

from rosenna.emit.cuda.base import Kind

#: Threads per block of the one-point-per-thread kernels.
POINT_THREADS = 256


class Point(Kind):
    label = "point"
    plan_weights = True
    point_fn = True

    def kernel(self, plan, choice, acts):
        n, t = plan.name, plan.ctype
        return (f"__global__ void __launch_bounds__({POINT_THREADS}) {n}_batch_kernel(int n, const {t} *ROSENNA_RESTRICT x, "
                f"{t} *ROSENNA_RESTRICT y)\n"
                "{\n"
                f"    const long i = (long)blockIdx.x * {POINT_THREADS} + threadIdx.x;\n"
                "    if (i < n)\n"
                f"        {n}_point(x + i * {plan.nx}, y + i * {plan.ny});\n"
                "}")

    def launch(self, plan, choice):
        return "", (f"    {plan.name}_batch_kernel<<<(unsigned)((n + {POINT_THREADS - 1}) / {POINT_THREADS}), "
                    f"{POINT_THREADS}, 0, (rosennaStream_t)stream>>>(n, x, y);")


KIND = Point()
