"""DFT (opsets 17 and 20): generated fixed-size mixed-radix FFTs along any axis; STFT, the same FFT
of each frame of a signal (its class docstring).

    forward  Y[k] = sum_n X[n] exp(-2 pi i k n / N)
    inverse  X[n] = 1/N sum_k Y[k] exp(+2 pi i k n / N)

Complex values are as ONNX holds them: a last axis of 2 (real, imaginary); a real input has a last
axis of 1. ``onesided`` with a forward transform of real input keeps the N/2 + 1 first frequencies
(RFFT); with an inverse transform it reads such a half spectrum, completes it by conjugate symmetry
and returns the real signal (IRFFT; the imaginary parts the symmetry leaves out are ignored, as
numpy and onnxruntime do). ``dft_length`` (a constant) zero-pads or truncates the signal; the axis
is an attribute (opset 17, default 1) or a constant input (opset 20, default -2).

How, in one of two forms per node (:meth:`DFT.direct` chooses by counted work, the tuning's
``dft_direct_percent``):

- FFT: every line along the axis is copied into a complex work buffer, transformed by a Stockham
  autosort FFT whose stages are fixed when the code is generated (N factored into radices 4, 2, 3,
  5, 7 and, as a fallback for any other prime, one direct-DFT stage of that size), then copied out
  (scaled by 1/N when inverse). All lines at once: the two work buffers hold every line
  ([position][line][re, im], the lines innermost, so neighbouring GPU threads touch neighbouring
  values), and the copy in, each stage and the copy out are each one loop nest over line x point,
  a parallel region of the whole-field path. A stage of radix p over a transform of Ns points so
  far:

      dst[a Ns p + k + t Ns] = sum_q src[a Ns + k + q N/p] T[k, t, q]
      T[k, t, q] = exp(-+2 pi i q (k + t Ns) / (Ns p))   (twiddle and radix-p butterfly in one table)

- direct: each kept output of each line is a sum over the line's inputs times a constant matrix
  (``Y[k] = sum_j X[j] M[k, j]``; IRFFT: the real part, the mirrored bins counted twice), one loop
  nest, no work buffers. It pays where few outputs are kept or few inputs are non-zero:
  rosenna.passes.dft_truncate turns the Slices after a DFT into its kept outputs (``_bins``) and
  the zero blocks and pads before one into fewer inputs (``_support``, ``dft_length``), which is
  what a Fourier neural operator's rfft2 -> low modes -> irfft2 becomes.

Both keep affine indices and constant bounds, so every emitter (per point, host batch, whole
field, GPU) renders them; the FFT's work buffers are extra outputs of the node (``canonicalize``),
which the plan places like any scratch value. Deviation: sums run in the working precision in the
orders above (onnxruntime's radix-2 or Bluestein kernels round differently, within verify's
tolerance). Refused: a dft_length or axis computed at run time, the last axis.
"""

import numpy as np

from rosenna.ir import Value
from rosenna.loopir import Bin, Idx, Num, Ref, Var, flat_index
from rosenna.ops.base import Op, const_input

#: Radices of the generated stages, tried in this order; any other prime factor is one direct stage.
RADICES = (4, 2, 3, 5, 7)


def factorize(n):
    """The stage radices of an n-point FFT: 4s, 2, 3s, 5s, 7s, then the remaining primes."""
    out = []
    for p in RADICES:
        while n % p == 0 and n > 1:
            out.append(p)
            n //= p
    q = 11
    while n > 1:
        while n % q == 0:
            out.append(q)
            n //= q
        q += 2
    return out


def stage_table(ns, p, inverse):
    """``T[k, t, q]`` of a radix-p stage after Ns points, as [Ns * p * p, 2] (cos, sin)."""
    k = np.arange(ns)[:, None, None]
    t = np.arange(p)[None, :, None]
    q = np.arange(p)[None, None, :]
    sign = 1.0 if inverse else -1.0
    angle = sign * 2.0 * np.pi * (q * (k + t * ns) % (ns * p)) / (ns * p)
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1).reshape(-1, 2)


