"""`rosenna info`: what a model becomes: x/y slices, ops after the passes, sizes, and the strategy
chosen for each part (the alternatives that fit, why the winner won) under the tuning."""

from rosenna import ops
from rosenna.commands.generate import add_model_options, options_from
from rosenna.errors import UsageError
from rosenna.generate import build_plan, decide, target_arch
from rosenna.quoting import terminal_text
from rosenna.strategy import Tuning


def register(subparsers):
    p = subparsers.add_parser("info", help="show a model's layout, ops and sizes",
                              description="Show the x/y slices, the ops after the passes, the parameter "
                                          "count, embedded or file-loaded, and the per-point scratch bytes.")
    add_model_options(p)
    p.add_argument("--ops", action="store_true", help="list the supported ops and exit (MODEL may be omitted)")
    p.add_argument("--tuning", action="store_true",
                   help="list the tuning keys with their values for the profile (and --tune) and exit (MODEL may be omitted)")
    p.set_defaults(func=run)
    p._positionals._group_actions[0].nargs = "?"


def describe(plan):
    def slices(items):
        return " ".join(f"{s.name}[{s.offset}:{s.offset + s.size}]" for s in items)

    lines = [
        f"model: {plan.name}  precision: {plan.low_precision or plan.precision}",
        "inputs:",
        *(f"  {s.name}  shape {list(s.shape)}  x[{s.offset}:{s.offset + s.size}]" for s in plan.inputs),
        "outputs:",
        *(f"  {s.name}  shape {list(s.shape)}  y[{s.offset}:{s.offset + s.size}]" for s in plan.outputs),
        f"x: {slices(plan.inputs)}   ({plan.nx} values per point)",
        f"y: {slices(plan.outputs)}   ({plan.ny} values per point)",
        "ops after the passes:",
        *(f"  {op.label:<20} {op.name}" for op in plan.ops),
        f"parameters: {plan.parameters}",
        f"weights: {'embedded' if plan.embed else 'file-loaded (' + plan.name + '.rwt)'}",
        f"per-point scratch: {plan.scratch_bytes} bytes",
        f"path: {_path(plan)}",
        f"plan hash: {plan.hash}",
    ]
    return "\n".join(terminal_text(line) for line in lines)  # names come from the model file


def _path(plan):
    threshold = plan.whole_threshold
    if not plan.has_infer_one:
        return (f"per-point ({plan.name}_infer; {plan.name}_infer_batch runs it per point); no "
                f"{plan.name}_infer_one: {plan.infer_one_obstacle}")
    indexed = ("; run-time indices: gathers read, scatters write their whole buffer in the whole-field form "
               "(a scatter a thread per column, or one serial region, each element's updates in index order), "
               "an index outside its axis gives INDEX" if plan.runtime_indexed else "")
    if plan.path == "whole":
        return (f"whole-field: scratch above {threshold} bytes, so {plan.name}_infer_batch runs "
                f"{plan.name}_infer_one (one parallel loop per op) per sample{indexed}")
    return (f"per-point: scratch within {threshold} bytes, so {plan.name}_infer_batch runs "
            f"{plan.name}_infer per point ({plan.name}_infer_one on request: generate --infer-one){indexed}")


def run(args):
    if args.ops:
        print("lowered:", " ".join(ops.lowered_ops()))
        print("folded away (constant inputs only):", " ".join(ops.folded_ops()))
        return 0
    if args.tuning:
        options = options_from(args)
        arch = target_arch(options.toolchain)
        print(f"tuning for toolchain {options.toolchain.name}" + (f" ({arch})" if arch else "") + ":")
        for key, value in options.tuned().as_dict().items():
            mark = "" if value == getattr(Tuning(), key) else "  (set)"
            print(f"  {key} = {value!r}{mark}\n      {Tuning.doc(key)}")
        return 0
    if not args.model:
        raise UsageError("give MODEL.onnx (or --ops, --tuning)")
    options = options_from(args)
    _, plan = build_plan(args.model, options)
    print(describe(plan))
    print("\n".join(decide(plan, options).lines()))
    return 0
