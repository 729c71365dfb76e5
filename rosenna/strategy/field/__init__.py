"""The whole field: a plan whose per-point scratch is too large for a thread runs one sample at a
time, one parallel loop per op (``<name>_infer_one``), and ``<name>_infer_batch`` over samples.

Owns the choice of that path for the batched CUDA/HIP kernel (:data:`BATCHED`), where a
whole-field kernel file keeps its embedded weights (:func:`memory`), and the whole-field kernels'
schedule, decided here once and recorded in a frozen :class:`Field` (:func:`decide`): the phases
of each form of ``<name>_run`` (:mod:`~rosenna.strategy.field.fusion`: which regions share a
phase, the producer-side epilogues of :mod:`~rosenna.strategy.field.epilogue`, the phases computed
where they are read), the intermediate buffers and the samples per step, whether the clustered
kernel is emitted, and which convs run as implicit GEMMs or shared-memory tiles
(:mod:`~rosenna.strategy.field.convs`), each with the alternatives that fit and why. Owns too the
host form of ``<name>_infer_one`` (:mod:`~rosenna.strategy.field.host`: its regions transformed by
:mod:`~rosenna.strategy.field.host_loops`). rosenna/emit/cuda/whole_field.py,
rosenna/emit/host_field.py and their helpers only render them.
"""

import types
from dataclasses import dataclass

from rosenna.strategy.field import convs as _convs
from rosenna.strategy.field import epilogue as _epilogue
from rosenna.strategy.field import host  # noqa: F401 (the host form's regions)
from rosenna.strategy.field.fusion import Schedule, schedule
from rosenna.strategy.field.host import HostRegion, HostRegions  # noqa: F401 (the result's types)
from rosenna.strategy.table import Decision, Implementation, Rejected


class WholeField(Implementation):
    name, priority = "whole-field", 100
    summary = "one sample at a time, one parallel launch (or phase) per op"

    def reasons(self, s, tuning):
        if s.path != "whole":
            return [f"per-point scratch of {s.plan.scratch_bytes} bytes within whole_threshold {tuning.whole_threshold}"
                    if s.plan.has_infer_one else "an LSTM or GRU keeps the plan per point"]
        return []


BATCHED = (WholeField(),)


def memory(plan, tuning):
    """Where the CUDA/HIP kernel file keeps embedded weights: ``__constant__`` up to the limit
    (a whole-field plan's: ``whole_constant_limit`` at least, a warp reads one weight at a time)."""
    limit = tuning.constant_limit
    if plan.path == "whole":
        limit = max(limit, tuning.whole_constant_limit)
    nbytes = plan.parameters * plan.itemsize
    constant = bool(plan.embed and nbytes <= limit)
    if not plan.embed:
        why = "file-loaded weights live in __device__ storage"
    else:
        why = f"{nbytes} bytes of weights, {'at or under' if constant else 'over'} the {limit}-byte limit"
    return Decision("cuda weights", "constant" if constant else "global", why=why,
                    values=(("constant_limit", limit), ("weight_bytes", nbytes)))


@dataclass(frozen=True, eq=False)
class Field:
    """The whole-field kernels of ``<name>_kernel.cu`` as the strategy decided them.

    Attributes:
        launched, persistent, cluster: the :class:`~rosenna.strategy.field.fusion.Schedule` of
            each form of ``<name>_run`` (``<name>_phases``, ``<name>_field``, ``<name>_cluster``);
            forms with the same epilogues share one schedule (the same object).
        cluster_samples: the most samples a call may have for ``<name>_run`` to take the
            clustered kernel; 0: no clustered kernel is emitted.
        cluster_own_buffers: whether the clustered kernel's intermediates are its own arrays (its
            phases differ from the other forms').
        scratch: floats per sample of each intermediate buffer the launched and persistent forms share.
        samples: samples one step of the kernel file's batch computes together.
        widest: threads per sample of the persistent form's widest phase.
        igemm: ``{phase: GemmConv}`` of the launched phases run as implicit GEMMs (per call, from
            its ``min_samples``).
        tiles: ``{form: {phase: TiledConv}}``: the phases of each form run as shared-memory tiles
            (read-only mappings, as ``igemm``).
        jammed: ``{form: (Launch, ...)}``: the phases of ``launched``, and of ``cluster`` with the
            tuning's ``cluster_jam``, unrolled and jammed over output channels
            (:meth:`~rosenna.strategy.field.fusion.Schedule.jammed`).
        decisions: the :class:`Decision` of each part, for `rosenna info`.
    """

    launched: Schedule
    persistent: Schedule
    cluster: Schedule
    cluster_samples: int
    cluster_own_buffers: bool
    scratch: tuple
    samples: int
    widest: int
    igemm: types.MappingProxyType
    tiles: types.MappingProxyType
    decisions: tuple
    jammed: types.MappingProxyType

    def lines(self):
        out = []
        for decision in self.decisions:
            out += decision.lines()
        return out


