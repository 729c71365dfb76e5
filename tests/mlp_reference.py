"""What the kernel tests of MLP chains share: the activations and the model in float64 (the
reference the numpy emulations of the generated kernels are held to), the test models, and a
C++ harness that runs a generated host-side packing loop on a model's weights."""

import subprocess

import numpy as np

from rosenna import zoo
from rosenna.emit.cuda import tf32

ACTS = {None: lambda v: v, "Relu": lambda v: np.maximum(v, 0.0), "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
        "Tanh": np.tanh}

#: Padding everywhere: 5 inputs, hidden 100 and 120, 3 outputs, sigmoid/tanh whose act(0) is not 0
#: in padded columns.
ODD = ([5, 100, 120, 3], ["Sigmoid", "Tanh", "Sigmoid"])


def evaluate(layers, x):
    """The chain in float64, layer by layer."""
    for layer in layers:
        x = act_of(layer)(x @ layer.w.T.astype(np.float64) + layer.b)
    return x


def act_of(layer):
    """A kernel layer's activation (op name and attributes, as the plan holds them) in float64."""
    return activation(layer.act, getattr(layer, "attrs", {}))


#: Every activation rosenna lists, as a test model spells it: (ONNX op or pattern, attributes).
#: "SiLU", "Mish", "HardSwishPattern" and "GeluErf" are the node patterns exporters write (torch's
#: legacy exporter at opset 17: x*sigmoid(x); x*tanh(softplus(x)); x*hardsigmoid(x, 1/6, 1/2);
#: (x * (erf(x / sqrt 2) + 1)) * 0.5); the rest are single ops.
ALL_ACTIVATIONS = (
    ("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 0.7}), ("Selu", {}), ("Sigmoid", {}),
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.4}), ("Tanh", {}), ("Softplus", {}), ("Softsign", {}),
    ("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("Clip", {"min": 0.0, "max": 6.0}), ("Clip", {"max": 0.5}),
    ("SiLU", {}), ("Mish", {}), ("HardSwish", {}), ("HardSwishPattern", {}), ("GeluErf", {}),
)

#: The functions, in float64 (the patterns as the fused op computes them).
_FORMULAS = {
    "Relu": lambda v, a: np.maximum(v, 0.0),
    "LeakyRelu": lambda v, a: np.where(v > 0, v, a.get("alpha", 0.01) * v),
    "Elu": lambda v, a: np.where(v > 0, v, a.get("alpha", 1.0) * (np.exp(v) - 1)),
    "Selu": lambda v, a: 1.0507009873554805 * np.where(v > 0, v, 1.6732632423543772 * (np.exp(v) - 1)),
    "Sigmoid": lambda v, a: 1.0 / (1.0 + np.exp(-v)),
    "HardSigmoid": lambda v, a: np.clip(a.get("alpha", 0.2) * v + a.get("beta", 0.5), 0, 1),
    "Tanh": lambda v, a: np.tanh(v),
    "Softplus": lambda v, a: np.logaddexp(v, 0.0),
    "Softsign": lambda v, a: v / (1 + np.abs(v)),
    "Gelu": lambda v, a: (0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))))
    if a.get("approximate") == "tanh" else 0.5 * v * (1 + _erf(v / np.sqrt(2))),
    "Clip": lambda v, a: np.clip(v, _bound(a, "min", -np.inf), _bound(a, "max", np.inf)),
    "SiLU": lambda v, a: v / (1.0 + np.exp(-v)),
    "Swish": lambda v, a: v / (1.0 + np.exp(-a.get("alpha", 1.0) * v)),
    "Mish": lambda v, a: v * np.tanh(np.logaddexp(v, 0.0)),
    "HardSwish": lambda v, a: v * np.clip(v / 6 + 0.5, 0, 1),
    "HardSwishPattern": lambda v, a: v * np.clip(v / 6 + 0.5, 0, 1),
    "GeluErf": lambda v, a: 0.5 * v * (1 + _erf(v / np.sqrt(2))),
}


