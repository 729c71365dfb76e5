"""What the FP32 MLP kernels share: their activation functions, the packed weight layout, arrays.
The layers come from the strategy stage (rosenna.strategy.mlp.analysis)."""

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.lang import C
from rosenna.loopir import Var

#: Activations the kernels compute with a function of ``rosenna/data/rosenna_act.cuh`` instead of the
#: op's formula: the same function with fewer transcendentals. Mish: one exp where the formula has
#: exp, log and tanh (rendered as an expression it also computed exp(x) twice over).
DEVICE_FORMS = {"Mish": "rosenna_mish"}
#: Fact of the output's format, not of its speed: packed weights per line of the kernel file.
VALUES_PER_LINE = 6


def round_up(n, m):
    return (n + m - 1) // m * m


def activation_fn(name, layer, renderer, ctype="float"):
    """``__device__ float name(float v)``: the layer's pointwise expression (its fused activation's
    formula with its attributes, and any pointwise epilogue after it; identity without one:
    the strategy's analysis, rosenna.strategy.mlp.analysis), ``ctype`` double for a double plan's
    renderer, or a call of its function in :data:`DEVICE_FORMS` (:func:`activation_library`
    defines it)."""
    if layer.act in DEVICE_FORMS:
        value = f"{DEVICE_FORMS[layer.act]}(v)"
    else:
        value = renderer.expr(layer.expr if layer.expr is not None else Var("v"))
    return f"__device__ __forceinline__ {ctype} {name}({ctype} v)\n{{\n    return {value};\n}}"


def activation_library(plan):
    """``rosenna/data/rosenna_act.cuh`` for a kernel file whose plan has an activation of
    :data:`DEVICE_FORMS` (its ``__device__`` functions, before any kernel calls them), else ""."""
    return fixed.load("rosenna_act.cuh") if any(op.activation in DEVICE_FORMS for op in plan.ops) else ""


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
        weights as the file holds them: ``host[layer.w_index]`` its W as [N][K], ``host[layer.b_index]`` its
        bias), the same packing as :meth:`packed`."""
        steps = []
        for li, (layer, (woff, boff, npad)) in enumerate(zip(self.layers, self.offsets)):
            steps.append(f"    for (int k = 0; k < {layer.k}; ++k)\n"
                         f"        for (int o = 0; o < {layer.n}; ++o)\n"
                         f"            packed[{woff} + k * {npad} + o] = host[{layer.w_index}][o * {layer.k} + k];\n"
                         f"    for (int o = 0; o < {layer.n}; ++o)\n"
                         f"        packed[{boff} + o] = host[{layer.b_index}][o];")
        return "\n".join(steps)
