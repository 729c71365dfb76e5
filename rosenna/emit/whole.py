"""The whole-field path: ``<name>_infer_one(x, y, stream)``, one sample, one parallel loop per op.

The per-point ``<name>_infer`` keeps every intermediate activation in locals; for a conv net over
a 64x64 field that is hundreds of KB per thread, more than a device thread should hold. For such
plans (see ``rosenna.plan.WHOLE_THRESHOLD``) ``<name>_infer_one`` runs one sample at a time with
the intermediates in static device buffers (``omp declare target``), and each op as one
``target teams distribute parallel for`` over its output elements; ``<name>_infer_batch`` then
calls it once per sample. It exists for every plan without an LSTM or GRU (whose time loop is
sequential).

Which loops run in parallel, and as which regions, is decided by :mod:`rosenna.parallel` over
the loop IR; this module renders its regions: each parallel one as a collapsed ``target teams
distribute parallel for``, a serial one as one sequential ``target`` region (correct if slow).
The buffers are shared by every call: calls on different streams (or threads) must not overlap.

C and Fortran render the same statements through the one Renderer; their directives and
declarations differ only through the ``DIRECTIVES`` table below. Fortran also reaches the C
symbol through the bind(C) interface ``<name>_infer_one_dev``.
"""

from rosenna import limits
from rosenna.emit.host_field import HOST_MATH, host_lines, host_names
from rosenna.emit.lang import FORTRAN, C
from rosenna.emit.render import Renderer, buffer_ident, resolver, used_loop_vars, used_scalars
from rosenna.parallel import regions

#: How each language opens and closes the regions, and declares what a region needs; the "_host"
#: forms run the same regions on the host's threads when there is no offload device (libgomp's host
#: fallback of a `target teams` region costs more than the region's work).
DIRECTIVES = {
    "c": {
        "parallel": "#pragma omp target teams distribute parallel for{collapse} is_device_ptr(x, y)",
        "parallel_end": None,
        "serial": "#pragma omp target is_device_ptr(x, y)",
        "serial_open": "{",
        "serial_close": "}",
        "collapse": " collapse({n})",
        "private": None,
        "scalar": "{t} {names};",
    },
    "c_acc": {
        "parallel": "#pragma acc parallel loop gang vector{collapse} deviceptr(x, y)",
        "parallel_end": None,
        "serial": "#pragma acc serial deviceptr(x, y)",
        "serial_open": "{",
        "serial_close": "}",
        "collapse": " collapse({n})",
        "private": None,
        "scalar": "{t} {names};",
    },
    "fortran": {
        "parallel": "!$omp target teams distribute parallel do{collapse}{private}",
        "parallel_end": "!$omp end target teams distribute parallel do",
        "serial": "!$omp target{private}",
        "serial_open": None,
        "serial_close": "!$omp end target",
        "collapse": " collapse({n})",
        "private": " private({names})",
        "scalar": None,
    },
    "c_host": {
        "parallel": "#pragma omp parallel for simd{collapse}",
        "parallel_end": None,
        "serial": None,
        "serial_open": "{",
        "serial_close": "}",
        "collapse": " collapse({n})",
        "private": None,
        "scalar": "{t} {names};",
    },
    "fortran_host": {
        "parallel": "!$omp parallel do{collapse}{private}",
        "parallel_end": "!$omp end parallel do",
        "serial": None,
        "serial_open": None,
        "serial_close": None,
        "collapse": " collapse({n})",
        "private": " private({names})",
        "scalar": None,
    },
}


def available(plan):
    """Whether the files get ``<name>_infer_one``: see :attr:`rosenna.plan.Plan.emits_infer_one`."""
    return plan.emits_infer_one


