"""``<name>_kernel.cu``: the parts every kernel file has, around the batched kernel of its kind.

The kernel file owns every CUDA/HIP symbol; ``<name>.c`` is still compiled by the host compiler,
with ``-DROSENNA_NATIVE_KERNEL`` dropping its OpenMP ``<name>_infer_batch`` and making
``<name>_init`` call ``<name>_device_upload``. In order:

- the plan's weights as the per-point routine reads them (embedded: ``ROSENNA_CONST`` arrays,
  ``__constant__`` when they fit in ``constant_limit`` bytes, ``__device__ const`` above;
  file-loaded: ``__device__`` storage filled by ``<name>_device_upload``);
- ``<name>_infer`` as a ``__device__`` function, the per-point body rendered from the same loop
  IR as the C file, for the user's own kernels (``-DROSENNA_DEVICE_ROUTINE``);
- the chosen kind's packed weights, fixed device code, kernel and launch
  (:mod:`rosenna.emit.cuda.kinds`), and a tensor-core kind beside it under its guard;
- ``<name>_infer_batch(n, x, y, stream)``: never allocates, copies or synchronises;
- ``<name>_device_upload`` for file-loaded weights: the host-side packing of every copy.
"""

from rosenna.emit import c as cemit
from rosenna.emit.cuda import conv_igemm, copies, kinds, point, routine, staged, whole_field
from rosenna.emit.cuda.mlp import activation_fn, activation_library, chunks
from rosenna.emit.cuda.runtime import CONSTANT_MEMORY, GLOBAL_MEMORY
from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, resolver
from rosenna.loopir import FAULT, counts_faults
from rosenna.strategy import Tuning, of as strategy_of


def _plan_weights(plan):
    t = plan.ctype
    out = []
    for w in plan.weights:
        if plan.embed:
            values = ",\n    ".join(", ".join(row) for row in chunks(C.weight_literals(w, plan.precision)))
            out.append(f"static ROSENNA_CONST {t} {cemit.symbol(plan, w.ident)}[{w.size}] = {{\n    {values}\n}};")
        else:
            out.append(f"static __device__ {t} {cemit.symbol(plan, w.ident)}[{w.size}];")
    return "\n".join(out)


