"""New weights for generated code: the .rwt of a retrained model, without generating again.

A model retrained (or fine-tuned, or one member of an ensemble) keeps its graph and changes its
weights. The generated code needs only a new ``.rwt``, which ``<name>_init`` reads at start-up and
``<name>_reload`` / ``<name>_set_weights`` swap in between calls. The file is usable only if the
model's plan is the generated one's: the plan hash (:func:`rosenna.plan.plan_hash`: precision,
x/y sizes, the weights' names and sizes, the ops) is compared with the one the generated code
was made with, read from its ``.rwt`` header or from the provenance line of any generated source.
"""

import os
import re
import tempfile

from rosenna import abi
from rosenna.errors import UsageError
from rosenna.generate import Options, build_plan

_STAMP = re.compile(r"precision=(single|double) weights=\S+ plan=([0-9a-f]{32})")
#: Bytes of a generated file read for its provenance line.
_HEAD = 4096


def generated_plan(path):
    """``(plan hash, precision)`` of the generated code that ``path`` belongs to: its ``.rwt`` (the
    header), or a generated source (``<name>.h``, ``<name>.c``, ``<name>_model.F90``: the
    provenance line).

    Raises:
        UsageError: when ``path`` is neither, saying what to give.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD)
    except OSError as exc:
        raise UsageError(f"--for {path}: cannot read it ({exc.strerror})") from None
    if head.startswith(abi.RWT_MAGIC) and len(head) >= 56:
        fields = abi.read_rwt_header(head)
        precision = {v: k for k, v in abi.RWT_DTYPES.items()}.get(fields["dtype"])
        if precision and re.fullmatch(r"[0-9a-f]{32}", fields["hash"]):
            return fields["hash"], precision
    # the provenance line may be wrapped (Fortran's line length): join its comment lines
    text = re.sub(r"\s*\n\s*(?:!|\*|#)?\s*", " ", head.decode("ascii", "replace"))
    found = _STAMP.search(text)
    if not found:
        raise UsageError(f"--for {path}: not a .rwt weights file nor a file rosenna generated; give the generated "
                         "<name>.rwt, <name>.h or <name>_model.F90")
    return found.group(2), found.group(1)


def write(model_path, out_path, generated, dims=None, freeze=None):
    """Write the .rwt of ``model_path`` to ``out_path`` for the generated code that ``generated``
    (see :func:`generated_plan`) belongs to; returns the plan hash.

    Raises:
        UsageError: when the model's plan differs from the generated one's (nothing is written).
    """
    want, precision = generated_plan(generated)
    options = Options(precision=precision, name="weights", embed=False, dims=dict(dims or {}),
                      freeze=dict(freeze or {}))
    _, plan = build_plan(model_path, options)
    if plan.hash != want:
        raise UsageError(f"{model_path}: its graph differs from the generated code's (plan hash {plan.hash}, "
                         f"generated for {want}): weights of another structure need `rosenna generate`; "
                         "give the same --dim/--freeze as there")
    data = abi.rwt_bytes(plan)
    folder = os.path.dirname(os.path.abspath(out_path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".rosenna-weights-", dir=folder)
    except OSError as exc:
        raise UsageError(f"-o {out_path}: cannot write there ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, out_path)  # whole or not at all: a solver may be reading the old file
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UsageError(f"-o {out_path}: writing failed ({exc.strerror})") from None
    return plan.hash
