"""The interface of a batched kernel kind (the table is :mod:`rosenna.emit.cuda.kinds`)."""


class Kind:
    """One batched kernel. Subclasses override what they use."""

    #: The name the kernel file's header gives it ("Batched kernel: ...").
    label = ""
    #: What the kernel file's header adds after the label.
    note = ""
    #: Whether the header starts a new line after the note.
    note_breaks_line = False
    #: The preprocessor condition its code is compiled under ("" for always).
    guard = ""
    #: Whether its kernel reads the weights in the plan's own layout (the C file's arrays).
    plan_weights = False
    #: Whether its kernel calls ``<name>_point`` (the per-point routine).
    point_fn = False

    def fits(self, choice):
        """Whether the plan (``choice.plan``, ``choice.layers``) takes this kernel."""
        raise NotImplementedError

    def library(self):
        """Its fixed device code (a file in ``rosenna/data/``), inlined in the kernel file's
        anonymous namespace after the activation functions; "" for none."""
        return ""

    def layout(self, choice):
        """Its packed copy of the weights (with ``size``, ``packed()``, ``host_packing()``), or None."""
        return None

    def kernel(self, plan, choice, acts):
        """The kernel's source (``acts``: per MLP layer the name of its activation function)."""
        return ""

    def launch(self, plan, choice):
        """``(setup, launch)``: statements of ``<name>_infer_batch`` run once before the launch
        (may be ""), and the launch."""
        raise NotImplementedError