def kernel_source(strategy, stamp, constant_limit=None):
    """The text of ``<name>_kernel.cu`` for ``strategy`` (a :class:`rosenna.strategy.Strategy`; a
    plan is rendered with the default tuning, ``constant_limit`` replacing that one knob).

    The file is compiled twice (see :func:`rosenna.emit.make.native_rules`): plainly into ``<name>_kernel.o`` (the
    batched kernel and ``<name>_infer_batch``: whole-program code, and no device link needed), and
    with ``-DROSENNA_DEVICE_ROUTINE`` as relocatable device code into ``<name>_device.o`` (the
    ``__device__`` ``<name>_infer`` for the user's kernels). Relocatable code for the batched
    kernel cost registers: ptxas gave gemm_big's kernel 255 of them under -rdc, 111 without.

    Macro on the kernel file's compile line: ``-DROSENNA_NO_TENSOR_CORES`` keeps FP32 kernels
    everywhere (without it CUDA sm_80+ runs the 3xTF32 chain or wide kernel where one fits).
    """
    strategy = strategy_of(strategy, None if constant_limit is None else Tuning().replace(constant_limit=constant_limit))
    plan = strategy.plan
    n, t = plan.name, plan.ctype
    choice = kinds.choose(strategy)
    base, tensor = choice.base, choice.tensor
    renderer = Renderer(C, plan.precision, resolver(plan, C))
    storage = CONSTANT_MEMORY if choice.constant else GLOBAL_MEMORY
    if plan.embed:
        why = (f"{choice.weight_bytes} bytes of weights, {'at or under' if choice.constant else 'over'} the "
               f"{choice.constant_limit}-byte __constant__ limit")
        const_note = f"ROSENNA_CONST is {storage} here: {why}."
    else:
        const_note = f"File-loaded: the weights live in __device__ storage that {plan.name}_init fills."
    note = base.note + (tensor.note if tensor else "")
    body = "\n".join(cemit.point_body(plan, renderer))
    faults = counts_faults(plan.body)  # <name>_point returns them to the batched kernel (point.fault_check)
    returns = f"    return {FAULT} > 0;\n" if faults else ""
    # The plan's own weight layout serves the per-point routine (unless it is the MLP routine,
    # which reads its own copies), the kinds that read it and infer_one; the per-point function
    # serves the same routine and the kinds that call it. Each is emitted only where it is read.
    routine_reads = choice.routine != "routine-mlp"
    weights_where = _where(_plan_weights_needed(plan, base), routine_reads)
    point_where = _where(base.point_fn, routine_reads)

    parts = [f"""/* {stamp}
 * {n}_kernel.cu: the native batched kernel ({n}_infer_batch) and, compiled with
 * -DROSENNA_DEVICE_ROUTINE as relocatable device code, the __device__ {n}_infer for the user's own
 * kernels. Built only by `make -f {n}.mk ROSENNA_BACKEND=cuda` (nvcc) or `hip` (hipcc); {n}.c
 * then drops its OpenMP {n}_infer_batch (-DROSENNA_NATIVE_KERNEL).
{cemit.layout_comment(plan)}
 * Batched kernel: {base.label}{note}. {const_note}
 */
#include "rosenna_rt.h"

#undef ROSENNA_CONST
#define ROSENNA_CONST {'ROSENNA_CONSTANT_MEMORY' if choice.constant else 'ROSENNA_GLOBAL_MEMORY'}
"""]
    if activation_library(plan):
        parts.append(f"namespace {{\n{activation_library(plan)}}}  // namespace\n")
    if copies.has_source(plan, choice):
        parts.append(copies.source(plan, choice))
    if plan.weights and weights_where is not None:
        parts.append(weights_where + "/* The weights as the per-point routine reads them (the C file's layout). */")
        parts.append(_plan_weights(plan))
        if weights_where:
            parts.append("#endif")
    if point_where is not None:
        parts.append(point_where + f"/* One point: the same loops as {n}.c's {n}_infer. */\n"
                     f"static __device__ {'int' if faults else 'void'} {n}_point(const {t} *ROSENNA_RESTRICT x, "
                     f"{t} *ROSENNA_RESTRICT y)\n"
                     f"{{\n{body}\n{returns}}}\n" + ("#endif\n" if point_where else ""))
    # The batched kernel's copies that the per-point routines read as they are: once, for both compiles.
    shared = routine.shared(choice)
    if "packed" in shared:
        parts.append(_packed(plan, choice, "The batched kernel's copy (and the per-point routine's)"))
    if "tc" in shared:
        parts.append(tensor.arrays(plan, choice))
    parts.append(f"""#if defined(ROSENNA_DEVICE_ROUTINE)
{routine.routine(plan, choice, renderer)}
{_routine_upload(plan, choice) if not plan.embed else ''}#else /* the batched kernel */
""")
    if choice.layout and "packed" not in shared:
        parts.append(_packed(plan, choice, "The batched kernel's copy"))
    if tensor and "tc" not in shared:
        parts.append(tensor.arrays(plan, choice))
    if not plan.embed:
        parts.append("static int ready;")
    acts = []
    if choice.layout or (tensor and choice.layers):
        # Read by the tensor-core kernel alone (beside the per-point kernel): under its guard.
        alone = not choice.layout
        if alone:
            parts.append(tensor.guard)
        parts.append("\nnamespace {")
        own = tensor.own_activations(plan, choice) if tensor else [False] * len(choice.layers)
        for li, layer in enumerate(choice.layers):
            name = f"act{li}"
            if choice.layout or not own[li]:
                parts.append(activation_fn(name, layer, renderer))
            acts.append(name)
        if choice.layout:
            parts.append(base.library(choice))
        parts.append("}  // namespace\n")
        if alone:
            parts.append("#endif")
    parts.append(whole_field.infer_one(strategy))
    setup, launch = base.launch(plan, choice)
    parts.append(base.kernel(plan, choice, acts))
    if tensor:
        parts.append(tensor.kernel(plan, choice, acts))
        setup = tensor.launch(plan, choice) + setup
    ready_check = "    if (!ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    parts.append(f"""
/* n points on the caller's stream: x[n][{plan.nx}] and y[n][{plan.ny}] are device pointers. {_batch_moves(faults)} */
extern "C" int {n}_infer_batch(int n, const {t} *x, {t} *y, void *stream)
{{
{ready_check}    if (n <= 0)
        return ROSENNA_STATUS_OK;
{setup}{launch}
{_fault_check(plan, choice, base) if faults else "    return rosennaGetLastError() == rosennaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;"}
}}
""")
    if not plan.embed:
        parts.append(_upload(plan, choice))
    parts.append("#endif /* ROSENNA_DEVICE_ROUTINE */\n")
    if any("rosenna_floats<" in part for part in parts):  # the MLP copies' struct, before the first
        parts.insert(1 + bool(activation_library(plan)), copies.library())
    return "\n".join(parts)


def _fault_check(plan, choice, base):
    """The end of ``<name>_infer_batch`` for a plan that counts faults: the whole-field path's flags
    (:func:`whole_field.fault_check`) or the per-point kernel's (:func:`point.fault_check`)."""
    return whole_field.fault_check(plan, choice) if base is whole_field.KIND else point.fault_check(plan)


def _batch_moves(faults):
    """What the kernel file's ``<name>_infer_batch`` copies and waits for."""
    if faults:
        return ("Never\n   allocates; brings back one int (whether any point had an index outside its axis) and waits "
                "for\n   it; clears it (one more int) only when it was set.")
    return "Never\n   allocates, copies or synchronises."


