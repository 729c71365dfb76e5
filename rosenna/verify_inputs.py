"""The random inputs verify draws: floats uniform in an interval, integer and boolean inputs over
the values the model uses them for (:func:`input_draws`), every combination of the categorical
ones within as many cases (:func:`random_inputs`)."""

from dataclasses import dataclass

import numpy as np

from rosenna.errors import UsageError
from rosenna.ir import int_range

#: Ops that pass an integer input's values on unchanged (followed to find what the values select).
PASS_THROUGH = ("Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten")
#: ``{op: position of its index input}`` for the ops whose integer input indexes an axis of input 0.
INDEXING = {"Gather": 1, "GatherElements": 1, "GatherND": 1, "ScatterElements": 1, "ScatterND": 1}
#: Comparisons: an integer input compared with constants takes those values and their neighbours.
COMPARING = ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
#: An integer input that selects nothing rosenna can see: values in [-FALLBACK, FALLBACK].
FALLBACK = 4


@dataclass(frozen=True)
class Draw:
    """How verify draws one input's values: uniform in ``[low, high)`` (floats), or the integer
    ``categories`` each in turn, shuffled (integers and booleans); ``why`` says where they come from."""

    low: float = -1.0
    high: float = 1.0
    categories: tuple = ()
    why: str = "uniform in [-1, 1)"


def _readers(graph, name):
    """``[(node, position)]`` of every node reading ``name``, through :data:`PASS_THROUGH` ops."""
    users = graph.consumers()
    found, todo, seen = [], [name], set()
    while todo:
        value = todo.pop()
        for node in users.get(value, []):
            for position, arg in enumerate(node.inputs):
                if arg != value or (id(node), position) in seen:
                    continue
                seen.add((id(node), position))
                if node.op in PASS_THROUGH and position == 0:
                    todo.extend(o for o in node.outputs if o)
                else:
                    found.append((node, position))
    return found


def _const_values(graph, node, position):
    """The constant values ``node`` compares its input at ``position`` with, or None."""
    others = [n for k, n in enumerate(node.inputs[:2]) if k != position and n]
    if len(others) == 1 and graph.is_const(others[0]):
        return np.unique(np.asarray(graph.weights[others[0]]).reshape(-1))
    return None


def integer_draw(graph, name):
    """The :class:`Draw` for integer (or boolean) input ``name``: both truth values of a boolean;
    the valid indices of the axis a Gather/Scatter it feeds indexes (an embedding table's
    categories); the constants it is compared with and their neighbours (``regime == 1`` gets 0, 1
    and 2); else small integers."""
    dtype = np.dtype(graph.values[name].dtype)
    if dtype == np.bool_:
        return Draw(categories=(False, True), why="both truth values")
    lowest, highest = int_range(dtype)
    sizes, compared = [], set()
    for node, position in _readers(graph, name):
        if INDEXING.get(node.op) == position and node.inputs[0]:
            data_shape = graph.shape_of(node.inputs[0])
            axis = int(node.attrs.get("axis", 0)) if node.op != "GatherND" else 0
            if data_shape and -len(data_shape) <= axis < len(data_shape) and data_shape[axis] > 0:
                sizes.append((int(data_shape[axis]), f"{node.op} {node.name!r}"))
        elif node.op in COMPARING:
            values = _const_values(graph, node, position)
            if values is not None:
                compared.update(int(v) + d for v in values if np.isfinite(v) for d in (-1, 0, 1))
    if sizes:
        size, where = min(sizes)
        return Draw(categories=tuple(range(min(size, highest + 1))), why=f"the {size} indices of {where}")
    if compared:
        values = tuple(sorted(v for v in compared if lowest <= v <= highest))
        return Draw(categories=values, why="the values it is compared with and their neighbours")
    low, high = max(-FALLBACK, lowest), min(FALLBACK, highest)
    return Draw(categories=tuple(range(low, high + 1)), why=f"the integers {low} to {high}")


def input_draws(graph, ranges=None):
    """``{input name: Draw}`` for every graph input; ``ranges`` ({name: (low, high)}, from
    ``--input-range``) overrides a float input's interval or an integer input's categories."""
    ranges = ranges or {}
    unknown = sorted(set(ranges) - set(graph.inputs))
    if unknown:
        raise UsageError(f"--input-range {unknown[0]}: the model has no run-time input of that name; its inputs are "
                         f"{', '.join(graph.inputs)}")
    draws = {}
    for name in graph.inputs:
        dtype = np.dtype(graph.values[name].dtype)
        if name in ranges:
            low, high = ranges[name]
            if dtype.kind == "f":
                draws[name] = Draw(low, high, why=f"uniform in [{low:g}, {high:g}) (--input-range)")
                continue
            lowest, highest = int_range(dtype)
            first, last = max(int(np.ceil(low)), lowest), min(int(np.floor(high)), highest)
            if first > last:
                raise UsageError(f"--input-range {name}={low:g}:{high:g}: holds no {dtype} value")
            draws[name] = Draw(categories=tuple(range(first, last + 1)),
                               why=f"the integers {first} to {last} (--input-range)")
        elif dtype.kind == "f":
            draws[name] = Draw()
        else:
            draws[name] = integer_draw(graph, name)
    return draws


def random_inputs(graph, cases, seed, draws=None):
    """``cases`` samples per graph input in the model's dtype, as ``draws`` ({name: Draw}) says
    (default :func:`input_draws`): floats uniform; integer categories in turn, each input's cycle
    as long as the cycles of the categorical inputs before it together (every combination shows
    once the cases are that many), consecutive elements of a case a category apart; the cases then
    shuffled together."""
    rng = np.random.default_rng(seed)
    draws = draws or input_draws(graph)
    inputs, stride = {}, 1
    for name in graph.inputs:
        shape, draw = (cases,) + tuple(graph.shape_of(name)), draws[name]
        dtype = graph.values[name].dtype
        if draw.categories:
            count = len(draw.categories)
            order = rng.permutation(np.array(draw.categories))
            elements = int(np.prod(shape[1:], dtype=np.int64))
            index = np.arange(cases)[:, None] // stride + np.arange(elements)[None, :]
            inputs[name] = order[index % count].reshape(shape).astype(dtype)
            if stride * count <= cases:
                stride *= count
        else:
            inputs[name] = rng.uniform(draw.low, draw.high, shape).astype(dtype)
    shuffle = rng.permutation(cases)
    return {name: values[shuffle] for name, values in inputs.items()}
