"""The whole-field path: ``<name>_infer_one(x, y, stream)``, one sample, one parallel loop per op,
and the batched ``<name>_infer_batch``.

The per-point ``<name>_infer`` keeps every intermediate activation in locals; for a conv net over
a 64x64 field that is hundreds of KB per thread, more than a device thread should hold. For such
plans (see ``rosenna.plan.WHOLE_THRESHOLD``) ``<name>_infer_one`` runs one sample at a time with
the intermediates in static device buffers (``omp declare target``, ``acc declare create``), and
each op as one ``target teams distribute parallel for`` (OpenACC: ``parallel loop gang vector``)
over its output elements. On a device ``<name>_infer_batch`` runs the same regions over up to
:func:`batch_samples` samples at once (the sample loop outermost in each collapse, the
intermediates in their own buffers); on the host it calls ``<name>_infer_one`` per sample. It
exists for every plan without an LSTM or GRU (whose time loop is sequential).

Which loops run in parallel, and as which regions, is decided by :mod:`rosenna.parallel` over
the loop IR; this module renders its regions: each parallel one as a collapsed parallel loop, a
serial one as one sequential region (correct if slow). The buffers are shared by every call:
calls on different streams (or threads) must not overlap.

C and Fortran, OpenMP and OpenACC render the same statements through the one Renderer and the one
:func:`region_lines`; their directives and declarations differ only through the ``DIRECTIVES``
table below. The C routines are here; the Fortran module's are in
:mod:`rosenna.emit.whole_fortran`, which also binds ``<name>_infer_one_dev`` to the C symbol.
"""

from rosenna.emit import host_conv
from rosenna.emit.host_field import HOST_MADD, HOST_MATH, host_lines, host_names
from rosenna.emit.lang import FORTRAN, C
from rosenna.emit.notes import annotate, note
from rosenna.emit.render import Renderer, buffer_ident, resolver, used_loop_vars, used_scalars
from rosenna.loopir import Idx
from rosenna.parallel import regions