def _region_lines(plan, lang, renderer, depth, host=False, acc=False):
    """The body of ``<name>_infer_one`` (after declarations), as lines: offloaded regions (OpenACC
    compute regions with ``acc``), or with ``host`` the same regions on the host's threads."""
    table = DIRECTIVES[lang.name + ("_host" if host else "_acc" if acc else "")]
    pad = lang.indent * depth
    t = plan.ctype
    lines = []
    for kind, chain, body in regions(plan.body):
        if kind == "comment":
            lines.append(pad + lang.comment.format(text=body[0].text))
            continue
        scalars = used_scalars(body)
        inner_vars = used_loop_vars(body)
        private = ", ".join(scalars + inner_vars)
        priv = table["private"].format(names=private) if table["private"] and private else ""
        if kind == "parallel":
            collapse = table["collapse"].format(n=len(chain)) if len(chain) > 1 else ""
            lines.append(pad + table["parallel"].format(collapse=collapse, private=priv)
                         if table["parallel"].startswith("!") else table["parallel"].format(collapse=collapse, private=priv))
            level = depth
            for loop in chain:
                lines.append(lang.indent * level + lang.loop_open.format(var=loop.var, extent=loop.extent,
                                                                       last=loop.extent - 1))
                level += 1
            if table["scalar"] and scalars:
                lines.append(lang.indent * level + table["scalar"].format(t=t, names=", ".join(scalars)))
            lines.extend(renderer.lines(body, level))
            for level in range(depth + len(chain) - 1, depth - 1, -1):
                lines.append(lang.indent * level + lang.loop_close)
            if table["parallel_end"]:
                lines.append(table["parallel_end"])
        else:
            if table["serial"]:
                lines.append(table["serial"].format(private=priv))
            level = depth
            if table["serial_open"]:
                lines.append(pad + table["serial_open"])
                level += 1
            if table["scalar"] and scalars:
                lines.append(lang.indent * level + table["scalar"].format(t=t, names=", ".join(scalars)))
            lines.extend(renderer.lines(body, level))
            if table["serial_close"]:
                lines.append((pad if table["serial_open"] else "") + table["serial_close"])
    return lines


# -- C ------------------------------------------------------------------------------------------------
def c_prototype(plan):
    """The header's declaration of ``<name>_infer_one`` ("" when the plan has none)."""
    if not available(plan):
        return ""
    n, t = plan.name, plan.ctype
    return f"""
/* One sample over the whole field: x[{n.upper()}_NX] -> y[{n.upper()}_NY], device pointers (host
   pointers without an offload device). One parallel loop per op; the intermediate activations live
   in static device buffers shared by every call, so calls on different streams or threads must not
   overlap. Returns ROSENNA_STATUS_OK, or _DEVICE for a file-loaded model not initialised. */
int {n}_infer_one(const {t} *x, {t} *y, void *stream);
"""


def c_source(plan):
    """The static buffers and ``<name>_infer_one`` for ``<name>.c`` ("" when the plan has none)."""
    if not available(plan):
        return ""
    n, t = plan.name, plan.ctype
    renderer = Renderer(C, plan.precision, resolver(plan, C, whole_field=True))
    buffers = "\n".join(f"{t} {C.symbol(plan.name, buffer_ident(i))}[{size}];" for i, size in enumerate(plan.scratch))
    ready = f"    if (!{n}_ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    declare = (f"\n/* Intermediate activations of {n}_infer_one, on the device. */\n"
               f"#pragma omp declare target\n{buffers}\n#pragma omp end declare target\n"
               + _acc_declare(plan, lambda i: C.symbol(plan.name, buffer_ident(i)))) if plan.scratch else ""
    device = "\n".join(_region_lines(plan, C, renderer, 2))
    acc = "\n".join(_region_lines(plan, C, renderer, 2, acc=True))
    host = "\n".join(host_lines(plan, C, Renderer(C, plan.precision, resolver(plan, C, whole_field=True),
                                                  math=HOST_MATH[plan.precision]), 1))
    return f"""{declare}
int {n}_infer_one(const {t} *x, {t} *y, void *stream)
{{
    (void)stream;
{ready}    if (ROSENNA_OMP_DEVICE()) {{
{device}
        return ROSENNA_STATUS_OK;
    }}
#if defined(_OPENACC)
    if (ROSENNA_ACC_DEVICE()) {{  /* an OpenACC build: the same loops as compute regions */
{acc}
        return ROSENNA_STATUS_OK;
    }}
#endif
    /* No offload device: the same loops on the host's threads and SIMD lanes. */
{host}
    return ROSENNA_STATUS_OK;
}}
"""


def batch_samples(plan):
    """Samples one parallel loop (one kernel launch) of each op computes together in the batched
    whole-field path: a power of two up to ``limits.WHOLE_BATCH_SAMPLES`` whose intermediates fit
    ``limits.WHOLE_BATCH_BYTES``."""
    per_sample = max(1, sum(plan.scratch) * plan.itemsize)
    count = 1
    while count * 2 <= limits.WHOLE_BATCH_SAMPLES and count * 2 * per_sample <= limits.WHOLE_BATCH_BYTES:
        count *= 2
    return count


def batch_buffer(plan, i):
    """The batched path's buffer for intermediate i, :func:`batch_samples` samples of it (named
    apart from ``<name>_infer_one``'s one-sample ``ws<i>``)."""
    return C.symbol(plan.name, f"wsb{i}")


