"""The shape the MLP kernels look for: a single-precision chain of dense layers from x to y."""

import numpy as np

from rosenna import ops
from rosenna.emit.lang import C
from rosenna.loopir import Var

#: Activations every MLP kernel applies (narrow FP32, staged FP32, tile, 3xTF32 chain and wide):
#: one table for all of them. Each is rendered once per layer, with its attributes, from its op
#: module's formula (rosenna.ops.activation) into a ``__device__`` function the kernels call, so a
#: kernel never spells an activation itself. Each is finite at 0, which the kernels rely on (a
#: padded column holds act(0) and meets zero weights downstream). Swish (SiLU), Mish and HardSwish
#: come from the patterns exporters write (rosenna.passes), GELU's erf form from passes/gelu.py.
MLP_ACTIVATIONS = ("Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "Softplus", "Softsign",
                   "Gelu", "Clip", "Swish", "Mish", "HardSwish")
#: Packed weights per line of the kernel file.
VALUES_PER_LINE = 6


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


def round_up(n, m):
    return (n + m - 1) // m * m


def activation_fn(name, layer, renderer, ctype="float"):
    """``__device__ float name(float v)``: the layer's activation with its attributes (identity
    without one), rendered from the op module's formula (``ctype`` double for a double plan's
    renderer)."""
    expr = ops.get(layer.act).expr(layer.attrs, Var("v")) if layer.act else Var("v")
    return (f"__device__ __forceinline__ {ctype} {name}({ctype} v)\n{{\n"
            f"    return {renderer.expr(expr)};\n}}")


def chunks(items):
    return [items[i:i + VALUES_PER_LINE] for i in range(0, len(items), VALUES_PER_LINE)]


def float_literals(values):
    """Packed single-precision values as the body of a C array initialiser."""
    return ",\n    ".join(", ".join(row) for row in chunks(C.literals(np.asarray(values, np.float32), "single")))


def array(storage, name, values, size):
    """A 16-byte aligned float array: initialised from ``values`` (embedded weights) or, with
    ``values`` None, left for ``<name>_device_upload`` to fill."""
    if values is None:
        return f"static __device__ __align__(16) float {name}[{size}];"
    return f"static {storage} __align__(16) float {name}[{size}] = {{\n    {float_literals(values)}\n}};"


class PackedLayout:
    """``<name>_packed``, the FP32 MLP kernels' copy of the weights: per layer W input-major
    ``[K][NP]`` (NP the layer's width padded) then its bias ``[NP]``. ``offsets``: per layer
    (weights, bias, NP) in floats; ``size``: floats in all."""

    def __init__(self, layers, offsets, size):
        self.layers, self.offsets, self.size = layers, offsets, size

    @classmethod
    def dense(cls, layers, hidden_pad, out_pad):
        """Layer after layer, hidden widths padded to ``hidden_pad``, the output's to ``out_pad``."""
        offsets, off = [], 0
        for i, layer in enumerate(layers):
            npad = round_up(layer.n, out_pad if i == len(layers) - 1 else hidden_pad)
            offsets.append((off, off + layer.k * npad, npad))
            off += layer.k * npad + npad
        return cls(layers, offsets, off)

    def packed(self):
        """The packed weights (numpy); a layout that pads K (the staged kernel's) gets only the
        layer's own K rows written, the rest stays zero."""
        out = np.zeros(self.size, dtype=np.float32)
        for layer, (woff, boff, npad) in zip(self.layers, self.offsets):
            block = np.zeros((layer.k, npad), dtype=np.float32)
            block[:, :layer.n] = layer.w.T
            out[woff:woff + layer.k * npad] = block.reshape(-1)
            out[boff:boff + layer.n] = layer.b
        return out

    def host_packing(self):
        """C++ of ``<name>_device_upload`` filling ``float *packed`` (zeroed) from ``host`` (the
        weights as the file holds them: ``host[2i]`` layer i's W as [N][K], ``host[2i+1]`` its
        bias), the same packing as :meth:`packed`."""
        steps = []
        for li, (layer, (woff, boff, npad)) in enumerate(zip(self.layers, self.offsets)):
            steps.append(f"    for (int k = 0; k < {layer.k}; ++k)\n"
                         f"        for (int o = 0; o < {layer.n}; ++o)\n"
                         f"            packed[{woff} + k * {npad} + o] = host[{2 * li}][o * {layer.k} + k];\n"
                         f"    for (int o = 0; o < {layer.n}; ++o)\n"
                         f"        packed[{boff} + o] = host[{2 * li + 1}][o];")
        return "\n".join(steps)
