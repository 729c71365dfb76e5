"""LSTM, GRU and RNN: layout 0 or 1, forward, reverse or bidirectional, any activations, clip,
input_forget.

LSTM (gates i, o, f, c in ONNX's order; P the optional peepholes):

    i = sigmoid(W_i x + R_i h + P_i * C + Wb_i + Rb_i)
    f = sigmoid(W_f x + R_f h + P_f * C + Wb_f + Rb_f)
    g = tanh(W_c x + R_c h + Wb_c + Rb_c)
    C' = f * C + i * g
    o = sigmoid(W_o x + R_o h + P_o * C' + Wb_o + Rb_o)
    h' = o * tanh(C')

GRU (gates z, r, h):

    z = sigmoid(W_z x + R_z h + Wb_z + Rb_z)
    r = sigmoid(W_r x + R_r h + Wb_r + Rb_r)
    linear_before_reset=0:  n = tanh(W_h x + R_h (r * h) + Rb_h + Wb_h)
    linear_before_reset=1:  n = tanh(W_h x + r * (R_h h + Rb_h) + Wb_h)
    h' = (1 - z) * n + z * h

RNN:  h' = f(W x + R h + Wb + Rb)    (f Tanh by default)

Inputs X [seq, batch, input]; W, R and B constant; initial_h / initial_c a graph input (they
arrive in x) or a constant (a weight), zeros when absent. Outputs Y [seq, dirs, batch, hidden],
Y_h and Y_c [dirs, batch, hidden], any subset. The hidden state of step t is written straight into
Y[t] and read back from there by step t+1 (the first step reads initial_h), so ``canonicalize``
gives the node every output, the unused ones becoming scratch: an LSTM keeps its cell state in
Y_c; a GRU uses Y_h for the reset gate r of the current step (linear_before_reset=0 needs all of
r before any n) and fills it with the last h at the end. Both biases are added once, summed at
generation time, after the dot products.

Activations (f, g and for LSTM h, per direction) may be any of ONNX's recurrent activations
(Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, Elu, HardSigmoid, Affine, ScaledTanh, Softsign,
Softplus), taking ``activation_alpha``/``activation_beta`` in order with ONNX's defaults; ``clip``
bounds the input of every gate activation to [-clip, clip] (the cell's output activation h is not
clipped); LSTM ``input_forget=1`` uses 1 - i as the forget gate.

``layout=1`` (batch first: X [batch, seq, input], Y [batch, seq, dirs, hidden], states [batch,
dirs, hidden]) changes only the index arithmetic.

Limits, refused with a reason: sequence_lens (unless it is a constant equal to the sequence length
everywhere).
Deviation: Wb + Rb is summed in float64 and rounded once.
"""

import numpy as np

from rosenna.ir import Value
from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, add, mul
from rosenna.ops.base import Op, const_input, onnx_ints

_DEFAULT_ACTS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}

#: ONNX's recurrent activations: name -> (number of alphas, number of betas, their defaults)
_ACTIVATIONS = {"sigmoid": (), "tanh": (), "relu": (), "softsign": (), "softplus": (), "leakyrelu": (0.01,),
                "thresholdedrelu": (1.0,), "elu": (1.0,), "hardsigmoid": (0.2, 0.5), "affine": (1.0, 0.0),
                "scaledtanh": (1.0, 1.0)}


def _activation(name, alpha, beta):
    """The kernel expression builder of one recurrent activation with its alpha and beta."""
    from rosenna import ops

    def build(x):
        if name == "sigmoid":
            return Fn("sigmoid", (x,))
        if name == "tanh":
            return Fn("tanh", (x,))
        if name == "relu":
            return Select(x, Num(0.0), x, Num(0.0))
        if name == "thresholdedrelu":
            return Select(x, Num(alpha), x, Num(0.0))
        if name == "affine":
            return add(mul(Num(alpha), x), Num(beta))
        if name == "scaledtanh":
            return mul(Num(alpha), Fn("tanh", (mul(Num(beta), x),)))
        op = {"softsign": "Softsign", "softplus": "Softplus", "leakyrelu": "LeakyRelu", "elu": "Elu",
              "hardsigmoid": "HardSigmoid"}[name]
        return ops.REGISTRY[op].expr({"alpha": alpha, "beta": beta}, x)
    return build


