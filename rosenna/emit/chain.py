"""The shape every MLP code path looks for (the CUDA/HIP kernels, the offload device body): a
chain of dense layers from x to y in one precision."""

#: Activations every MLP kernel applies (narrow FP32, staged FP32, tile, 3xTF32 chain and wide):
#: one table for all of them. Each is rendered once per layer, with its attributes, from its op
#: module's formula (rosenna.ops.activation) into a ``__device__`` function the kernels call, so a
#: kernel never spells an activation itself. Each is finite at 0, which the kernels rely on (a
#: padded column holds act(0) and meets zero weights downstream). Swish (SiLU), Mish and HardSwish
#: come from the patterns exporters write (rosenna.passes), GELU's erf form from passes/gelu.py.
MLP_ACTIVATIONS = ("Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "Softplus", "Softsign",
                   "Gelu", "Clip", "Swish", "Mish", "HardSwish")


class Layer:
    """One dense layer of an MLP chain: ``y[n] = act(sum_k W[n][k] x[k] + b[n])``; ``act`` the
    activation's op name (None: linear), ``attrs`` its attributes."""

    def __init__(self, k, n, act, w, b, attrs=None):
        self.k, self.n, self.act, self.w, self.b = k, n, act, w, b
        self.attrs = attrs or {}


def mlp_layers(plan, precision="single"):
    """The layers when ``plan`` is a chain of Gemm(+activation) layers from x to y in
    ``precision``, each with a bias; ``None`` otherwise (the generic kernels serve it)."""
    if plan.precision != precision or len(plan.inputs) != 1 or len(plan.outputs) != 1:
        return None
    computed = [op for op in plan.ops if not op.alias]
    if not computed or len(plan.weights) != 2 * len(computed):
        return None
    layers, k = [], plan.nx
    for i, op in enumerate(computed):
        act = op.activation
        if op.op != "Gemm" or (act and act not in MLP_ACTIVATIONS):
            return None
        w, b = plan.weights[2 * i].array, plan.weights[2 * i + 1].array
        n = b.size
        if w.size != n * k:
            return None
        attrs = op.activation_attrs if act else {}
        layers.append(Layer(k, n, act or None, w.reshape(n, k), b, attrs))
        k = n
    return layers if k == plan.ny else None