#: How each offload model writes the regions in each language ("c", "c_acc", "fortran",
#: "fortran_acc"): a parallel region's directive (``{collapse}``, ``{private}``: the clauses or "";
#: ``{data}``: the x and y the region reads, device pointers in C) and its end, a serial region's,
#: how a region's scalars are made private (declared in C, a clause in Fortran). A batched region
#: reaches sample s's part of x, y and the intermediates through pointers (C) or by offsets in its
#: subscripts (Fortran). Each routine tries one branch per model, chosen alike in both languages:
#: compiled where the preprocessor condition ``guard`` holds (the build has the model; C's OpenMP
#: branch needs none, its macro is 0 without OpenMP) and taken where the macro ``device`` says a
#: device is there (C: rosenna_rt.h; Fortran: defined as ``test`` unless given on the command line,
#: :mod:`rosenna.emit.whole_fortran`); ``why`` is the branch's comment. Fortran only: ``data`` and
#: ``data_end`` map the routine's x and y around the branch's regions, copying nothing already on
#: the device; ``samples`` names the private routine of the batched regions, ``title`` the model in
#: its doc comment.
DIRECTIVES = {
    "c": {
        "update_from": "#pragma omp target update from({v})",
        "update_to": "#pragma omp target update to({v})",
        "parallel": "#pragma omp target teams distribute parallel for{collapse} is_device_ptr({data})",
        "parallel_end": None,
        "serial": "#pragma omp target is_device_ptr({data})",
        "serial_open": "{",
        "serial_close": "}",
        "collapse": " collapse({n})",
        "private": None,
        "scalar": "{t} {names};",
        "pointers": True,
        "guard": None,
        "device": "ROSENNA_OMP_DEVICE()",
        "why": "",
    },
    "c_acc": {
        "update_from": "#pragma acc update self({v})",
        "update_to": "#pragma acc update device({v})",
        "parallel": "#pragma acc parallel loop gang vector{collapse} deviceptr({data})",
        "parallel_end": None,
        "serial": "#pragma acc serial deviceptr({data})",
        "serial_open": "{",
        "serial_close": "}",
        "collapse": " collapse({n})",
        "private": None,
        "scalar": "{t} {names};",
        "pointers": True,
        "guard": "defined(_OPENACC)",
        "device": "ROSENNA_ACC_DEVICE()",
        "why": "an OpenACC build: the same loops as compute regions",
    },
    "fortran": {
        "update_from": "!$omp target update from({v})",
        "update_to": "!$omp target update to({v})",
        "parallel": "!$omp target teams distribute parallel do{collapse}{private}",
        "parallel_end": "!$omp end target teams distribute parallel do",
        "serial": "!$omp target{private}",
        "serial_open": None,
        "serial_close": "!$omp end target",
        "collapse": " collapse({n})",
        "private": " private({names})",
        "scalar": None,
        "pointers": False,
        "guard": "defined(_OPENMP)",
        "device": "ROSENNA_OMP_DEVICE",
        "test": "(omp_get_num_devices() > 0 .and. omp_get_default_device() /= omp_get_initial_device())",
        "uses": None,  # the module's `!$ use omp_lib` (every module has it)
        "data": "!$omp target data map(to: x) map(from: y)",
        "data_end": "!$omp end target data",
        "why": "An offload device: each op one target region",
        "samples": "samples_omp",
        "title": "OpenMP target",
    },
    "fortran_acc": {
        "update_from": "!$acc update self({v})",
        "update_to": "!$acc update device({v})",
        "parallel": "!$acc parallel loop gang vector{collapse}{private} present(x, y)",
        "parallel_end": "!$acc end parallel loop",
        "serial": "!$acc serial{private} present(x, y)",
        "serial_open": None,
        "serial_close": "!$acc end serial",
        "collapse": " collapse({n})",
        "private": " private({names})",
        "scalar": None,
        "pointers": False,
        "guard": "defined(_OPENACC) && !defined(_OPENMP)",
        "device": "ROSENNA_ACC_DEVICE",
        "test": "(acc_get_device_type() /= acc_device_host .and. acc_get_num_devices(acc_get_device_type()) > 0)",
        "uses": "use openacc, only: acc_get_device_type, acc_get_num_devices, acc_device_host",
        "data": "!$acc data copyin(x) copyout(y)",
        "data_end": "!$acc end data",
        "why": "An OpenACC build with a device: each op one compute region",
        "samples": "samples_acc",
        "title": "OpenACC",
    },
}

#: The sample loop's variable in the batched regions.
SAMPLE = "s"


#: How each language reads the fault flags back (:func:`fault_check`): the section of the flags
#: that an update names (``{flags}``: the array, ``{size}``: its elements), and the test and clear of
#: every sample's flag, the lines before the device's update and ``done``, then the one closing them
#: (``{i}``: one indent).
FLAG_CHECK = {
    "c": {"section": "{flags}[0:{size}]",
          "test": ["int faulted = 0;", "for (int f = 0; f < {size}; f += 2)", "{i}if ({flags}[f] != {zero}) {{",
                   "{i}{i}{flags}[f] = {zero};", "{i}{i}faulted = 1;", "{i}}}", "if (faulted) {{"],
          "close": "}"},
    "fortran": {"section": "{flags}",
                "test": ["if (any({flags}(1::2) /= 0)) then", "{i}{flags}(1::2) = 0"],
                "close": "end if"},
}


def fault_check(plan, lang, table, symbol, samples, depth, done):
    """The lines that read the fault flag (:func:`rosenna.loopir.flag_faults`) back once a call's
    regions have run: ``samples`` flags (element 0 of each sample's pair of ``symbol``), brought
    from the device with the model's update (``table``; None: the host's own), cleared there when
    one is set, and then ``done`` (lines: return the INDEX status). [] when the plan reads no index
    at run time. The outputs of the faulting elements are already NaN."""
    if plan.fault_buffer is None:
        return []
    pad, inner, form = lang.indent * depth, lang.indent * (depth + 1), FLAG_CHECK[lang.name]
    fields = dict(flags=symbol, size=2 * samples, zero=lang.literal(0.0, plan.precision), i=lang.indent)

    def directive(key, indent):
        section = form["section"].format(**fields)
        return [] if table is None else [(indent if lang.indent_directives else "") + table[key].format(v=section)]

    lines = [pad + lang.comment.format(text="an index outside its axis set its sample's flag: INDEX, the flags cleared")]
    lines += directive("update_from", pad) + [pad + text.format(**fields) for text in form["test"]]
    lines += directive("update_to", inner) + [inner + text for text in done] + [pad + form["close"]]
    return lines


