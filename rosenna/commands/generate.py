"""`rosenna generate`: write the C library and Fortran module of a model."""

from rosenna.generate import LANGS, PRECISIONS, Options, generate
from rosenna.frontend import parse_dims


def add_model_options(p, lang_default="both"):
    """Options shared by generate, verify and the gate."""
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    p.add_argument("--lang", choices=LANGS, default=lang_default, help=f"languages to generate (default {lang_default})")
    p.add_argument("--precision", choices=PRECISIONS, help="working precision (default: the model's dtype)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE", default=[],
                   help="bind a symbolic input dimension (repeatable)")
    p.add_argument("--toolchain", metavar="NAME|auto",
                   help="toolchain profile for compilers, flags and thresholds (`rosenna toolchain list`)")


def options_from(args):
    options = Options(lang=args.lang, precision=args.precision, name=getattr(args, "name", None),
                      embed=getattr(args, "embed", None), dims=parse_dims(args.dim))
    if getattr(args, "toolchain", None):
        from rosenna import toolchain

        profile = toolchain.resolve(args.toolchain)
        options.toolchain = profile
        options.make_defaults = {k: v for k, v in profile.make_defaults().items() if v}
        options.embed_threshold = profile.embed_threshold
        options.constant_limit = profile.constant_limit_bytes
    return options


def register(subparsers):
    p = subparsers.add_parser("generate", help="generate the C library and Fortran module",
                              description="Generate <name>.h/.c/.mk, rosenna_rt.h, <name>_model.F90, "
                                          "<name>_fortran.mk and, for file-loaded weights, <name>.rwt.")
    add_model_options(p)
    p.add_argument("--name", help="base name of every file and symbol (default: the model file's stem)")
    p.add_argument("--out", default=".", metavar="DIR", help="output directory (default: current directory)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--embed-weights", dest="embed", action="store_const", const=True,
                       help="embed the weights in the source whatever their size")
    group.add_argument("--no-embed", dest="embed", action="store_const", const=False,
                       help="always write a .rwt weights file read by <name>_init")
    p.set_defaults(func=run, embed=None)


def run(args):
    _, written = generate(args.model, args.out, options_from(args))
    for path in written:
        print(path)
    return 0