def sample_resolver(plan):
    """Buffers as one sample of the batched path sees them: x, y and the intermediates through that
    sample's pointers (``xs``, ``ys``, ``ws<i>``: :func:`sample_pointers`), weights by their symbols."""
    def resolve(buf):
        kind, ident, offset = plan.storage[buf]
        if kind == "w":
            return C.symbol(plan.name, ident), offset, False
        if kind == "t":
            return buffer_ident(int(ident[1:])), offset, True
        return ("xs" if kind == "x" else "ys"), offset, True
    return resolve


def sample_pointers(plan, text, x="x", y="y", sample="s"):
    """Declarations of the pointers :func:`sample_resolver`'s names stand for, those ``text`` uses."""
    t, out = plan.ctype, []
    if "xs[" in text:
        out.append(f"const {t} *ROSENNA_RESTRICT xs = {x} + {sample} * {plan.nx}l;")
    if "ys[" in text:
        out.append(f"{t} *ROSENNA_RESTRICT ys = {y} + {sample} * {plan.ny}l;")
    for i, size in enumerate(plan.scratch):
        if f"{buffer_ident(i)}[" in text:
            out.append(f"{t} *ROSENNA_RESTRICT {buffer_ident(i)} = {batch_buffer(plan, i)} + {sample} * {size}l;")
    return out


def _batched_regions(plan, depth, acc=False):
    """The offloaded regions of the batched path: each parallel loop with the sample loop
    outermost in its collapse, each serial region one thread per sample (OpenACC compute regions
    with ``acc``)."""
    renderer = Renderer(C, plan.precision, sample_resolver(plan))
    pad, t, lines = C.indent * depth, plan.ctype, []
    for kind, chain, body in regions(plan.body):
        if kind == "comment":
            lines.append(pad + C.comment.format(text=body[0].text))
            continue
        chain = chain if kind == "parallel" else []
        collapse = f" collapse({len(chain) + 1})" if chain else ""
        lines.append(f"#pragma acc parallel loop gang vector{collapse} deviceptr(xb, yb)" if acc else
                     f"#pragma omp target teams distribute parallel for{collapse} is_device_ptr(xb, yb)")
        lines.append(pad + "for (int s = 0; s < count; ++s) {")
        level = depth + 1
        for loop in chain:
            lines.append(C.indent * level + C.loop_open.format(var=loop.var, extent=loop.extent, last=loop.extent - 1))
            level += 1
        inner = renderer.lines(body, level)
        text = "\n".join(inner)
        lines += [C.indent * level + decl for decl in sample_pointers(plan, text, "xb", "yb")]
        scalars = used_scalars(body)
        if scalars:
            lines.append(C.indent * level + f"{t} {', '.join(scalars)};")
        lines += inner
        for level in range(depth + len(chain), depth - 1, -1):
            lines.append(C.indent * level + C.loop_close)
    return lines


def _acc_declare(plan, symbol):
    """The OpenACC declaration of the intermediates ``symbol(i)`` (device copies, never copied)."""
    names = ", ".join(symbol(i) for i in range(len(plan.scratch)))
    return f"#if defined(_OPENACC)\n#pragma acc declare create({names})\n#endif\n"