def batch_samples(scratch, itemsize, tuning):
    """Samples one step of the kernel file's batch computes together: a power of two up to the
    tuning's ``whole_batch_samples`` whose intermediates (``scratch``: floats per sample of each
    buffer) fit ``cuda_whole_batch_bytes``."""
    per_sample = max(1, sum(scratch) * itemsize)
    count = 1
    while count * 2 <= tuning.whole_batch_samples and count * 2 * per_sample <= tuning.cuda_whole_batch_bytes:
        count *= 2
    return count


def cluster_refusal(sched, tuning):
    """Why the phases of ``sched`` get no clustered kernel ("" when they do): the tuning's
    ``cluster_samples`` and ``cluster_min_phases``."""
    if not tuning.cluster_samples:
        return "cluster_samples is 0"
    if len(sched.phases) < tuning.cluster_min_phases:
        return f"{len(sched.phases)} phases, under cluster_min_phases {tuning.cluster_min_phases}"
    return ""


def schedules(plan):
    """``(launched, persistent, cluster)``: each form's :func:`schedule`, with the producer-side
    epilogues where the tuning's ``field_epilogues`` names the form (forms alike share one). With
    phases computed where read (the tuning's ``field_inline_loads``) all three are the default one."""
    if plan.tuned.field_inline_loads or plan.runtime_indexed:  # (a run-time offset: no epilogues either)
        return (schedule(plan),) * 3
    made = {}
    fused = [form in _epilogue.forms(plan.tuned) for form in _epilogue.ALL_FORMS]
    for each in fused:
        if each not in made:
            made[each] = schedule(plan, epilogues=each)
    return tuple(made[each] for each in fused)


def decide(plan, tuning):
    """The :class:`Field` of a plan that emits ``<name>_infer_one`` (None for any other)."""
    if not plan.emits_infer_one:
        return None
    launched, persistent, cluster = schedules(plan)
    lists = [launched.plan.scratch, persistent.plan.scratch]
    scratch = tuple(max(sizes[i] if i < len(sizes) else 0 for sizes in lists) for i in range(max(map(len, lists))))
    samples = batch_samples(scratch, plan.itemsize, tuning)
    refusal = cluster_refusal(cluster, tuning)
    few = 0 if refusal else tuning.cluster_samples
    own = cluster is not launched and cluster is not persistent
    forms = dict(launched=launched, persistent=persistent, **({"cluster": cluster} if few else {}))
    tiles = {form: _convs.choose_tiles(f, form, "" if f is launched else form[0]) for form, f in forms.items()}
    if "cluster" in tiles and own:
        tiles["cluster"] = {}  # (the tile functions use the other forms' arrays)
    igemm = types.MappingProxyType(_convs.choose_igemm(launched))
    tiles = types.MappingProxyType({form: types.MappingProxyType(chosen) for form, chosen in tiles.items()})
    widest = max(launch.threads for launch in persistent.phases)
    decisions = (_schedule_decision(plan, launched, persistent, cluster, samples, scratch),
                 _forms_decision(cluster, few, refusal, widest, tuning))
    decisions += tuple(_conv_decision(k, window, note, launched, igemm, tiles, tuning)
                       for k, (window, note) in _convs.conv_phases(launched).items())
    jammed = {"launched": tuple(launched.jammed())}
    if few and cluster.plan.tuned.cluster_jam:
        jammed["cluster"] = jammed["launched"] if cluster is launched else tuple(cluster.jammed())
    return Field(launched, persistent, cluster, few, own, scratch, samples, widest, igemm, tiles, decisions,
                 types.MappingProxyType(jammed))


