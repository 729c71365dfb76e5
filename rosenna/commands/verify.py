"""`rosenna verify`: prove the generated code computes what the model does."""

from rosenna.commands.generate import add_model_options, options_from
from rosenna.errors import UsageError
from rosenna.verify import report, run_verify


def register(subparsers):
    p = subparsers.add_parser(
        "verify", help="compile the generated code and compare it with onnxruntime or stored outputs",
        description="Generate, compile (the toolchain profile's compilers and flags; default gcc) and run <name>_infer per point on the host, and "
                    "compare every output element with onnxruntime on random inputs (for an old-opset model "
                    "onnxruntime cannot run, on the model converted by onnx's version converter) or with stored "
                    "outputs (--reference). Exit 0 only if every element of every output in every language "
                    "passes: |got - want| <= atol + rtol*|want|, NaN matches NaN, an Inf the same Inf.")
    add_model_options(p)
    p.add_argument("--cases", type=int, default=16, help="number of random inputs (default 16)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--reference", metavar="DIR|FILE.npz",
                   help="stored inputs and expected outputs instead of onnxruntime: an ONNX test_data_set folder "
                        "(input_*.pb, output_*.pb) or a folder of them, or a .npz of arrays named after the model's "
                        "inputs and outputs (or input_0.., output_0..)")
    p.add_argument("--keep", metavar="DIR", help="keep the generated code and harnesses in DIR")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--embed-weights", dest="embed", action="store_const", const=True)
    group.add_argument("--no-embed", dest="embed", action="store_const", const=False)
    p.set_defaults(func=run, embed=None)


def runnable_here(target):
    """Whether this host can run code built for archspec microarchitecture ``target`` (a name):
    the host is it or descends from it (``x86_64_v3`` on an icelake host, not ``zen4``)."""
    from rosenna.toolchain.profile import microarchitecture

    host, _ = microarchitecture(None)
    wanted, _ = microarchitecture(target)
    return wanted == host or wanted in host.ancestors


def local_options(args):
    """Options for verify: verify runs the code it builds on this host, so a ``--target`` this host
    cannot run (another family, or newer instructions) is built for this host instead, with a note
    (executing it would be SIGILL at best; generate --target writes build files for that node)."""
    import sys

    target = getattr(args, "target", None)
    if target and not runnable_here(target):
        from rosenna.toolchain.profile import microarchitecture

        host = microarchitecture(None)[0].name
        print(f"rosenna verify: note: --target {target}: this host ({host}) cannot run code built for it; "
              f"verifying a build for {host} (the generated source differs only in build flags and provenance; run verify on a {target} "
              "node to test its flags)", file=sys.stderr)
        args.target = None
    return options_from(args)


def run(args):
    if args.cases < 1:
        raise UsageError(f"--cases {args.cases}: give at least 1")
    v = run_verify(args.model, local_options(args), cases=args.cases, seed=args.seed, keep=args.keep,
                   reference=args.reference)
    plan = v.plan
    print(f"{plan.name}: {v.reference.cases} cases, precision {plan.precision}, "
          f"weights {'embedded' if plan.embed else 'file-loaded'}")
    print(f"reference: {v.reference.source}")
    print(report(v.results))
    print("PASS" if v.passed else "FAIL")
    return 0 if v.passed else 1
