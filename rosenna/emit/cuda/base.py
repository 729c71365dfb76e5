"""The interface of a batched kernel kind (the table is :mod:`rosenna.emit.cuda.kinds`)."""

from rosenna.emit.cuda import copies


class Kind:
    """One batched kernel. Subclasses override what they use."""

    #: The name the kernel file's header gives it ("Batched kernel: ...").
    label = ""
    #: What the kernel file's header adds after the label.
    note = ""
    #: The preprocessor condition its code is compiled under ("" for always).
    guard = ""
    #: Whether its kernel reads the weights in the plan's own layout (the C file's arrays).
    plan_weights = False
    #: Whether its kernel calls ``<name>_point`` (the per-point routine).
    point_fn = False

    def library(self, choice):
        """Its fixed device code (a file in ``rosenna/data/``), inlined in the kernel file's
        anonymous namespace after the activation functions; "" for none."""
        return ""

    def layout(self, choice):
        """Its packed copy of the weights (with ``size``, ``packed()``, ``host_packing()``), or None."""
        return None

    def kernel(self, plan, choice, acts):
        """The kernel's source (``acts``: per MLP layer the name of its activation function)."""
        return ""

    def own_activations(self, plan, choice):
        """Per MLP layer whether the kernel computes its activation with a function of its own
        instead of ``act<i>`` (which then is not written where no other kernel calls it)."""
        return [False] * len(choice.layers)

    def arrays(self, plan, choice):
        """A tensor-core kind's packed copy in the kernel file (``<name>_tc_packed``), under its
        guard: 3xTF32 B fragments (floats) unless the kind says otherwise."""
        return (f"{self.guard}\n/* The tensor-core {self.copy}'s copy: 3xTF32 B fragments per layer, then the "
                "biases (rosenna/emit/cuda/tf32.py). */\n"
                + copies.copy(plan, choice, "__device__ const", f"{plan.name}_tc_packed", choice.tensor_layout, "tc")
                + "\n#endif")

    def upload_helper(self, code):
        """Host code the packing ``code`` of ``<name>_device_upload`` needs (for 3xTF32: the TF32 rounding)."""
        from rosenna.emit.cuda import tf32
        return self.guard + "\n" + tf32.host_tf32(code) + "#endif\n"

    #: The element type of a tensor-core kind's copy.
    ctype = "float"

    def upload(self, plan, choice):
        """The lines of ``<name>_device_upload`` that pack a tensor-core kind's copy and copy it."""
        size, t = choice.tensor_layout.size, self.ctype
        return (f"{self.guard}\n"
                f"    {t} *tc = ({t} *)calloc({size}, sizeof({t}));\n"
                f"    if (tc == NULL)\n        return ROSENNA_STATUS_DEVICE;\n"
                f"{choice.tensor_layout.host_packing()}\n"
                f"    const int tc_failed = cudaMemcpyToSymbol({plan.name}_tc_packed, tc, sizeof({t}) * {size}, 0, "
                f"cudaMemcpyHostToDevice) != cudaSuccess;\n"
                f"    free(tc);\n"
                f"    if (tc_failed)\n        return ROSENNA_STATUS_DEVICE;\n"
                f"#endif\n")

    def launch(self, plan, choice):
        """``(setup, launch)``: statements of ``<name>_infer_batch`` run once before the launch
        (may be ""), and the launch."""
        raise NotImplementedError