def c_batch(plan):
    """``<name>_infer_batch`` for a whole-field plan: with an offload device, each op's parallel
    loop over :func:`batch_samples` samples at once (the sample loop collapsed with the op's
    output loops), the intermediates in ``<name>_wsb<i>``; without one, ``<name>_infer_one`` per
    sample on the host's threads."""
    n, t = plan.name, plan.ctype
    samples = batch_samples(plan)
    buffers = "\n".join(f"{t} {batch_buffer(plan, i)}[{samples} * {size}];" for i, size in enumerate(plan.scratch))
    declare = (f"\n/* Intermediate activations of {n}_infer_batch on the device, {samples} samples of each. */\n"
               f"#pragma omp declare target\n{buffers}\n#pragma omp end declare target\n"
               + _acc_declare(plan, lambda i: batch_buffer(plan, i))) if plan.scratch else ""
    ready = f"    if (!{n}_ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    device = "\n".join(_batched_regions(plan, 3))
    acc = "\n".join(_batched_regions(plan, 3, acc=True))
    return f"""{declare}
/* Whole-field plan: on an offload device one parallel loop per op over up to {samples} samples at
   once; on the host one sample at a time through {n}_infer_one. */
int {n}_infer_batch(int n, const {t} *x, {t} *y, void *stream)
{{
    (void)stream;
{ready}    if (ROSENNA_OMP_DEVICE()) {{
        for (int start = 0; start < n; start += {samples}) {{
            const int count = n - start < {samples} ? n - start : {samples};
            const {t} *xb = x + (long)start * {n.upper()}_NX;
            {t} *yb = y + (long)start * {n.upper()}_NY;
{device}
        }}
        return ROSENNA_STATUS_OK;
    }}
#if defined(_OPENACC)
    if (ROSENNA_ACC_DEVICE()) {{  /* an OpenACC build: the same loops as compute regions */
        for (int start = 0; start < n; start += {samples}) {{
            const int count = n - start < {samples} ? n - start : {samples};
            const {t} *xb = x + (long)start * {n.upper()}_NX;
            {t} *yb = y + (long)start * {n.upper()}_NY;
{acc}
        }}
        return ROSENNA_STATUS_OK;
    }}
#endif
    for (int i = 0; i < n; ++i) {{
        int status = {n}_infer_one(x + (long)i * {n.upper()}_NX, y + (long)i * {n.upper()}_NY, stream);
        if (status != ROSENNA_STATUS_OK)
            return status;
    }}
    return ROSENNA_STATUS_OK;
}}
"""


# -- Fortran ------------------------------------------------------------------------------------------
def fortran_declarations(plan):
    """Module-level lines: the static device buffers."""
    if not available(plan):
        return []
    out = []
    for i, size in enumerate(plan.scratch):
        out.append(f"  real(rk) :: {buffer_ident(i)}({size})")
        out.append(f"  !$omp declare target({buffer_ident(i)})")
    return out


def fortran_interface(plan):
    """Lines inside the module's interface block: ``<name>_infer_one_dev`` bound to the C symbol."""
    if not available(plan):
        return []
    n = plan.name
    return [f"    !> The C library's {n}_infer_one over device pointers (link lib{n}.a).",
            f"    function {n}_infer_one_dev(x, y, stream) result(status) bind(C, name='{n}_infer_one')",
            "      import :: c_int, c_ptr",
            "      type(c_ptr), value :: x, y, stream",
            "      integer(c_int) :: status",
            f"    end function {n}_infer_one_dev"]


def fortran_publics(plan):
    return [f"{plan.name}_infer_one", f"{plan.name}_infer_one_dev"] if available(plan) else []


def fortran_subroutine(plan):
    """The module procedure ``<name>_infer_one(x, y, status)``."""
    if not available(plan):
        return ""
    n = plan.name
    renderer = Renderer(FORTRAN, plan.precision, resolver(plan, FORTRAN, whole_field=True))
    device = _region_lines(plan, FORTRAN, renderer, 3)
    host = host_lines(plan, FORTRAN, renderer, 3)
    scalars, loops = host_names(plan)
    decls = [f"    real(rk) :: {name}" for name in sorted(set(used_scalars(plan.body)) | set(scalars))]
    loops = sorted(set(used_loop_vars(plan.body)) | set(loops))
    if loops:
        decls.append(f"    integer :: {', '.join(loops)}")
    decls.append("    logical :: on_device")
    ready = (f"    if (.not. ready) then\n      status = {n}_status_device\n      return\n    end if\n"
             if not plan.embed else "")
    return f"""
  !> One sample over the whole field, x({n}_nx) -> y({n}_ny): one parallel loop per op, the
  !> intermediate activations in module buffers on the device, shared by every call (calls must not
  !> overlap). Without an offload device the same loops run on the host's threads.
  subroutine {n}_infer_one(x, y, status)
    real(rk), intent(in) :: x({n}_nx)
    real(rk), intent(out) :: y({n}_ny)
    integer, intent(out) :: status
{chr(10).join(decls)}

{ready}    status = {n}_status_ok
    on_device = .false.
    !$ on_device = omp_get_num_devices() > 0 .and. omp_get_default_device() /= omp_get_initial_device()
    if (on_device) then
      !$omp target data map(to: x) map(from: y)
{chr(10).join(device)}
      !$omp end target data
    else
{chr(10).join(host)}
    end if
  end subroutine {n}_infer_one
"""


def fortran_batch_loop(plan):
    """Statements of ``<name>_infer_batch`` for a whole-field plan."""
    n = plan.name
    return (f"    do i = 1, n\n      call {n}_infer_one(x(:, i), y(:, i), status)\n"
            f"      if (status /= {n}_status_ok) return\n    end do\n")


