"""Named implementations with priorities, and the recorded choice among them.

An :class:`Implementation` says whether it can run a subject (an analysis of the plan, with the
tuning): :meth:`~Implementation.fits` returns the reasons it cannot, an empty tuple when it can,
and never raises, whatever the plan. :func:`select` asks every implementation of a table and
records a :class:`Decision`: the winner (the fitting implementation of the highest priority, the
earlier in the table on a tie), every alternative that fits, and the reasons of those that do not.
The shape follows TVM's op strategies (named implementations with a priority) and IREE's kernel
configuration (decided and recorded before code generation).
"""

from dataclasses import dataclass


class Subject:
    """What the MLP tables decide on: the plan, its chain, its path ("point" or "whole"), the
    batched kernel already chosen (for :data:`TENSOR`)."""

    def __init__(self, plan, chain, path, batched=""):
        self.plan, self.chain, self.path, self.batched = plan, chain, path, batched

    @property
    def layers(self):
        return self.chain.layers


class Implementation:
    """One way of running a part of a model. Subclasses set :attr:`name`, :attr:`priority` and
    :attr:`summary`, and override :meth:`reasons`."""

    #: The name the emitters look the renderer up by, and `rosenna info` prints.
    name = ""
    #: Higher wins among those that fit.
    priority = 0
    #: One line: what it is, for `rosenna info`.
    summary = ""

    def reasons(self, subject, tuning):
        """Why ``subject`` cannot take this implementation (empty: it can). May assume nothing
        of ``subject`` beyond its type: a reason, never an exception, for any plan."""
        raise NotImplementedError

    def fits(self, subject, tuning):
        """``tuple`` of reasons it does not fit (empty: it fits)."""
        return tuple(self.reasons(subject, tuning))


@dataclass(frozen=True)
class Rejected:
    """An implementation that does not fit, and why."""
    name: str
    reasons: tuple


@dataclass(frozen=True)
class Decision:
    """The choice for one part of the model.

    ``part``: what was decided ("cuda batched kernel", "host block", ...); ``chosen``: the
    winner's name ("" when nothing fits: only tables without a fallback); ``alternatives``: the
    other implementations that fit, best first; ``rejected``: those that do not, with reasons;
    ``why``: one line saying why the winner won; ``values``: what the choice fixed besides the
    name (a block size, a memory space), as sorted ``(key, value)`` pairs."""
    part: str
    chosen: str
    alternatives: tuple = ()
    rejected: tuple = ()
    why: str = ""
    values: tuple = ()

    def value(self, key, default=None):
        return dict(self.values).get(key, default)

    def lines(self):
        """What `rosenna info` prints for this part."""
        out = [f"{self.part}: {self.chosen or 'none'}" + (f" ({self.why})" if self.why else "")]
        for key, value in self.values:
            out.append(f"    {key} = {value}")
        for name in self.alternatives:
            out.append(f"    also fits: {name}")
        for rej in self.rejected:
            out.append(f"    not {rej.name}: {'; '.join(rej.reasons)}")
        return out


def select(part, table, subject, tuning, values=()):
    """The :class:`Decision` among ``table`` (implementations) for ``subject``."""
    fitting, rejected = [], []
    for order, impl in enumerate(table):
        reasons = impl.fits(subject, tuning)
        if reasons:
            rejected.append(Rejected(impl.name, reasons))
        else:
            fitting.append((-impl.priority, order, impl))
    fitting.sort(key=lambda item: item[:2])
    if not fitting:
        return Decision(part, "", (), tuple(rejected), "no implementation fits", tuple(values))
    best = fitting[0][2]
    others = [impl for _, _, impl in fitting[1:]]
    if others:
        why = f"priority {best.priority}, the highest that fits"
        if others[0].priority == best.priority:
            why = f"priority {best.priority}, first in the table among equals"
    else:
        why = "the only one that fits"
    why = f"{best.summary}; {why}" if best.summary else why
    return Decision(part, best.name, tuple(impl.name for impl in others), tuple(rejected), why, tuple(values))
