"""The thresholds that decide where weights live, each defined once: here the embed threshold, and
the defaults of the tuning's storage thresholds under their old names.

Every threshold and switch that decides speed is a field of :class:`rosenna.strategy.tuning.Tuning`
(documented there with where its default was measured), set per GPU by a toolchain profile's
``tuning:`` section or by ``--tune KEY=VALUE``. Configuration (``rosenna.toolchain``) and code both
import from here and from that module, which import nothing of the code they configure.
"""

from rosenna.strategy.tuning import Tuning

#: Default of the toolchain profile's ``embed_threshold``: parameters above which weights are
#: file-loaded rather than embedded (override with
#: ``--embed-weights`` / ``--no-embed``, or a toolchain profile's ``embed_threshold``). Not a speed
#: question: a source file of a million literals is what compilers still take in seconds.
EMBED_THRESHOLD = 1_000_000

#: The tuning's defaults a toolchain profile's ``thresholds`` section predates (its
#: ``constant_limit_bytes`` sets ``Tuning.constant_limit``) and :attr:`rosenna.plan.Plan.path` uses.
CONSTANT_LIMIT = Tuning().constant_limit
WHOLE_THRESHOLD = Tuning().whole_threshold

# Budgets: work a small file may ask for. A 187-byte model (ConstantOfShape [20000, 20000] then
# ReduceSum) once took 11 s and 1.6 GB to fold; each budget is refused in one line naming the op,
# the budget and the option that raises it (docs/security.md).
#: Budget: elements of one output of a folded node (``--max-fold-elements``): 2^24, 64 MiB of float32.
MAX_FOLD_ELEMENTS = 1 << 24
#: Budget: bytes of one generated source file (64 MiB of weights embedded as text are about 12 MiB).
MAX_SOURCE_BYTES = 16 * 1024 * 1024
#: Budget: loop nests of one op's code (``--max-op-nests``). The conformance cases need at most 25 (a
#: padded pool's border regions); a Resize is split per axis, so its nests are its runs on one axis.
MAX_OP_NESTS = 1024
