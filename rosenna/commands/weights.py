"""`rosenna weights`: the .rwt of a retrained model for code generated before (rosenna.weights)."""

from rosenna import weights
from rosenna.frontend import parse_dims, parse_freeze


def register(subparsers):
    p = subparsers.add_parser("weights", help="write the .rwt of a retrained model for generated code",
                              description="Write the weights file (.rwt) of MODEL for code generated before from "
                                          "a model of the same graph, to be read by <name>_init or swapped in by "
                                          "<name>_reload / <name>_set_weights. A model whose graph differs (another "
                                          "plan hash) is refused and nothing is written.")
    p.add_argument("model", metavar="MODEL.onnx", help="the retrained ONNX model")
    p.add_argument("-o", "--out", required=True, metavar="W.rwt", help="the weights file to write")
    p.add_argument("--for", dest="generated", required=True, metavar="GENERATED",
                   help="the generated code: its <name>.rwt, <name>.h or <name>_model.F90")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE", default=[],
                   help="bind a symbolic input dimension, as given to generate (repeatable)")
    p.add_argument("--freeze", action="append", metavar="NAME=FILE.npy", default=[],
                   help="a graph input made constant, as given to generate (repeatable)")
    p.set_defaults(func=run)


def run(args):
    plan_hash = weights.write(args.model, args.out, args.generated, parse_dims(args.dim), parse_freeze(args.freeze))
    print(f"{args.out}: weights of {args.model} for plan {plan_hash}")
    return 0
