"""Relabel pure-relabelling nodes (Reshape, Identity, ...) as aliases: no code, no copy."""

from rosenna import ops

ALIAS = "Alias"


def relabel_aliases(graph):
    for node in graph.nodes:
        op = ops.get(node.op)
        if op is not None and op.is_alias(node, graph):
            node.attrs = {"of": node.op}
            node.op = ALIAS
            node.inputs = node.inputs[:1]
            node.outputs = node.outputs[:1]
