"""`rosenna generate`: write the C library and Fortran module of a model."""

import sys

from rosenna import limits
from rosenna.commands.toolchain import add_target_options
from rosenna.generate import LANGS, PRECISIONS, Options, generate
from rosenna.frontend import parse_dims, parse_freeze


def add_model_options(p, lang_default="both"):
    """Options shared by generate, verify and the gate."""
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    p.add_argument("--lang", choices=LANGS, default=lang_default, help=f"languages to generate (default {lang_default})")
    p.add_argument("--precision", choices=PRECISIONS, help="working precision (default: the model's dtype)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE", default=[],
                   help="bind a symbolic input dimension (repeatable)")
    p.add_argument("--freeze", action="append", metavar="NAME=FILE.npy", default=[],
                   help="make graph input NAME a constant holding the array in FILE.npy (e.g. weights fed as "
                        "inputs; dtype and shape must match the input's; repeatable)")
    p.add_argument("--toolchain", metavar="NAME|auto",
                   help="toolchain profile for compilers, flags and thresholds (default gcc; "
                        "`rosenna toolchain list`)")
    add_target_options(p)
    p.add_argument("--max-fold-elements", type=int, metavar="N", default=limits.MAX_FOLD_ELEMENTS,
                   help=f"refuse to fold a constant of more than N elements (default {limits.MAX_FOLD_ELEMENTS})")
    p.add_argument("--max-op-nests", type=int, metavar="N", default=limits.MAX_OP_NESTS,
                   help=f"refuse an op whose code takes more than N loop nests (default {limits.MAX_OP_NESTS})")
    p.add_argument("--tune", action="append", metavar="KEY=VALUE", default=[],
                   help="set one tuning value over the profile's (repeatable; `rosenna info --tuning` lists them)")


def options_from(args):
    """Options for a command's arguments, from the profile they name (default: the gcc profile)."""
    from rosenna import toolchain

    profile = toolchain.resolve(getattr(args, "toolchain", None), target=getattr(args, "target", None),
                                gpu_arch=getattr(args, "gpu_arch", None))
    return Options.from_profile(profile, lang=args.lang, precision=args.precision, name=getattr(args, "name", None),
                                embed=getattr(args, "embed", None), dims=parse_dims(args.dim), freeze=parse_freeze(args.freeze),
                                infer_one=getattr(args, "infer_one", False),
                                compilers_from_env=not getattr(args, "toolchain", None),
                                max_fold_elements=getattr(args, "max_fold_elements", limits.MAX_FOLD_ELEMENTS),
                                max_op_nests=getattr(args, "max_op_nests", limits.MAX_OP_NESTS),
                                tune=getattr(args, "tune", ()))


def register(subparsers):
    p = subparsers.add_parser("generate", help="generate the C library and Fortran module",
                              description="Generate <name>.h/.c/.mk, rosenna_rt.h, <name>_model.F90, "
                                          "<name>_fortran.mk, <name>Config.cmake, <name>.pc, <name>_fortran.pc "
                                          "and, for file-loaded weights, <name>.rwt; the build files carry the "
                                          "toolchain profile's flags for this node (or --target/--gpu-arch).")
    add_model_options(p)
    p.add_argument("--name", help="base name of every file and symbol (default: the model file's stem)")
    p.add_argument("--out", default=".", metavar="DIR", help="output directory (default: current directory)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--embed-weights", dest="embed", action="store_const", const=True,
                       help="embed the weights in the source whatever their size")
    group.add_argument("--no-embed", dest="embed", action="store_const", const=False,
                       help="always write a .rwt weights file read by <name>_init")
    p.add_argument("--infer-one", action="store_true",
                   help="also emit <name>_infer_one (one sample over the whole field, one parallel loop per op) "
                        "for a per-point plan; whole-field plans always have it")
    p.set_defaults(func=run, embed=None)


def run(args):
    options = options_from(args)
    _, written = generate(args.model, args.out, options)
    for path in written:
        print(path)
    for note in options.toolchain.notes:
        print(f"rosenna generate: note: {note}", file=sys.stderr)
    return 0