def _bound(attrs, key, default):
    """A Clip bound: the model's attribute, or the plan's canonical ``_min``/``_max``."""
    value = attrs.get("_" + key, attrs.get(key))
    return default if value is None else value


def _erf(v):
    import math

    return np.vectorize(math.erf, otypes=[np.float64])(v)


def activation(name, attrs=None):
    """The float64 function of an activation (an op name or a pattern of :data:`ALL_ACTIVATIONS`)."""
    if name is None:
        return lambda v: v
    return lambda v: _FORMULAS[name](np.asarray(v, np.float64), attrs or {})


def _act_nodes(kind, attrs, x, out, tag):
    """Nodes computing activation ``kind`` of ``x`` into ``out`` (and any constants they need)."""
    from onnx import helper, numpy_helper

    def const(name, value):
        return numpy_helper.from_array(np.array(value, np.float32), f"{tag}_{name}")

    if kind == "Clip":
        inputs = [x, f"{tag}_lo" if "min" in attrs else "", f"{tag}_hi" if "max" in attrs else ""]
        inits = [const(k, attrs[b]) for k, b in (("lo", "min"), ("hi", "max")) if b in attrs]
        while inputs[-1] == "":
            inputs.pop()
        return [helper.make_node("Clip", inputs, [out], name=tag)], inits
    if kind == "SiLU":
        return [helper.make_node("Sigmoid", [x], [f"{tag}_s"], name=f"{tag}_sigmoid"),
                helper.make_node("Mul", [x, f"{tag}_s"], [out], name=f"{tag}_mul")], []
    if kind == "Mish":
        return [helper.make_node("Softplus", [x], [f"{tag}_sp"], name=f"{tag}_softplus"),
                helper.make_node("Tanh", [f"{tag}_sp"], [f"{tag}_t"], name=f"{tag}_tanh"),
                helper.make_node("Mul", [x, f"{tag}_t"], [out], name=f"{tag}_mul")], []
    if kind == "HardSwishPattern":
        return [helper.make_node("HardSigmoid", [x], [f"{tag}_h"], name=f"{tag}_hs", alpha=1.0 / 6, beta=0.5),
                helper.make_node("Mul", [x, f"{tag}_h"], [out], name=f"{tag}_mul")], []
    if kind == "GeluErf":
        return [helper.make_node("Div", [x, f"{tag}_sqrt2"], [f"{tag}_d"], name=f"{tag}_div"),
                helper.make_node("Erf", [f"{tag}_d"], [f"{tag}_e"], name=f"{tag}_erf"),
                helper.make_node("Add", [f"{tag}_e", f"{tag}_one"], [f"{tag}_a"], name=f"{tag}_add"),
                helper.make_node("Mul", [x, f"{tag}_a"], [f"{tag}_m"], name=f"{tag}_mul"),
                helper.make_node("Mul", [f"{tag}_m", f"{tag}_half"], [out], name=f"{tag}_mul2")], \
            [const("sqrt2", 1.4142135381698608), const("one", 1.0), const("half", 0.5)]
    return [helper.make_node(kind, [x], [out], name=tag, **attrs)], []


