"""What the kernel tests of MLP chains share: the activations and the model in float64 (the
reference the numpy emulations of the generated kernels are held to), the test models, and a
C++ harness that runs a generated host-side packing loop on a model's weights."""

import subprocess

import numpy as np

from rosenna import zoo

ACTS = {None: lambda v: v, "Relu": lambda v: np.maximum(v, 0.0), "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
        "Tanh": np.tanh}

#: Padding everywhere: 5 inputs, hidden 100 and 120, 3 outputs, sigmoid/tanh whose act(0) is not 0
#: in padded columns.
ODD = ([5, 100, 120, 3], ["Sigmoid", "Tanh", "Sigmoid"])


def evaluate(layers, x):
    """The chain in float64, layer by layer."""
    for layer in layers:
        x = ACTS[layer.act](x @ layer.w.T.astype(np.float64) + layer.b)
    return x


def custom_model(tmp_path, name, sizes, activations):
    """Path of a zoo-style MLP with the given widths and activations."""
    import onnx

    path = str(tmp_path / f"{name}.onnx")
    onnx.save(zoo.mlp(name, sizes, activations, seed=7), path)
    return path


def run_packing(tmp_path, layers, prelude, body, result, size):
    """Compiles ``body`` (C++ reading ``host[i]``, the weights in the file's order) after
    ``prelude``, runs it and returns the ``size`` floats it leaves in ``result``."""
    decls, ptrs = [], []
    for i, layer in enumerate(layers):
        for j, arr in enumerate((layer.w.reshape(-1), layer.b)):
            vals = ", ".join(repr(float(v)) + "f" for v in np.asarray(arr, np.float32))
            decls.append(f"static const float w{2 * i + j}[] = {{{vals}}};")
            ptrs.append(f"w{2 * i + j}")
    src = tmp_path / "pack.cpp"
    src.write_text(prelude + "#include <stdio.h>\n#include <stdlib.h>\n" + "\n".join(decls) + f"""
int main(void)
{{
    const float *host[] = {{{", ".join(ptrs)}}};
{body}
    fwrite({result}, sizeof(float), {size}, stdout);
    return 0;
}}
""")
    exe = tmp_path / "pack"
    subprocess.run(["g++", "-O2", "-Wall", "-Werror", str(src), "-o", str(exe)], check=True)
    return np.frombuffer(subprocess.run([str(exe)], capture_output=True, check=True).stdout, np.float32)
