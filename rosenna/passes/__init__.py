"""The pass pipeline: small named steps in an explicit order, the IR verified after each.

Owns every rewrite of the graph between import and planning.

Set ``ROSENNA_PRINT_IR_AFTER=<pass>`` (or ``all``) to print the graph after a pass.
"""

import os
import sys

from rosenna import ir
from rosenna.passes import batchnorm, conv_pad, dft_truncate, fold, fuse, gelu, relabel, resize_split, runtime_gemm, support

PIPELINE = (
    ("fold_constants", fold.fold_constants),
    ("eliminate_dead_code", fold.eliminate_dead_code),
    ("split_resize", resize_split.split_resize),
    ("runtime_gemm_operands", runtime_gemm.runtime_gemm_operands),
    ("check_supported", support.check_supported),
    ("pad_conv_inputs", conv_pad.pad_conv_inputs),
    ("matmul_add_to_gemm", fuse.matmul_add_to_gemm),
    ("gated_activations", fuse.gated_activations),
    ("truncate_dfts", dft_truncate.truncate_dfts),
    ("canonicalize", support.canonicalize),
    ("fold_batchnorm", batchnorm.fold_batchnorm),
    ("gelu_from_erf", gelu.gelu_from_erf),
    ("fuse_activation", fuse.fuse_activation),
    ("relabel_aliases", relabel.relabel_aliases),
    ("eliminate_dead_code_final", fold.eliminate_dead_code),
)


def run(graph):
    """Run every pass in order on ``graph`` (in place) and return it."""
    show = os.environ.get("ROSENNA_PRINT_IR_AFTER", "")
    for name, step in PIPELINE:
        step(graph)
        ir.verify(graph, where=name, require_shapes=True)
        if show in (name, "all"):
            print(f"--- IR after {name}", file=sys.stderr)
            print(dump(graph), file=sys.stderr)
    return graph


def dump(graph):
    """A readable listing of the graph (for debugging)."""
    lines = [f"graph {graph.name}: inputs {graph.inputs} outputs {graph.outputs}"]
    for node in graph.nodes:
        shapes = [graph.shape_of(o) if o else None for o in node.outputs]
        lines.append(f"  {node.op:<12} {node.name}: {node.inputs} -> {node.outputs} {shapes}")
    return "\n".join(lines)