class _Recurrent(Op):
    attributes = {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
                  "direction": "forward", "hidden_size": None, "layout": 0, "input_forget": 0,
                  "linear_before_reset": 0}
    gates = 0

    def _dirs(self, node):
        return 2 if self._direction(node) == "bidirectional" else 1

    def _acts(self, node, d, clipped=True):
        """The activations (f, g[, h]) of direction ``d``, each with ``clip`` applied to its input
        (unless ``clipped`` is False)."""
        names = self.attr(node, "activations")
        per = len(_DEFAULT_ACTS[self.name])
        names = [(a.decode() if isinstance(a, bytes) else a).lower() for a in names] if names is not None \
            else _DEFAULT_ACTS[self.name] * self._dirs(node)
        alphas = list(self.attr(node, "activation_alpha") or [])
        betas = list(self.attr(node, "activation_beta") or [])
        built = []
        for name in names:  # alphas and betas are taken in order by the activations that have them
            defaults = _ACTIVATIONS[name]
            alpha = (alphas.pop(0) if alphas else defaults[0]) if len(defaults) > 0 else None
            beta = (betas.pop(0) if betas else defaults[1]) if len(defaults) > 1 else None
            built.append(_activation(name, alpha, beta))
        clip = self.attr(node, "clip") if clipped else None

        def with_clip(fn):
            if clip is None:
                return fn
            c = float(clip)
            return lambda x: fn(Select(x, Num(c), Num(c), Select(Num(-c), x, Num(-c), x)))

        return [with_clip(fn) for fn in built[d * per:(d + 1) * per]]

    def _direction(self, node):
        d = self.attr(node, "direction")
        return d.decode() if isinstance(d, bytes) else d

    def _hidden(self, node, graph):
        return graph.shape_of(node.inputs[2])[-1]

    def _dims(self, node, graph):
        """``(seq, batch, inputs)`` of X, in either layout."""
        shape = graph.shape_of(node.inputs[0])
        return (shape[1], shape[0], shape[2]) if self.attr(node, "layout") else tuple(shape)

    def _shapes(self, node, graph):
        """Y, Y_h and Y_c shapes: [seq, dirs, batch, hidden] and [dirs, batch, hidden] in layout 0,
        [batch, seq, dirs, hidden] and [batch, dirs, hidden] in layout 1 (batch first)."""
        seq, batch, _ = self._dims(node, graph)
        dirs, hidden = self._dirs(node), self._hidden(node, graph)
        if self.attr(node, "layout"):
            return [(batch, seq, dirs, hidden), (batch, dirs, hidden), (batch, dirs, hidden)]
        return [(seq, dirs, batch, hidden), (dirs, batch, hidden), (dirs, batch, hidden)]

    def _x_at(self, node, graph, t, bi, k):
        seq, batch, inputs = self._dims(node, graph)
        if self.attr(node, "layout"):
            return (Idx.of(bi) * seq + t) * inputs + k
        return (Idx.of(t) * batch + bi) * inputs + k

    def _s_at(self, node, graph, d, bi, j):
        """Index of unit j of sample bi, direction d, in Y_h, Y_c, initial_h and initial_c."""
        _, batch, _ = self._dims(node, graph)
        dirs, hidden = self._dirs(node), self._hidden(node, graph)
        if self.attr(node, "layout"):
            return (Idx.of(bi) * dirs + d) * hidden + j
        return (Idx.of(d) * batch + bi) * hidden + j

    def shape(self, node, graph):
        return self._shapes(node, graph)[:len(node.outputs)]

    def check(self, node, graph):
        problems = []
        if len(graph.shape_of(node.inputs[0])) != 3:
            return ["X must have rank 3 [seq_length, batch_size, input_size]"]
        if self._direction(node) not in ("forward", "reverse", "bidirectional"):
            problems.append(f"direction={self._direction(node)!r} is not an ONNX value")
        acts = self.attr(node, "activations")
        if acts is not None:
            names = [a.decode() if isinstance(a, bytes) else a for a in acts]
            unknown = [a for a in names if a.lower() not in _ACTIVATIONS]
            if unknown or len(names) != len(_DEFAULT_ACTS[self.name]) * self._dirs(node):
                problems.append(f"activations {names}: rosenna takes {len(_DEFAULT_ACTS[self.name])} per direction "
                                f"from {', '.join(sorted(_ACTIVATIONS))}")
        for position, what in ((1, "W"), (2, "R"), (3, "B"), (7, "P")):
            if len(node.inputs) > position and node.inputs[position] and not graph.is_const(node.inputs[position]):
                problems.append(f"{what} is computed at run time; rosenna needs it constant")
        if len(node.inputs) > 4 and node.inputs[4]:
            lens = const_input(graph, node, 4)
            seq = self._dims(node, graph)[0]
            if lens is None or any(v != seq for v in onnx_ints(lens)):
                problems.append("sequence_lens is given and not the full sequence length everywhere")
        return problems

    def canonicalize(self, node, graph):
        """Sum the biases, give the node every state input and output (see the module docstring)."""
        if node.attrs.get("_canonical"):
            return
        dirs, hidden, gates = self._dirs(node), self._hidden(node, graph), self.gates
        dtype = graph.weights[node.inputs[1]].dtype
        inputs = list(node.inputs) + [""] * (8 - len(node.inputs))
        bias = const_input(graph, node, 3)
        if bias is None:
            bias = np.zeros((dirs, 2 * gates * hidden), dtype)
        bias = bias.astype(np.float64).reshape(dirs, 2, gates * hidden)
        b_name = graph.new_name(node.name + "_bias")
        if self.name == "GRU" and self.attr(node, "linear_before_reset"):
            # keep Rb_h apart: it sits inside r * (R_h h + Rb_h)
            summed = bias[:, 0] + bias[:, 1]
            summed[:, 2 * hidden:] = bias[:, 0, 2 * hidden:]
            graph.weights[b_name] = np.concatenate([summed, bias[:, 1, 2 * hidden:]], axis=1).astype(dtype)
        else:
            graph.weights[b_name] = (bias[:, 0] + bias[:, 1]).astype(dtype)
        inputs[3] = b_name
        for position in (5, 6):
            if not inputs[position] and (position == 5 or self.name == "LSTM"):
                zero = graph.new_name(node.name + ("_h0" if position == 5 else "_c0"))
                graph.weights[zero] = np.zeros(self._shapes(node, graph)[1], dtype)
                inputs[position] = zero
        node.inputs = inputs
        outputs = list(node.outputs) + [""] * (3 - len(node.outputs))
        shapes = self._shapes(node, graph)
        count = 3 if self.name == "LSTM" else 2
        for k in range(count):
            if not outputs[k]:
                outputs[k] = graph.new_name(f"{node.name}_state{k}")
                graph.values[outputs[k]] = Value(outputs[k], shapes[k], graph.values[node.inputs[0]].dtype)
        node.outputs = outputs[:count] if self.name == "GRU" or not outputs[2:] else outputs
        node.attrs["_canonical"] = True

    # -- lowering helpers --------------------------------------------------------------------------
    def _steps(self, node, graph, d):
        """Time steps of direction ``d`` as ``(first_t, later)``: the first step's time index, and
        (count, t as an Idx of the loop var, previous t) for the rest."""
        seq = self._dims(node, graph)[0]
        reverse = self._direction(node) == "reverse" or d == 1
        if not reverse:
            return 0, (seq - 1, lambda i: Idx.of(i) + 1, lambda i: Idx.of(i))
        return seq - 1, (seq - 1, lambda i: Idx.of(i) * -1 + (seq - 2), lambda i: Idx.of(i) * -1 + (seq - 1))

    def lower(self, node, graph, b):
        seq, batch, _ = self._dims(node, graph)
        dirs, hidden = self._dirs(node), self._hidden(node, graph)
        y = node.outputs[0]
        batch_first = bool(self.attr(node, "layout"))

        def y_at(t, d, bi, j):
            if batch_first:
                return ((Idx.of(bi) * seq + t) * dirs + d) * hidden + j
            return ((Idx.of(t) * dirs + d) * batch + bi) * hidden + j

        def s_at(d, bi, j):
            return self._s_at(node, graph, d, bi, j)

        for d in range(dirs):
            first, (count, t_of, prev_of) = self._steps(node, graph, d)
            h0 = node.inputs[5]

            def step(t, prev_ref):
                b.loop(batch, lambda bi: self._step(node, graph, b, d, t, bi, prev_ref, y_at, s_at))

            self._start(node, graph, b, d, batch, s_at)
            step(Idx.of(first), lambda bi, k, d=d: Ref(h0, s_at(d, bi, k)))
            if count > 0:
                b.loop(count, lambda i, d=d, t_of=t_of, prev_of=prev_of: step(
                    t_of(i), lambda bi, k: Ref(y, y_at(prev_of(i), d, bi, k))))
            last = first + (count if self._direction(node) != "reverse" and d == 0 else -count)
            self._finish(node, graph, b, d, batch, hidden, last, y_at, s_at)

    def _start(self, node, graph, b, d, batch, s_at):
        pass

    def _finish(self, node, graph, b, d, batch, hidden, last, y_at, s_at):
        yh = node.outputs[1]
        b.nest((batch, hidden), lambda idx: b.assign(Ref(yh, s_at(d, idx[0], idx[1])),
                                                     Ref(node.outputs[0], y_at(last, d, idx[0], idx[1]))))

    def _dot(self, b, accs, node, graph, d, t, bi, prev_ref, rows_of):
        """``accs[g] += W[d, rows_of(g)] . X[t, bi] + R[d, rows_of(g)] . h`` for every gate g."""
        _, batch, inputs = self._dims(node, graph)
        hidden = self._hidden(node, graph)
        w, r = node.inputs[1], node.inputs[2]
        gates = self.gates
        for acc in accs.values():
            b.assign(acc, Num(0.0))

        def over_x(k):
            xk = Ref(node.inputs[0], self._x_at(node, graph, t, bi, k))
            for g, acc in accs.items():
                b.assign(acc, mul(Ref(w, (Idx.of(rows_of(g)) + d * gates * hidden) * inputs + k), xk), accumulate=True)

        def over_h(k):
            hk = prev_ref(bi, k)
            for g, acc in accs.items():
                b.assign(acc, mul(Ref(r, (Idx.of(rows_of(g)) + d * gates * hidden) * hidden + k), hk), accumulate=True)

        b.loop(inputs, over_x)
        b.loop(hidden, over_h)


