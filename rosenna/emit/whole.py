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
    """Whether the plan gets ``<name>_infer_one`` (not with an LSTM or GRU)."""
    return plan.has_infer_one


def _region_lines(plan, lang, renderer, depth, host=False):
    """The body of ``<name>_infer_one`` (after declarations), as lines: offloaded regions, or with
    ``host`` the same regions on the host's threads."""
    table = DIRECTIVES[lang.name + ("_host" if host else "")]
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
               f"#pragma omp declare target\n{buffers}\n#pragma omp end declare target\n") if plan.scratch else ""
    device = "\n".join(_region_lines(plan, C, renderer, 2))
    host = "\n".join(_region_lines(plan, C, renderer, 1, host=True))
    return f"""{declare}
int {n}_infer_one(const {t} *x, {t} *y, void *stream)
{{
    (void)stream;
{ready}    if (ROSENNA_OMP_DEVICE()) {{
{device}
        return ROSENNA_STATUS_OK;
    }}
    /* No offload device: the same loops on the host's threads. */
{host}
    return ROSENNA_STATUS_OK;
}}
"""


def c_batch(plan):
    """``<name>_infer_batch`` for a whole-field plan: ``<name>_infer_one`` per sample."""
    n, t = plan.name, plan.ctype
    return f"""
/* Whole-field plan: one sample at a time, each through {n}_infer_one. */
int {n}_infer_batch(int n, const {t} *x, {t} *y, void *stream)
{{
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
    host = _region_lines(plan, FORTRAN, renderer, 3, host=True)
    decls = [f"    real(rk) :: {name}" for name in used_scalars(plan.body)]
    loops = used_loop_vars(plan.body)
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