def _schedule_decision(plan, launched, persistent, cluster, samples, scratch):
    ops = launched.unfused
    values = [("phases_per_op", ops), ("phases_launched", len(launched.phases)),
              ("phases_persistent", len(persistent.phases)), ("phases_cluster", len(cluster.phases)),
              ("computed_where_read", len(launched.values)), ("samples_per_step", samples),
              ("buffer_floats_per_sample", sum(scratch))]
    fused = sorted(_epilogue.forms(plan.tuned))
    chosen = "fused" if fused or launched.values else "one phase per op"
    why = (f"producer-side epilogues in {', '.join(fused)}" if fused else "no producer-side epilogues (field_epilogues '')")
    why += f"; {len(launched.values)} phases computed where read" if launched.values else \
        " nor phases computed where read (field_inline_loads 0)"
    return Decision("whole-field schedule", chosen, why=why, values=tuple(values))


def _forms_decision(cluster, few, refusal, widest, tuning):
    """<name>_run's forms: the clustered kernel for up to ``few`` samples, the persistent kernel
    while the resident blocks hold the widest phase, else the launched phases (chosen per call)."""
    fitting = (["cluster"] if few else []) + ["persistent", "launched"]
    rejected = (Rejected("cluster", (refusal,)),) if refusal else ()
    why = (f"per call: the clustered kernel up to {few} samples (sm_90+), " if few else "per call: ") + \
        (f"the persistent kernel while {tuning.field_persistent_waves} wave(s) of resident blocks hold "
         f"{widest} threads per sample, else the launched phases")
    return Decision("whole-field forms", fitting[0], tuple(fitting[1:]), rejected, why,
                    (("cluster_samples", few), ("widest_phase_threads", widest)))


def _conv_decision(k, window, note, launched, igemm, tiles, tuning):
    """One conv phase: the implicit GEMM (per call, from its ``min_samples``), shared-memory
    tiles or the direct loops, best first."""
    fitting, rejected, values = [], [], []
    if k in igemm:
        fitting.append("igemm")
        values.append(("igemm_from_samples", igemm[k].min_samples))
    else:
        rejected.append(Rejected("igemm", (_convs.igemm_eligible(window, tuning),)))
    tiled = [form for form in _convs.FORMS if k in tiles.get(form, {})]
    if tiled:
        fitting.append("smem-tiles")
        values.append(("tiled_in", "+".join(tiled)))
    else:
        why = _convs.smem_eligible(window) or _convs.smem_refusal(
            window, _convs.tiling_of(window, "launched", tuning), "launched", tuning) or "no form takes it"
        rejected.append(Rejected("smem-tiles", (why,)))
    fitting.append("direct")
    chosen = "smem-tiles" if "smem-tiles" in fitting and not tuning.smem_igemm_first else fitting[0]
    others = tuple(name for name in fitting if name != chosen)
    if chosen == "igemm":
        why = (f"3xTF32 implicit GEMM in the launched phases from {igemm[k].min_samples} samples per call "
               f"(igemm_min_rows {tuning.igemm_min_rows}); smaller calls and the other forms: {others[0]}")
    elif chosen == "smem-tiles":
        why = "shared-memory tiles" + ("; smem_igemm_first is false" if "igemm" in others else "")
    else:
        why = "the plan's loops: no conv kernel of its own fits"
    return Decision(f"whole-field conv, phase {k} ({note})", chosen, others, tuple(rejected), why,
                    tuple(values))