class LSTM(_Recurrent):
    name = "LSTM"
    gates = 4

    def _start(self, node, graph, b, d, batch, s_at):
        hidden = self._hidden(node, graph)
        c0, yc = node.inputs[6], node.outputs[2]
        b.nest((batch, hidden), lambda idx: b.assign(Ref(yc, s_at(d, idx[0], idx[1])), Ref(c0, s_at(d, idx[0], idx[1]))))

    def _step(self, node, graph, b, d, t, bi, prev_ref, y_at, s_at):
        hidden = self._hidden(node, graph)
        bias, peep, yc = node.inputs[3], node.inputs[7], node.outputs[2]
        accs = {g: Var(f"a{name}") for g, name in enumerate("iofc")}
        cvar, gi, gf = Var("cell"), Var("gi"), Var("gf")
        f, g, _ = self._acts(node, d)
        h = self._acts(node, d, clipped=False)[2]  # clip bounds the gates' inputs, not the cell's

        def unit(j):
            self._dot(b, accs, node, graph, d, t, bi, prev_ref, lambda g: Idx.of(j) + g * hidden)
            cref = Ref(yc, s_at(d, bi, j))

            def pre(g):
                return add(accs[g], Ref(bias, Idx.of(j) + (d * 4 + g) * hidden))

            def peephole(e, k, c):
                return add(e, mul(Ref(peep, Idx.of(j) + (d * 3 + k) * hidden), c)) if peep else e

            b.assign(gi, f(peephole(pre(0), 0, cref)))
            if self.attr(node, "input_forget"):  # the forget gate coupled to the input gate
                b.assign(gf, Bin("-", Num(1.0), gi))
            else:
                b.assign(gf, f(peephole(pre(2), 2, cref)))
            b.assign(cvar, add(mul(gf, cref), mul(gi, g(pre(3)))))
            b.assign(cref, cvar)
            out_gate = f(peephole(pre(1), 1, cvar))
            b.assign(Ref(node.outputs[0], y_at(t, d, bi, j)), mul(out_gate, h(cvar)))

        b.loop(hidden, unit)