def _packed(plan, choice, what):
    """``<name>_packed``, the batched kernel's copy of the weights: a copy of ``<name>_model::packed``
    where the file has it (rosenna/emit/cuda/copies.py)."""
    # The staged kernel's cp.async reads global memory: never the constant bank.
    storage_class = "__device__ const" if choice.base is staged.KIND else "ROSENNA_CONST"
    if copies.has_source(plan, choice):
        decl = copies.packed_copy(storage_class, plan, choice)
    else:
        decl = copies.copy(plan, choice, storage_class, f"{plan.name}_packed", choice.layout)
    return f"/* {what}: per layer W input-major [K][NP], then the bias [NP]. */\n" + decl


def _copies(plan):
    t = plan.ctype
    return "\n".join(f"    if (rosennaMemcpyToSymbol({cemit.symbol(plan, w.ident)}, host[{i}], sizeof({t}) * {w.size}, 0, "
                     f"rosennaMemcpyHostToDevice) != rosennaSuccess)\n        return ROSENNA_STATUS_DEVICE;"
                     for i, w in enumerate(plan.weights))


def _where(batched, routine_reads):
    """The guard a part of the kernel file goes under: "" (both compiles read it), the routine's or
    the batched kernel's ``#if`` alone, or None (neither reads it: not emitted)."""
    if batched and routine_reads:
        return ""
    if routine_reads:
        return "#if defined(ROSENNA_DEVICE_ROUTINE)\n"
    return "#if !defined(ROSENNA_DEVICE_ROUTINE)\n" if batched else None


def _routine_upload(plan, choice):
    n, t = plan.name, plan.ctype
    helpers, packing = routine.upload(plan, choice)
    return f"""{helpers}
/* Called by {n}_device_upload when this object is linked: fills the per-point routines' copies. */
extern "C" int {n}_routine_upload(const {t} *const *host)
{{
{_copies(plan) if choice.routine != "routine-mlp" else ""}
{packing}
    return ROSENNA_STATUS_OK;
}}
"""


def _plan_weights_needed(plan, base):
    """Whether the batched kernel file needs the plan's own weight arrays outside
    ``-DROSENNA_DEVICE_ROUTINE``: for a kind that reads them, or for ``<name>_infer_one``."""
    return base.plan_weights or plan.emits_infer_one


def _upload(plan, choice):
    n, t = plan.name, plan.ctype
    copies = _copies(plan) if _plan_weights_needed(plan, choice.base) else ""
    pack = ""
    if choice.layout:
        pack = (f"    float *packed = (float *)calloc({choice.packed_size}, sizeof(float));\n"
                f"    if (packed == NULL)\n        return ROSENNA_STATUS_DEVICE;\n"
                + choice.layout.host_packing() + "\n"
                f"    const int failed = rosennaMemcpyToSymbol({n}_packed, packed, sizeof(float) * {choice.packed_size}, 0, "
                f"rosennaMemcpyHostToDevice) != rosennaSuccess;\n"
                f"    free(packed);\n"
                f"    if (failed)\n        return ROSENNA_STATUS_DEVICE;\n")
    tc_pack, tc_helper = "", ""
    if choice.tensor:
        tc_pack = choice.tensor.upload(plan, choice)
        tc_helper = choice.tensor.upload_helper(tc_pack)
    igemm_helper, igemm_pack = conv_igemm.upload(plan, choice.strategy.field, helper=not choice.tensor)
    return f"""#include <stdlib.h>
{tc_helper}{igemm_helper}
/* In <name>_device.o (lib{n}_device.a) when the program links it: a weak reference, so that a
   program that only calls {n}_infer_batch needs no device link. */
extern "C" int {n}_routine_upload(const {t} *const *host) __attribute__((weak));

/* Called by {n}_init (in {n}.c, built with -DROSENNA_NATIVE_KERNEL) once the weights file is read:
   host[i] is the i-th weight in the file's order. Copies them to the device, synchronously,
   outside any time-step loop. */
extern "C" int {n}_device_upload(const {t} *const *host)
{{
    ready = 0;
{copies}
{pack}{tc_pack}{igemm_pack}    if ({n}_routine_upload != NULL && {n}_routine_upload(host) != ROSENNA_STATUS_OK)
        return ROSENNA_STATUS_DEVICE;
    ready = 1;
    return ROSENNA_STATUS_OK;
}}
{reload_upload(plan)}"""


def reload_upload(plan):
    """``<name>_device_reload`` (``<name>_reload`` / ``_set_weights``): the device's queued work
    (every stream) ends before the weights are copied over in place, so no batch reads them half
    copied; no device memory is allocated."""
    n, t = plan.name, plan.ctype
    return f"""
extern "C" int {n}_device_reload(const {t} *const *host)
{{
    if (rosennaDeviceSynchronize() != rosennaSuccess)
        return ROSENNA_STATUS_DEVICE;
    return {n}_device_upload(host);
}}
"""


def kernel_filename(plan):
    return f"{plan.name}_kernel.cu"