def available(plan):
    """Whether the files get ``<name>_infer_one``: see :attr:`rosenna.plan.Plan.emits_infer_one`."""
    return plan.emits_infer_one


def region_lines(plan, lang, table, renderer, depth, samples=False, data="x, y"):
    """The regions of ``<name>_infer_one`` as lines, in the offload model of ``table``: each
    parallel region one collapsed parallel loop, each serial region one sequential region. With
    ``samples`` (the batched path) every region also runs over the ``count`` samples from
    ``data``: the sample loop outermost in the collapse, a serial region one thread per sample."""
    pad, t, lines = lang.indent * depth, plan.ctype, []

    def directive(text, level):
        return (lang.indent * level if lang.indent_directives else "") + text

    op = None
    for kind, chain, body in regions(plan.field_body):
        if kind == "comment":
            lines.append(pad + lang.comment.format(text=body[0].text))
            op = body[0].op
            continue
        scalars = used_scalars(body)
        private = ", ".join(scalars + used_loop_vars(body))
        priv = table["private"].format(names=private) if table["private"] and private else ""
        loops = [(loop.var, loop.extent, loop.extent - 1) for loop in chain] if kind == "parallel" else []
        if samples:
            loops.insert(0, (SAMPLE, "count", "count - 1"))
        level = depth
        if kind == "parallel" and (op is not None or not lines or not lines[-1].lstrip().startswith(lang.comment[:2])):
            lines.append(pad + lang.comment.format(text=note(op, chain[:1])))
        elif kind != "parallel":
            if samples:  # the region is a loop over the samples
                lines.append(pad + lang.comment.format(text=note(op, body, {SAMPLE: 1})))
            body = annotate(body, op)
        if loops:
            collapse = table["collapse"].format(n=len(loops)) if len(loops) > 1 else ""
            lines.append(directive(table["parallel"].format(collapse=collapse, private=priv, data=data), depth))
            for var, extent, last in loops:
                lines.append(lang.indent * level + lang.loop_open.format(var=var, extent=extent, last=last))
                level += 1
        else:
            lines.append(directive(table["serial"].format(private=priv, data=data), depth))
            if table["serial_open"]:
                lines.append(pad + table["serial_open"])
                level += 1
        inner = renderer.lines(body, level)
        if samples and table["pointers"]:
            lines += [lang.indent * level + decl for decl in sample_pointers(plan, "\n".join(inner), *data.split(", "))]
        if table["scalar"] and scalars:
            lines.append(lang.indent * level + table["scalar"].format(t=t, names=", ".join(scalars)))
        lines += inner
        if loops:
            for level in range(depth + len(loops) - 1, depth - 1, -1):
                lines.append(lang.indent * level + lang.loop_close)
            if table["parallel_end"]:
                lines.append(directive(table["parallel_end"], depth))
        elif table["serial_close"]:
            lines.append(directive(table["serial_close"], depth) if not table["serial_open"]
                         else pad + table["serial_close"])
    return lines


# -- C ------------------------------------------------------------------------------------------------
#: The offload models of the C routines, in the order their branches are tried.
C_MODELS = ("c", "c_acc")


def _c_branches(body):
    """The offload branches of a C routine: each model's ``body(table)`` (lines) under its guard,
    taken when its device macro says so."""
    lines = []
    for model in C_MODELS:
        table = DIRECTIVES[model]
        why = f"  /* {table['why']} */" if table["why"] else ""
        lines += ([f"#if {table['guard']}"] if table["guard"] else []) + [f"    if ({table['device']}) {{{why}"]
        lines += body(table) + ["        return ROSENNA_STATUS_OK;", "    }"] + (["#endif"] if table["guard"] else [])
    return "\n".join(lines)