class DFT(Op):
    name = "DFT"
    attributes = {"axis": 1, "inverse": 0, "onesided": 0}

    # -- parameters ------------------------------------------------------------------------------
    def _axis(self, node, graph, rank):
        if graph.opset >= 20:
            value = const_input(graph, node, 2) if len(node.inputs) > 2 and node.inputs[2] else np.array(-2)
            if value is None:
                return None
            axis = int(np.asarray(value).reshape(-1)[0])
        else:
            axis = int(self.attr(node, "axis"))
        return axis + rank if axis < 0 else axis

    def _length(self, node, graph, shape, axis):
        if len(node.inputs) > 1 and node.inputs[1]:
            value = const_input(graph, node, 1)
            return None if value is None else int(np.asarray(value).reshape(-1)[0])
        if self.attr(node, "onesided") and self.attr(node, "inverse"):
            return 2 * (shape[axis] - 1)
        return shape[axis]

    def _params(self, node, graph):
        shape = tuple(graph.shape_of(node.inputs[0]))
        axis = self._axis(node, graph, len(shape))
        length = None if axis is None else self._length(node, graph, shape, axis)
        return shape, axis, length

    def _kind(self, node):
        """"full", "rfft" or "irfft"."""
        if not self.attr(node, "onesided"):
            return "full"
        return "irfft" if self.attr(node, "inverse") else "rfft"

    def _bins(self, node, length):
        """(first, count): the outputs along the axis computed, of the ``length`` ONNX defines
        (all of them unless rosenna.passes.dft_truncate kept fewer)."""
        return tuple(node.attrs.get("_bins") or (0, length))

    def _inputs_used(self, node, shape, axis, n):
        """The points of each input line that enter the sums: the signal up to N (a longer one is
        truncated), for IRFFT the given half spectrum up to N/2 + 1."""
        if self._kind(node) == "irfft":
            return min(shape[axis], n // 2 + 1)
        return min(shape[axis], n)

    def _support(self, node, shape, axis, n):
        """[(first, count)]: the ranges of input positions along the axis that may hold non-zero
        values and enter the sums (all the used ones unless rosenna.passes.dft_truncate found
        zero blocks in a Concat before the node)."""
        used = self._inputs_used(node, shape, axis, n)
        ranges = []
        for first, count in node.attrs.get("_support") or [(0, used)]:
            count = min(first + count, used) - first
            if count > 0:
                ranges.append((first, count))
        return ranges

    def direct(self, node, graph):
        """Whether the node is computed as a direct sum (a dense complex matrix times each line)
        rather than by the FFT's stages: when its outputs kept x inputs used per line is at most
        ``graph.dft_direct_percent`` percent of the stages' work (N times the sum of the radices).
        A truncated DFT (the low modes of a Fourier layer, 12 of 64) then costs what its FFT does
        or less, in one loop nest, with no work buffers."""
        shape, axis, n = self._params(node, graph)
        kept = self._bins(node, self._full_count(node, n))[1]
        stages = n * sum(factorize(n))
        used = sum(count for _, count in self._support(node, shape, axis, n))
        return 100 * kept * used <= graph.dft_direct_percent * stages

    def form(self, node, graph):
        """``direct`` or ``FFT`` and its radices (``FFT 4x4x4``), as canonicalize chose: the plan
        records it in the op's label (rosenna info, the comment over the node's loops)."""
        if "_matrix" in node.attrs:
            return "direct"
        if "_tables" not in node.attrs:
            return ""
        return " ".join(["FFT"] + ["x".join(str(p) for p in factorize(self._params(node, graph)[2]))][:len(node.attrs["_tables"])])

    def _full_count(self, node, n):
        return n // 2 + 1 if self._kind(node) == "rfft" else n

    # -- hooks -----------------------------------------------------------------------------------
    def shape(self, node, graph):
        shape, axis, length = self._params(node, graph)
        out = list(shape)
        kind = self._kind(node)
        out[axis] = self._bins(node, self._full_count(node, length))[1]
        out[-1] = 1 if kind == "irfft" else 2
        return [tuple(out)] + [(self._work(shape, axis, length),)] * (len(node.outputs) - 1)

    def check(self, node, graph):
        shape, axis, length = self._params(node, graph)
        if axis is None:
            return ["the axis is computed at run time; rosenna needs it constant"]
        if length is None:
            return ["dft_length is computed at run time; rosenna needs it constant"]
        if not 0 <= axis <= len(shape) - 2:
            return [f"axis {axis} is not a signal axis of an input of rank {len(shape)}"]
        if shape[-1] not in (1, 2):
            return [f"the last axis has {shape[-1]} values; ONNX holds real values as 1, complex as 2"]
        if length < 1:
            return [f"dft_length {length} is not positive"]
        kind = self._kind(node)
        if kind == "rfft" and shape[-1] != 1:
            return ["a one-sided forward DFT takes real input (last axis 1)"]
        if kind == "irfft" and shape[-1] != 2:
            return ["a one-sided inverse DFT takes complex input (last axis 2)"]
        return []

    def shape_errors(self, node, graph):
        return []

    @staticmethod
    def _work(shape, axis, length):
        """Values in one work buffer: every line's N complex points."""
        return 2 * length * int(np.prod([d for i, d in enumerate(shape[:-1]) if i != axis]))

    def canonicalize(self, node, graph):
        """The direct form's matrix (:meth:`direct`), or the FFT's stage tables and two work
        buffers of every line's N complex points, as extra outputs the plan places like scratch
        values."""
        if len(node.outputs) > 1 or "_matrix" in node.attrs:
            return
        shape, axis, length = self._params(node, graph)
        node.inputs.extend([""] * (3 - len(node.inputs)))  # the tables follow the 3 ONNX inputs
        if self.direct(node, graph):
            name = graph.new_name(f"{node.name}_matrix")
            graph.weights[name] = self._matrix(node, shape, axis, length)
            node.inputs.append(name)
            node.attrs["_matrix"] = name
            return
        for tag in ("a", "b"):
            name = graph.new_name(f"{node.outputs[0]}_fft_{tag}")
            graph.values[name] = Value(name, (self._work(shape, axis, length),), graph.dtype)
            node.outputs.append(name)
        node.attrs["_tables"] = {}
        for s, (ns, p) in enumerate(self._stages(length)):
            name = graph.new_name(f"{node.name}_stage{s}")
            graph.weights[name] = stage_table(ns, p, bool(self.attr(node, "inverse")))
            node.inputs.append(name)
            node.attrs["_tables"][s] = name

    def _matrix(self, node, shape, axis, n):
        """The direct form's [outputs kept, inputs used, 2] matrix (cos, sin), the inverse's 1/N
        folded in. IRFFT: each output a real sum over the half spectrum, X[0] and the Nyquist bin
        once and every mirrored bin twice, only the real part of the product taken (so the
        imaginary parts of X[0] and X[N/2] drop out, as the FFT form's do)."""
        first, count = self._bins(node, self._full_count(node, n))
        outputs = np.arange(first, first + count)[:, None]
        inputs = np.concatenate([np.arange(a, a + c) for a, c in self._support(node, shape, axis, n)])[None, :]
        angle = 2.0 * np.pi * (outputs * inputs % n) / n
        if self._kind(node) == "irfft":
            mirror = min(self._inputs_used(node, shape, axis, n), (n + 1) // 2) - 1
            weight = np.where((inputs >= 1) & (inputs <= mirror), 2.0, 1.0) / n
            return np.stack([weight * np.cos(angle), -weight * np.sin(angle)], axis=-1).reshape(-1, 2)
        scale = 1.0 / n if self.attr(node, "inverse") else 1.0
        sign = 1.0 if self.attr(node, "inverse") else -1.0
        return np.stack([scale * np.cos(angle), sign * scale * np.sin(angle)], axis=-1).reshape(-1, 2)

    @staticmethod
    def _stages(length):
        stages, ns = [], 1
        for p in factorize(length):
            stages.append((ns, p))
            ns *= p
        return stages

    # -- lowering --------------------------------------------------------------------------------
    def lower(self, node, graph, b):
        shape, axis, n = self._params(node, graph)
        out_shape = self.shape(node, graph)[0]
        kind = self._kind(node)
        x, y = node.inputs[0], node.outputs[0]
        work = node.outputs[1:3]
        complex_in = shape[-1] == 2
        before, after = list(shape[:axis]), list(shape[axis + 1:-1])
        lines = before + after
        length = shape[axis]

        def along(count, body):
            """Every line's positions 0..count-1 in the order of x's and y's memory (the axes
            before the signal axis, the position, the axes after it): ``body(line, position)``."""
            def visit(idx):
                body(idx[:len(before)] + idx[len(before) + 1:], idx[len(before)])
            b.nest(before + [count] + after, visit)

        def signal(src_shape, idx, position, part):
            return flat_index(idx[:len(before)] + [position] + idx[len(before):] + [part], src_shape)

        first, count = self._bins(node, self._full_count(node, n))
        if "_matrix" in node.attrs:
            self._lower_direct(b, node, along, signal, shape, out_shape, count,
                               self._support(node, shape, axis, n), complex_in)
            return
        buf = work[0]

        def put(idx, position, part, value):
            b.assign(Ref(buf, slot(idx, lines, position, part)), value)

        # 1. the lines into the work buffer, complex, zero-padded or truncated to n points; each
        # range of positions one nest (the ranges are disjoint, so they run together)
        used = min(length, n)
        if kind == "irfft":
            half = min(length, n // 2 + 1)
            mirror = min(half, (n + 1) // 2) - 1  # k = 1 .. mirror: X[n - k] = conj X[k]
            along(half, lambda idx, k: [put(idx, k, part, Ref(x, signal(shape, idx, k, part))) for part in (0, 1)])
            if n - half - mirror > 0:
                along(n - half - mirror, lambda idx, k: [put(idx, Idx.of(k) + half, part, Num(0.0)) for part in (0, 1)])
            if mirror > 0:
                def conjugate(idx, k):
                    put(idx, Idx.of(k) * -1 + n - 1, 0, Ref(x, signal(shape, idx, Idx.of(k) + 1, 0)))
                    put(idx, Idx.of(k) * -1 + n - 1, 1, Bin("-", Num(0.0), Ref(x, signal(shape, idx, Idx.of(k) + 1, 1))))
                along(mirror, conjugate)
        else:
            along(used, lambda idx, k: [put(idx, k, part, Ref(x, signal(shape, idx, k, part)) if part == 0 or complex_in
                                        else Num(0.0)) for part in (0, 1)])
            if n > used:
                along(n - used, lambda idx, k: [put(idx, Idx.of(k) + used, part, Num(0.0)) for part in (0, 1)])
        # 2. the stages, ping-pong between the two work buffers, every line at once
        result = run_stages(b, work, node.attrs["_tables"], n, lines)
        # 3. out, scaled by 1/N when inverse
        scale = 1.0 / n if self.attr(node, "inverse") else 1.0

        def scaled(e):
            return e if scale == 1.0 else Bin("*", e, Num(scale))

        parts = (0,) if kind == "irfft" else (0, 1)
        along(count, lambda idx, k: [b.assign(Ref(y, signal(out_shape, idx, k, part)),
                                              scaled(Ref(result, slot(idx, lines, Idx.of(k) + first, part))))
                                     for part in parts])

    def _lower_direct(self, b, node, along, signal, shape, out_shape, count, support, complex_in):
        """Each kept output of each line one iteration of one loop nest (a parallel region), the sum
        over the line's inputs in ``support`` (one loop per range) inside it:
        Y[k] = sum_j X[j] M[k, j] (IRFFT: the real part)."""
        x, y, matrix = node.inputs[0], node.outputs[0], node.attrs["_matrix"]
        used = sum(width for _, width in support)
        real_out = self._kind(node) == "irfft"
        re, im = Var("fre"), Var("fim")

        def output(idx, k):
            b.assign(re, Num(0.0))
            if not real_out:
                b.assign(im, Num(0.0))

            def term(j, first, column):
                xr = Ref(x, signal(shape, idx, Idx.of(j) + first, 0))
                xi = Ref(x, signal(shape, idx, Idx.of(j) + first, 1)) if complex_in else None
                row = Idx.of(k) * used + Idx.of(j) + column
                cr, ci = Ref(matrix, row * 2), Ref(matrix, row * 2 + 1)
                if real_out:  # Re(X M) = Xr Mr - Xi Mi, with Mi's sign folded into the matrix
                    b.assign(re, Bin("+", Bin("*", xr, cr), Bin("*", xi, ci)), accumulate=True)
                elif xi is None:
                    b.assign(re, Bin("*", xr, cr), accumulate=True)
                    b.assign(im, Bin("*", xr, ci), accumulate=True)
                else:
                    b.assign(re, Bin("-", Bin("*", xr, cr), Bin("*", xi, ci)), accumulate=True)
                    b.assign(im, Bin("+", Bin("*", xr, ci), Bin("*", xi, cr)), accumulate=True)

            column = 0
            for first, width in support:
                b.loop(width, lambda j, first=first, column=column: term(j, first, column))
                column += width
            b.assign(Ref(y, signal(out_shape, idx, k, 0)), re)
            if not real_out:
                b.assign(Ref(y, signal(out_shape, idx, k, 1)), im)

        along(count, output)


def slot(line, lines, position, part):
    """Where part (0 real, 1 imaginary) of point ``position`` of line ``line`` (its indices over
    the extents ``lines``) lies in a work buffer: [position][line][part], the lines innermost, so
    neighbouring GPU threads (neighbouring lines) touch neighbouring values in every stage."""
    count = int(np.prod(lines)) if lines else 1
    return (Idx.of(position) * count + flat_index(line, lines)) * 2 + part


def run_stages(b, work, tables, n, lines):
    """The FFT stages of n points over every line of ``lines`` (extents), from ``work[0]``,
    ping-ponging between the two work buffers; returns the buffer that holds the result."""
    src = 0
    for s, (ns, p) in enumerate(DFT._stages(n)):
        stage(b, work[src], work[1 - src], tables[s], n, ns, p, lines)
        src = 1 - src
    return work[src]


def stage(b, src, dst, table, n, ns, p, lines):
    """One Stockham stage of radix p after Ns points (module docstring), on every line at once:
    one loop nest over (a, t, k, line), each output point of each line an iteration (a parallel
    region), the radix-p sum inside it."""
    re, im = Var("fre"), Var("fim")
    stride = n // p

    def output(idx):
        a, t, k, line = idx[0], idx[1], idx[2], idx[3:]
        b.assign(re, Num(0.0))
        b.assign(im, Num(0.0))

        def term(q):
            where = Idx.of(a) * ns + Idx.of(k) + Idx.of(q) * stride
            sr, si = Ref(src, slot(line, lines, where, 0)), Ref(src, slot(line, lines, where, 1))
            row = (Idx.of(k) * p + Idx.of(t)) * p + Idx.of(q)
            cr, ci = Ref(table, row * 2), Ref(table, row * 2 + 1)
            b.assign(re, Bin("-", Bin("*", sr, cr), Bin("*", si, ci)), accumulate=True)
            b.assign(im, Bin("+", Bin("*", sr, ci), Bin("*", si, cr)), accumulate=True)

        b.loop(p, term)
        out = Idx.of(a) * (ns * p) + Idx.of(k) + Idx.of(t) * ns
        b.assign(Ref(dst, slot(line, lines, out, 0)), re)
        b.assign(Ref(dst, slot(line, lines, out, 1)), im)

    b.nest([n // (ns * p), p, ns] + list(lines), output)


class STFT(Op):
    """STFT (opset 17): the DFT of every frame of a signal, each frame multiplied by a window.

        Y[b, f, k] = sum_n X[b, f step + n] w[n] exp(-2 pi i k n / L),   n < L, k < L (or L/2 + 1)

    X is [batch, length, 1] (real) or [batch, length, 2] (complex); ``frame_step`` a constant;
    L the length of the ``window`` input (constant or computed at run time; absent: 1 everywhere)
    or the constant ``frame_length``; frames = (length - L) / step + 1; ``onesided`` (default 1,
    real signal only) keeps the L/2 + 1 first frequencies. Every frame of every signal is a line of
    :class:`DFT`'s FFT form (same tables, two work buffers holding all of them, placed by the plan
    as scratch)."""

    name = "STFT"
    attributes = {"onesided": 1}

    def _scalar(self, graph, node, position):
        value = const_input(graph, node, position)
        return None if value is None else int(np.asarray(value).reshape(-1)[0])

    def _params(self, node, graph):
        """(signal shape, step, L, frames, bins); step or L None when computed at run time."""
        shape = tuple(graph.shape_of(node.inputs[0]))
        step = self._scalar(graph, node, 1)
        has_window = len(node.inputs) > 2 and bool(node.inputs[2])
        length = graph.shape_of(node.inputs[2])[0] if has_window else self._scalar(graph, node, 3)
        if step is None or length is None or step < 1 or not 1 <= length <= shape[1]:
            return shape, step, length, 0, 0
        bins = length // 2 + 1 if self.attr(node, "onesided") else length
        return shape, step, length, (shape[1] - length) // step + 1, bins

    def shape(self, node, graph):
        shape, _, length, frames, bins = self._params(node, graph)
        return [(shape[0], frames, bins, 2)] + [(2 * length * shape[0] * frames,)] * (len(node.outputs) - 1)

    def check(self, node, graph):
        shape, step, length, _, _ = self._params(node, graph)
        if step is None:
            return ["frame_step is computed at run time; rosenna needs it constant"]
        if length is None:
            return ["frame_length is computed at run time and there is no window; rosenna needs it constant"]
        problems = []
        if len(shape) != 3 or shape[-1] not in (1, 2):
            problems.append(f"the signal has shape {shape}; STFT takes [batch, length, 1 or 2]")
        elif self.attr(node, "onesided") and shape[-1] == 2:
            problems.append("onesided=1 takes a real signal (last axis 1)")
        if step < 1 or not 1 <= length <= shape[1]:
            problems.append(f"frame_step {step} and frame length {length} do not frame a signal of length {shape[1]}")
        given = self._scalar(graph, node, 3) if len(node.inputs) > 3 and node.inputs[3] else None
        if given is not None and given != length:
            problems.append(f"frame_length {given} differs from the window's length {length}")
        return problems

    def canonicalize(self, node, graph):
        """The two work buffers and the stage tables of :class:`DFT`, for the frame length."""
        if len(node.outputs) > 1:
            return
        shape, _, length, frames, _ = self._params(node, graph)
        for tag in ("a", "b"):
            name = graph.new_name(f"{node.outputs[0]}_fft_{tag}")
            graph.values[name] = Value(name, (2 * length * shape[0] * frames,), graph.dtype)
            node.outputs.append(name)
        node.attrs["_tables"] = {}
        node.inputs.extend([""] * (4 - len(node.inputs)))  # the tables follow the 4 ONNX inputs
        for s, (ns, p) in enumerate(DFT._stages(length)):
            name = graph.new_name(f"{node.name}_stage{s}")
            graph.weights[name] = stage_table(ns, p, False)
            node.inputs.append(name)
            node.attrs["_tables"][s] = name

    def lower(self, node, graph, b):
        shape, step, length, frames, bins = self._params(node, graph)
        x, y, work = node.inputs[0], node.outputs[0], node.outputs[1:3]
        window = node.inputs[2] if node.inputs[2] else None
        out_shape = (shape[0], frames, bins, 2)
        lines = (shape[0], frames)  # every frame of every signal one line of the work buffers

        def load(idx):
            batch, f, n = idx
            for part in range(2):
                if part == 1 and shape[-1] == 1:
                    value = Num(0.0)
                else:
                    value = Ref(x, flat_index([batch, Idx.of(f) * step + n, part], shape))
                    if window is not None:
                        value = Bin("*", value, Ref(window, Idx.of(n)))
                b.assign(Ref(work[0], slot([batch, f], lines, n, part)), value)

        b.nest(lines + (length,), load)
        result = run_stages(b, work, node.attrs["_tables"], length, lines)

        def store(idx):
            batch, f, k = idx
            for part in range(2):
                b.assign(Ref(y, flat_index([batch, f, k, part], out_shape)), Ref(result, slot([batch, f], lines, k, part)))

        b.nest(lines + (bins,), store)
