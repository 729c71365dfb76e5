"""The host form of ``<name>_infer_one`` (no offload device), decided once: the regions of
:func:`rosenna.parallel.launch_groups` in order, each parallel one transformed by
:mod:`~rosenna.strategy.field.host_loops` (unrolled and jammed over its output channels, its tap
loops unrolled, its innermost loop split into SIMD loops), and which worksharing constructs end
without a barrier. :mod:`rosenna.emit.host_field` renders the result in C and Fortran.
"""

from dataclasses import dataclass
from typing import NamedTuple

from rosenna.loopir import Comment, runtime_indexed
from rosenna.parallel import launch_groups
from rosenna.strategy.field import host_conv
from rosenna.strategy.table import Decision, Rejected
from rosenna.strategy.field.host_loops import Inner, contiguous, jam, simd_loops, unroll_taps


class HostRegion(NamedTuple):
    """One construct of the host form: ``kind`` ("parallel", "serial" or "conv"), its ``chain`` of
    outer loops, its ``body`` (a parallel region's: the :class:`~rosenna.strategy.field.host_loops.Inner`
    loops around its innermost variable; a conv's: its :class:`~rosenna.strategy.field.host_conv.HostConv`),
    the op ``notes`` above it, and ``nowait`` (the next construct may start before every thread
    is done with this one)."""
    kind: str
    chain: list
    body: list
    notes: list
    nowait: bool


@dataclass(frozen=True, eq=False)
class HostRegions:
    """The regions of the host form, in order (a tuple of :class:`HostRegion`), and the
    :class:`Decision` of each Conv's form (`rosenna info`)."""
    regions: tuple
    decisions: tuple = ()

    def __iter__(self):
        return iter(self.regions)

    def __len__(self):
        return len(self.regions)

    def plain(self):
        """The regions with each blocked conv as the plan's loops (the Fortran module's form)."""
        out = []
        for region in self.regions:
            out += list(region.body.fallback) if region.kind == "conv" else [region]
        return HostRegions(tuple(out), self.decisions)

    def lines(self):
        out = []
        for decision in self.decisions:
            out += decision.lines()
        return out


def regions(plan):
    """The :class:`HostRegions` of ``plan`` under its tuning (``host_jam``, the tap unrolling,
    ``host_conv``) and host vector width: each Conv that the blocked form takes one "conv"
    region in place of its regions."""
    out, decisions = [], []
    launches = launch_groups(plan)
    comment_of, last = {}, None  # each top-level statement of the plan -> the op comment before it
    for stmt in plan.body:
        if isinstance(stmt, Comment):
            last = stmt
        else:
            comment_of[id(stmt)] = last

    def comment(member):  # (op comments may read alike: a long node name is cut)
        return comment_of.get(id(member.chain[0] if member.chain else member.body[0]))

    counts = {}
    for launch in launches:
        for member in launch.members:
            counts[id(comment(member))] = counts.get(id(comment(member)), 0) + 1
    pieces = {}  # index in out of a conv region -> the plan's regions of its Conv, transformed
    collecting, previous = None, None  # the conv region whose Conv's regions are being met
    for j, launch in enumerate(launches):
        for k, member in enumerate(launch.members):
            # a group's last region ends with a barrier; the team's own closing barrier ends the last
            nowait = k < len(launch.members) - 1 or j == len(launches) - 1
            region = HostRegion(member.kind, member.chain, member.body, member.notes, nowait)
            mine = comment(member)
            if mine is not previous:  # an op's regions follow each other
                collecting, previous = None, mine
                op = mine.op if mine is not None else None
                if op is not None and op.op == "Conv" and op.window:
                    together = sum(comment(m) is mine for m in launch.members) == counts[id(mine)]
                    conv, decision = _conv_form(plan, member.op, op.window, together)
                    decisions.append(decision)
                    if conv is not None:
                        collecting = len(out)
                        pieces[collecting] = []
                        out.append(HostRegion("conv", [], conv, member.notes, nowait))
            if collecting is None:
                out.extend(_transformed(plan, region))
                continue
            pieces[collecting].extend(_transformed(plan, region))
            out[collecting] = out[collecting]._replace(nowait=nowait)  # the op's last region's barrier
    return HostRegions(tuple(_frozen(region, pieces.get(i)) for i, region in enumerate(out)), tuple(decisions))


def _frozen(region, pieces):
    """A conv region with its fallback: the plan's regions of the Conv, transformed."""
    if region.kind != "conv":
        return region
    conv = region.body
    return region._replace(body=host_conv.HostConv(conv.window, conv.channels, conv.rows, conv.lanes, conv.note,
                                                   tuple(pieces)))


def _conv_form(plan, note, window, together):
    """``(HostConv or None, Decision)`` for the Conv of the op comment ``note``: the blocked form
    where :func:`~rosenna.strategy.field.host_conv.refusal` lets it, else the plan's loops.
    ``together``: whether its regions are all in one launch."""
    tuning = plan.tuned
    why = host_conv.refusal(plan, window, tuning)
    if not why and any(plan.storage[window[v]][0] not in ("x", "y", "t") for v in ("x", "y")):
        why = "input or output not a run-time buffer"
    if not why and not together:
        why = "its loops span several launches"
    part = f"host whole-field conv ({note})"
    if why:
        return None, Decision(part, "loops", (), (Rejected(host_conv.NAME, (why,)),),
                              "the plan's interior and border loops")
    channels, rows = host_conv.block(plan, window, tuning)
    conv = host_conv.HostConv(window, channels, rows, plan.host_vector // plan.itemsize, note, ())
    values = (("block_channels", channels), ("block_rows", rows), ("lanes", conv.lanes),
              ("tile_bytes", conv.tile_floats * plan.itemsize))
    block = f"{channels} channel{'s' * (channels > 1)} x {rows} row{'s' * (rows > 1)} x {conv.lanes} columns"
    return conv, Decision(part, host_conv.NAME, ("loops",), (),
                          f"{block} in vector accumulators over a zero-padded input tile, borders included", values)


def _transformed(plan, region):
    """A region of the plan transformed for the host (a parallel one: jammed, its taps unrolled,
    its innermost loop split into SIMD loops; several pieces where the jam leaves a remainder)."""
    kind, chain, body, notes, nowait = region
    if kind != "parallel":
        return [region]
    if runtime_indexed(body):  # a gather: its loads go where the indices say, no SIMD loop pays
        return [HostRegion("parallel", chain, [Inner(chain[-1].extent, body, simd=False)], notes, nowait)]
    out = []
    pieces = jam(plan, chain, body, plan.tuned.host_jam, uneven=True)
    for i, (chain, body) in enumerate(pieces):  # the pieces store disjoint elements
        body = unroll_taps(body, plan.tuned)
        loops = (simd_loops(plan, chain, body) if len(chain) > 1 else
                 [Inner(chain[0].extent, body, simd=contiguous(plan, chain[0].var, body))])
        out.append(HostRegion("parallel", chain, loops, notes if i == 0 else [], nowait or i < len(pieces) - 1))
    return out
