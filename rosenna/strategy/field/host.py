"""The host form of ``<name>_infer_one`` (no offload device), decided once: the regions of
:func:`rosenna.parallel.launch_groups` in order, each parallel one transformed by
:mod:`~rosenna.strategy.field.host_loops` (unrolled and jammed over its output channels, its tap
loops unrolled, its innermost loop split into SIMD loops), and which worksharing constructs end
without a barrier. :mod:`rosenna.emit.host_field` renders the result in C and Fortran.
"""

from dataclasses import dataclass
from typing import NamedTuple

from rosenna.loopir import runtime_indexed
from rosenna.parallel import launch_groups
from rosenna.strategy.field.host_loops import Inner, contiguous, jam, simd_loops, unroll_taps


class HostRegion(NamedTuple):
    """One construct of the host form: ``kind`` ("parallel" or "serial"), its ``chain`` of outer
    loops, its ``body`` (a parallel region's: the :class:`~rosenna.strategy.field.host_loops.Inner`
    loops around its innermost variable), the op ``notes`` above it, and ``nowait`` (the next
    construct may start before every thread is done with this one)."""
    kind: str
    chain: list
    body: list
    notes: list
    nowait: bool


@dataclass(frozen=True, eq=False)
class HostRegions:
    """The regions of the host form, in order (a tuple of :class:`HostRegion`)."""
    regions: tuple

    def __iter__(self):
        return iter(self.regions)

    def __len__(self):
        return len(self.regions)


def regions(plan):
    """The :class:`HostRegions` of ``plan`` under its tuning (``host_jam``, the tap unrolling)
    and host vector width."""
    out = []
    launches = launch_groups(plan)
    for j, launch in enumerate(launches):
        for k, member in enumerate(launch.members):
            # a group's last region ends with a barrier; the team's own closing barrier ends the last
            nowait = k < len(launch.members) - 1 or j == len(launches) - 1
            chain, body = member.chain, member.body
            if member.kind != "parallel":
                out.append(HostRegion(member.kind, chain, body, member.notes, nowait))
                continue
            if runtime_indexed(body):  # a gather: its loads go where the indices say, no SIMD loop pays
                out.append(HostRegion("parallel", chain, [Inner(chain[-1].extent, body, simd=False)], member.notes,
                                      nowait))
                continue
            pieces = jam(plan, chain, body, plan.tuned.host_jam, uneven=True)
            for i, (chain, body) in enumerate(pieces):  # the pieces store disjoint elements
                body = unroll_taps(body, plan.tuned)
                loops = (simd_loops(plan, chain, body) if len(chain) > 1 else
                         [Inner(chain[0].extent, body, simd=contiguous(plan, chain[0].var, body))])
                out.append(HostRegion("parallel", chain, loops, member.notes if i == 0 else [],
                                      nowait or i < len(pieces) - 1))
    return HostRegions(tuple(out))
