"""The weight layout of the FP32 warp body that the CUDA routine (emit/cuda/routine.py) and the
offload body (emit/offload_mlp.py) share. The layers come from the strategy stage's analysis
(rosenna.strategy.mlp.analysis); whether the warp body serves a chain is its decision
(rosenna.strategy.mlp.warp_fits)."""

import numpy as np


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
                         f"            {dest}[{off} + k * {cols} + o] = host[{layer.w_index}][o * {layer.k} + k];\n"
                         f"    for (int o = 0; o < {layer.n}; ++o)\n"
                         f"        {dest}[{off + 16 * kc * cols} + o] = host[{layer.b_index}][o];")
        return "\n".join(steps)