def c_prototype(plan):
    """The header's declaration of ``<name>_infer_one`` ("" when the plan has none)."""
    if not available(plan):
        return ""
    n, t = plan.name, plan.ctype
    index = (", or _INDEX when an index (a gather's, a scatter's) was outside its axis: the outputs\n"
             "   it would have filled are NaN"
             if plan.fault_buffer is not None else "")
    return f"""
/* One sample over the whole field: x[{n.upper()}_NX] -> y[{n.upper()}_NY], device pointers (host
   pointers without an offload device). One parallel loop per op; the intermediate activations live
   in static device buffers shared by every call, so calls on different streams or threads must not
   overlap. Returns ROSENNA_STATUS_OK, or _DEVICE for a file-loaded model not initialised{index}. */
int {n}_infer_one(const {t} *x, {t} *y, void *stream);
"""


def c_source(plan, regions):
    """The static buffers and ``<name>_infer_one`` for ``<name>.c`` ("" when the plan has none);
    ``regions``: the host form's (``Strategy.host_regions``)."""
    if not available(plan):
        return ""
    n, t = plan.name, plan.ctype
    renderer = Renderer(C, plan.precision, resolver(plan, C, whole_field=True))
    buffers = "\n".join(f"{t} {C.symbol(plan.name, buffer_ident(i))}[{size}];" for i, size in enumerate(plan.scratch))
    ready = f"    if (!{n}_ready)\n        return ROSENNA_STATUS_DEVICE;\n" if not plan.embed else ""
    declare = (f"\n/* Intermediate activations of {n}_infer_one, on the device. */\n"
               f"#pragma omp declare target\n{buffers}\n#pragma omp end declare target\n"
               + _acc_declare(plan, lambda i: C.symbol(plan.name, buffer_ident(i)))) if plan.scratch else ""
    flags = C.symbol(plan.name, buffer_ident(plan.fault_buffer)) if plan.fault_buffer is not None else None
    index = ["return ROSENNA_STATUS_INDEX;"]
    branches = _c_branches(lambda table: region_lines(plan, C, table, renderer, 2)
                           + fault_check(plan, C, table, flags, 1, 2, index))
    period = plan.tuned.host_pace
    host = "\n".join(host_lines(plan, regions, C, Renderer(C, plan.precision, resolver(plan, C, whole_field=True),
                                                  math=HOST_MATH[plan.precision], fma=HOST_MADD[plan.tuned.host_fma]), 1,
                                 "team_size" if period else None))
    if period:  # the team's size chosen by the time calls took (rosenna_host_sync.h's rosenna_pace)
        host = (f"    static rosenna_pace pace = ROSENNA_PACE_INIT;\n"
                f"    const int team_size = rosenna_pace_threads(&pace, {period}, {plan.tuned.host_pace_cap});\n"
                f"    const double started = rosenna_pace_clock();\n{host}\n"
                f"    rosenna_pace_record(&pace, team_size, rosenna_pace_clock() - started);")
    host = "\n".join([host] + fault_check(plan, C, None, flags, 1, 1, index))
    return f"""{declare}
{host_conv.arrays(plan, regions)}
int {n}_infer_one(const {t} *x, {t} *y, void *stream)
{{
    (void)stream;
{ready}{branches}
    /* No offload device: the same loops on the host's threads and SIMD lanes. */
{host}
    return ROSENNA_STATUS_OK;
}}
"""


def batch_samples(plan):
    """Samples one parallel loop (one kernel launch) of each op computes together in the batched
    whole-field path: a power of two up to the tuning's ``whole_batch_samples`` whose intermediates
    fit ``whole_batch_bytes``."""
    per_sample = max(1, sum(plan.scratch) * plan.itemsize)
    count, tuning = 1, plan.tuned
    while count * 2 <= tuning.whole_batch_samples and count * 2 * per_sample <= tuning.whole_batch_bytes:
        count *= 2
    return count


def batch_buffer(plan, i, lang=C):
    """The batched path's buffer for intermediate i, :func:`batch_samples` samples of it (named
    apart from ``<name>_infer_one``'s one-sample ``ws<i>``)."""
    return lang.symbol(plan.name, f"wsb{i}")


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