def activation_mlp(path, sizes, activations, seed=7, dtype=np.float32, name="acts"):
    """An MLP of Gemm layers, each followed by the activation (name, attrs) of ``activations``
    (None: linear), written at opset 20 (Gelu's); returns ``path``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    nodes, inits, prev = [], [], "input"
    for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((n, k)) * 1.5 / np.sqrt(k)).astype(dtype), f"fc{i}.weight"),
                  numpy_helper.from_array((0.2 * rng.standard_normal(n)).astype(dtype), f"fc{i}.bias")]
        nodes.append(helper.make_node("Gemm", [prev, f"fc{i}.weight", f"fc{i}.bias"], [f"fc{i}_out"], name=f"fc{i}",
                                      transB=1))
        prev = f"fc{i}_out"
        if activations[i]:
            kind, attrs = activations[i] if isinstance(activations[i], tuple) else (activations[i], {})
            act_nodes, act_inits = _act_nodes(kind, attrs, prev, f"act{i}_out", f"act{i}")
            if dtype == np.float64:
                act_inits = [numpy_helper.from_array(numpy_helper.to_array(t).astype(dtype), t.name) for t in act_inits]
            nodes += act_nodes
            inits += act_inits
            prev = f"act{i}_out"
    nodes.append(helper.make_node("Identity", [prev], ["output"], name="out"))
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("input", elem, ["batch", sizes[0]])],
                              [helper.make_tensor_value_info("output", elem, ["batch", sizes[-1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], producer_name="rosenna.tests")
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def custom_model(tmp_path, name, sizes, activations):
    """Path of a zoo-style MLP with the given widths and activations."""
    import onnx

    path = str(tmp_path / f"{name}.onnx")
    onnx.save(zoo.mlp(name, sizes, activations, seed=7), path)
    return path


def run_packing(tmp_path, layers, prelude, body, result, size, ctype="float"):
    """Compiles ``body`` (C++ reading ``host[i]``, the weights in the file's order) after
    ``prelude``, runs it and returns the ``size`` values (``ctype``: float or double) it leaves
    in ``result``."""
    dtype, suffix = (np.float64, "") if ctype == "double" else (np.float32, "f")
    decls, ptrs = [], []
    for i, layer in enumerate(layers):
        for j, arr in enumerate((layer.w.reshape(-1), layer.b)):
            vals = ", ".join(repr(float(v)) + suffix for v in np.asarray(arr, dtype))
            decls.append(f"static const {ctype} w{2 * i + j}[] = {{{vals}}};")
            ptrs.append(f"w{2 * i + j}")
    src = tmp_path / "pack.cpp"
    src.write_text(prelude + "#include <stdio.h>\n#include <stdlib.h>\n" + "\n".join(decls) + f"""
int main(void)
{{
    const {ctype} *host[] = {{{", ".join(ptrs)}}};
{body}
    fwrite({result}, sizeof({ctype}), {size}, stdout);
    return 0;
}}
""")
    exe = tmp_path / "pack"
    subprocess.run(["g++", "-O2", "-Wall", "-Werror", str(src), "-o", str(exe)], check=True)
    return np.frombuffer(subprocess.run([str(exe)], capture_output=True, check=True).stdout, dtype)


def mma3(a_lanes, b_lanes):
    """The three MMAs of one 3xTF32 m16n8k8 for a warp: A [32 lanes, 4] (a0..a3, held in fp32 and
    split as the kernels split it, tf32.split), B [32 lanes, 4] (big b0, big b1, small b0, small b1)
    -> C [32 lanes, 4] (c0..c3): small*big' + big*small' + big*big', summed in float64."""
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    big, small = tf32.split(np.asarray(a_lanes, np.float32))
    c = np.zeros((16, 8))
    for a_part, b_cols in ((small, (0, 1)), (big, (2, 3)), (big, (0, 1))):
        a_mat, b_mat = np.zeros((16, 8)), np.zeros((8, 8))
        a_mat[gid, tig], a_mat[gid + 8, tig] = a_part[:, 0], a_part[:, 1]
        a_mat[gid, tig + 4], a_mat[gid + 8, tig + 4] = a_part[:, 2], a_part[:, 3]
        b_mat[tig, gid] = b_lanes[:, b_cols[0]]
        b_mat[tig + 4, gid] = b_lanes[:, b_cols[1]]
        c += a_mat @ b_mat
    return np.stack([c[gid, 2 * tig], c[gid, 2 * tig + 1], c[gid + 8, 2 * tig], c[gid + 8, 2 * tig + 1]], axis=1)
