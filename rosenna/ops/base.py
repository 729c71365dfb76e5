"""What an op is: attributes with defaults, a shape rule, numpy evaluation, checks and lowering.

Every ONNX op rosenna knows is one subclass of :class:`Op`, defined once in one module of this
package and registered by one line in :mod:`rosenna.ops`. An op may be:

- lowered: ``lower`` writes its loops into a :class:`rosenna.loopir.Builder`;
- an alias: ``is_alias`` says it only relabels its input (Reshape, Identity, ...): no code, no copy;
- fold-only: it has ``evaluate`` but no lowering (Shape, ConstantOfShape, ...): constant folding
  must remove it, or the model is refused with the unsupported-op error.
"""

import numpy as np

from rosenna.loopir import Ref, flat_index


class Op:
    """Base class. Subclasses set ``name`` and ``attributes`` and override what they support."""

    name = ""
    domain = ""
    #: attribute name -> default (``REQUIRED`` when the attribute must be present)
    attributes = {}

    # -- attributes ------------------------------------------------------------------------------
    def attr(self, node, key):
        if key in node.attrs:
            return node.attrs[key]
        default = self.attributes.get(key, REQUIRED)
        if default is REQUIRED:
            raise KeyError(f"{self.name} node {node.name!r} lacks attribute {key!r}")
        return default

    # -- hooks -----------------------------------------------------------------------------------
    def shape(self, node, graph):
        """The output shapes, as a list of tuples. Default: the shape of the first input."""
        return [graph.shape_of(node.inputs[0])]

    def shape_errors(self, node, graph):
        """How the node's input shapes break the op's ONNX rule (an empty list when they fit).

        Asked for every node that is not folded away, before ``shape``: a model that breaks a rule
        is invalid (onnxruntime refuses it at load), and code generated from it would index out of
        bounds. ONNX's strict shape inference checks the same rules where it knows the shapes; this
        covers shapes only rosenna's folding makes static.
        """
        return []

    def evaluate(self, node, inputs):
        """numpy evaluation for constant folding; ``None`` when the op cannot be folded here."""
        return None

    def is_alias(self, node, graph):
        """True when the output is the input relabelled: same elements in the same order."""
        return False

    def canonicalize(self, node, graph):
        """Rewrite the node into the form ``lower`` expects (e.g. pre-transposed weights)."""

    def check(self, node, graph):
        """The reasons this node cannot be lowered (an empty list when it can)."""
        if self.lowerable or self.is_alias(node, graph):
            return []
        return ["no lowering: rosenna only folds it away when its inputs are constant"]

    @property
    def lowerable(self):
        return type(self).lower is not Op.lower

    def lower(self, node, graph, b):
        """Append the node's loops to the builder ``b``."""
        raise NotImplementedError(self.name)


REQUIRED = object()


def const_input(graph, node, position):
    """The constant array at input ``position``, or ``None`` when absent or computed at run time."""
    if position >= len(node.inputs) or not node.inputs[position]:
        return None
    return graph.weights.get(node.inputs[position])


def copy_lowering(b, src, dst, size):
    """``dst[i] = src[i]`` for the ``size`` elements: what an alias becomes when it must copy."""
    b.loop(size, lambda i: b.assign(Ref(dst, flat_index([i], (size,))), Ref(src, flat_index([i], (size,)))))


def broadcast_errors(shapes):
    """ONNX multidirectional broadcasting: [] when ``shapes`` broadcast, else the reason."""
    try:
        np.broadcast_shapes(*(tuple(s) for s in shapes))
    except ValueError:
        return [f"input shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast"]
    return []


def onnx_ints(values):
    return [int(v) for v in np.asarray(values).reshape(-1)]