def sample_offsets(plan, lang):
    """Buffers as sample ``s`` of the batched path sees them where there are no pointers
    (Fortran): x, y and the intermediates ``s`` times their per-sample size past sample 0."""
    def resolve(buf):
        kind, ident, offset = plan.storage[buf]
        if kind == "w":
            return lang.symbol(plan.name, ident), offset, False
        if kind == "t":
            i = int(ident[1:])
            return batch_buffer(plan, i, lang), Idx.of(SAMPLE) * plan.scratch[i] + offset, True
        return ident, Idx.of(SAMPLE) * (plan.nx if kind == "x" else plan.ny) + offset, True
    return resolve


def sample_pointers(plan, text, x="x", y="y", sample="s", buffer=batch_buffer):
    """Declarations of the pointers :func:`sample_resolver`'s names stand for, those ``text`` uses;
    ``buffer(plan, i)`` names intermediate i's array of every sample."""
    t, out = plan.ctype, []
    if "xs[" in text:
        out.append(f"const {t} *ROSENNA_RESTRICT xs = {x} + {sample} * {plan.nx}l;")
    if "ys[" in text:
        out.append(f"{t} *ROSENNA_RESTRICT ys = {y} + {sample} * {plan.ny}l;")
    for i, size in enumerate(plan.scratch):
        if f"{buffer_ident(i)}[" in text:
            out.append(f"{t} *ROSENNA_RESTRICT {buffer_ident(i)} = {buffer(plan, i)} + {sample} * {size}l;")
    return out


def batched_regions(plan, lang, table, depth, data):
    """The regions of the batched path (:func:`region_lines` over ``count`` samples): C reaches a
    sample's part of x, y and the intermediates through pointers (:func:`sample_resolver`),
    Fortran by offsets in the subscripts (:func:`sample_offsets`)."""
    resolve = sample_resolver(plan) if table["pointers"] else sample_offsets(plan, lang)
    return region_lines(plan, lang, table, Renderer(lang, plan.precision, resolve), depth, samples=True, data=data)


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
    chunks = [f"        /* the samples in chunks of {samples}, each op one region over a chunk */",
              f"        for (int start = 0; start < n; start += {samples}) {{",
              f"            const int count = n - start < {samples} ? n - start : {samples};",
              f"            const {t} *xb = x + (long)start * {n.upper()}_NX;",
              f"            {t} *yb = y + (long)start * {n.upper()}_NY;"]
    flags = batch_buffer(plan, plan.fault_buffer) if plan.fault_buffer is not None else None
    branches = _c_branches(lambda table: chunks + batched_regions(plan, C, table, 3, "xb, yb") + ["        }"]
                           + fault_check(plan, C, table, flags, samples, 2, ["return ROSENNA_STATUS_INDEX;"]))
    if flags is None:
        host = f"""    for (int i = 0; i < n; ++i) {{
        int status = {n}_infer_one(x + (long)i * {n.upper()}_NX, y + (long)i * {n.upper()}_NY, stream);
        if (status != ROSENNA_STATUS_OK)
            return status;
    }}
    return ROSENNA_STATUS_OK;"""
    else:  # every sample runs; an index outside its axis in any gives INDEX at the end
        host = f"""    int faulted = 0;
    for (int i = 0; i < n; ++i) {{
        int status = {n}_infer_one(x + (long)i * {n.upper()}_NX, y + (long)i * {n.upper()}_NY, stream);
        if (status == ROSENNA_STATUS_INDEX)
            faulted = 1;
        else if (status != ROSENNA_STATUS_OK)
            return status;
    }}
    return faulted ? ROSENNA_STATUS_INDEX : ROSENNA_STATUS_OK;"""
    return f"""{declare}
/* Whole-field plan: on an offload device one parallel loop per op over up to {samples} samples at
   once; on the host one sample at a time through {n}_infer_one. */
int {n}_infer_batch(int n, const {t} *x, {t} *y, void *stream)
{{
    (void)stream;
{ready}{branches}
    /* on the host: one sample at a time, each through {n}_infer_one's host loops */
{host}
}}
"""
