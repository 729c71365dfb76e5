"""`rosenna verify`: prove the generated code matches onnxruntime."""

from rosenna.commands.generate import add_model_options, options_from
from rosenna.errors import UsageError
from rosenna.verify import report, verify


def register(subparsers):
    p = subparsers.add_parser("verify", help="compile the generated code and compare it with onnxruntime",
                              description="Generate, compile ($CC, $FC with -fopenmp) and run <name>_infer per "
                                          "point on the host over random inputs, and compare with onnxruntime. "
                                          "Exit 0 only if every output of every language passes.")
    add_model_options(p)
    p.add_argument("--cases", type=int, default=16, help="number of random inputs (default 16)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--keep", metavar="DIR", help="keep the generated code and harnesses in DIR")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--embed-weights", dest="embed", action="store_const", const=True)
    group.add_argument("--no-embed", dest="embed", action="store_const", const=False)
    p.set_defaults(func=run, embed=None)


def run(args):
    if args.cases < 1:
        raise UsageError(f"--cases {args.cases}: give at least 1")
    plan, results = verify(args.model, options_from(args), cases=args.cases, seed=args.seed, keep=args.keep)
    print(f"{plan.name}: {args.cases} cases, precision {plan.precision}, "
          f"weights {'embedded' if plan.embed else 'file-loaded'}")
    print(report(results))
    ok = all(r.passed for r in results)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