class GRU(_Recurrent):
    name = "GRU"
    gates = 3

    def _step(self, node, graph, b, d, t, bi, prev_ref, y_at, s_at):
        hidden = self._hidden(node, graph)
        bias, rbuf = node.inputs[3], node.outputs[1]
        before = bool(self.attr(node, "linear_before_reset"))
        bias_width = 4 if before else 3

        def bias_ref(g, j):
            return Ref(bias, Idx.of(j) + (d * bias_width + g) * hidden)

        # the reset gate of every unit first
        ar = Var("ar")

        f = self._acts(node, d)[0]

        def reset(k):
            self._dot(b, {1: ar}, node, graph, d, t, bi, prev_ref, lambda g: Idx.of(k) + g * hidden)
            b.assign(Ref(rbuf, s_at(d, bi, k)), f(add(ar, bias_ref(1, k))))

        b.loop(hidden, reset)
        az, ax, ah = Var("az"), Var("ax"), Var("ah")

        b.loop(hidden, lambda j: self._unit(node, graph, b, d, t, bi, prev_ref, j, az, ax, ah, before, bias_ref,
                                            rbuf, y_at, s_at))

    def _unit(self, node, graph, b, d, t, bi, prev_ref, j, az, ax, ah, before, bias_ref, rbuf, y_at, s_at):
        _, batch, inputs = self._dims(node, graph)
        hidden = self._hidden(node, graph)
        w, r = node.inputs[1], node.inputs[2]
        row_z = Idx.of(j) + d * 3 * hidden
        row_h = Idx.of(j) + (d * 3 + 2) * hidden
        for acc in (az, ax, ah):
            b.assign(acc, Num(0.0))

        def over_x(k):
            xk = Ref(node.inputs[0], self._x_at(node, graph, t, bi, k))
            b.assign(az, mul(Ref(w, row_z * inputs + k), xk), accumulate=True)
            b.assign(ax, mul(Ref(w, row_h * inputs + k), xk), accumulate=True)

        def over_h(k):
            hk = prev_ref(bi, k)
            b.assign(az, mul(Ref(r, row_z * hidden + k), hk), accumulate=True)
            h_term = hk if before else mul(Ref(rbuf, s_at(d, bi, k)), hk)
            b.assign(ah, mul(Ref(r, row_h * hidden + k), h_term), accumulate=True)

        b.loop(inputs, over_x)
        b.loop(hidden, over_h)
        z = Var("gz")
        f, g = self._acts(node, d)
        b.assign(z, f(add(az, bias_ref(0, j))))
        if before:
            rj = Ref(rbuf, s_at(d, bi, j))
            cand = g(add(add(ax, bias_ref(2, j)), mul(rj, add(ah, bias_ref(3, j)))))
        else:
            cand = g(add(add(ax, ah), bias_ref(2, j)))
        new = add(mul(Bin("-", Num(1.0), z), cand), mul(z, prev_ref(bi, j)))
        b.assign(Ref(node.outputs[0], y_at(t, d, bi, j)), new)


class RNN(_Recurrent):
    """RNN: the one-gate recurrent cell h' = f(W x + R h + b), any direction and layout."""

    name = "RNN"
    gates = 1

    def _step(self, node, graph, b, d, t, bi, prev_ref, y_at, s_at):
        hidden = self._hidden(node, graph)
        acc = Var("ah")
        f = self._acts(node, d)[0]

        def unit(j):
            self._dot(b, {0: acc}, node, graph, d, t, bi, prev_ref, lambda g: Idx.of(j))
            b.assign(Ref(node.outputs[0], y_at(t, d, bi, j)), f(add(acc, Ref(node.inputs[3], Idx.of(j) + d * hidden))))

        b.loop(hidden, unit)
