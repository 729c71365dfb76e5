"""The shape every MLP code path looks for (the CUDA/HIP kernels, the offload device body): a
chain of dense layers from x to y in one precision; and the weight layout of the FP32 warp body
that the CUDA routine (emit/cuda/routine.py) and the offload body (emit/offload_mlp.py) share."""

import numpy as np

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


#: The FP32 warp body's layers: input and hidden layers at most this wide (a lane's 8 points x
#: width / 16 columns in registers), the output layer at most WARP_OUT wide (one reduce-scatter).
#: The CUDA routine takes it with the staged kernel, whose own limits (staged.fits) are the same.
WARP_WIDTH = 128
WARP_OUT = 8


def warp_fits(layers):
    """Whether the FP32 warp body serves the chain: a hidden layer, widths within WARP_WIDTH and WARP_OUT."""
    return (len(layers) >= 2 and layers[0].k <= WARP_WIDTH and all(layer.n <= WARP_WIDTH for layer in layers[:-1])
            and layers[-1].n <= WARP_OUT)


class WarpLayout:
    """``<name>_rwarp``: per hidden layer W ``[16 KC][16 NC]`` input-major then its bias ``[16 NC]``
    (KC, NC: its input and output widths over 16, rounded up), then the output layer's W
    ``[16 KC][8]`` and bias ``[8]``. ``offsets``: per layer (float offset, KC, NC)."""

    def __init__(self, layers):
        self.layers = layers
        self.offsets, off = [], 0
        for i, layer in enumerate(layers):
            kc = (layer.k + 15) // 16
            nc = 8 if i == len(layers) - 1 else (layer.n + 15) // 16
            cols = 8 if i == len(layers) - 1 else 16 * nc
            self.offsets.append((off, kc, nc))
            off += 16 * kc * cols + cols
        self.size = off

    def packed(self):
        out = np.zeros(self.size, np.float32)
        for i, (layer, (off, kc, nc)) in enumerate(zip(self.layers, self.offsets)):
            cols = 8 if i == len(self.layers) - 1 else 16 * nc
            block = np.zeros((16 * kc, cols), np.float32)
            block[:layer.k, :layer.n] = layer.w.T
            out[off:off + block.size] = block.reshape(-1)
            out[off + block.size:off + block.size + layer.n] = layer.b
        return out

    def host_packing(self, dest="rw"):
        """C++ filling ``float *{dest}`` (zeroed) from ``host`` as :meth:`packed` does."""
        steps = []
        for i, (layer, (off, kc, nc)) in enumerate(zip(self.layers, self.offsets)):
            cols = 8 if i == len(self.layers) - 1 else 16 * nc
            steps.append(f"    for (int k = 0; k < {layer.k}; ++k)\n"
                         f"        for (int o = 0; o < {layer.n}; ++o)\n"
                         f"            {dest}[{off} + k * {cols} + o] = host[{2 * i}][o * {layer.k} + k];\n"
                         f"    for (int o = 0; o < {layer.n}; ++o)\n"
                         f"        {dest}[{off + 16 * kc * cols} + o] = host[{2 * i + 1}][o];")
        return "\n".join(steps)
