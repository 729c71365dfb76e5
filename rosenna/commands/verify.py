"""`rosenna verify`: prove the generated code computes what the model does."""

import math

from rosenna.commands.generate import add_model_options, options_from
from rosenna.errors import UsageError
from rosenna.verify import report, run_verify
from rosenna.verify_harness import ENTRIES, describe_calls


def register(subparsers):
    p = subparsers.add_parser(
        "verify", help="compile the generated code and compare it with onnxruntime or stored outputs",
        description="Generate, compile (the toolchain profile's compilers and flags; default gcc) and run every entry point on the host "
                    "(<name>_infer per point, <name>_infer_batch with full and partial SIMD blocks over two threads, "
                    "<name>_infer_one where the set has it; one harness per language), and "
                    "compare every output element with onnxruntime on random inputs (for an old-opset model "
                    "onnxruntime cannot run, on the model converted by onnx's version converter) or with stored "
                    "outputs (--reference). Exit 0 only if every element of every output in every language "
                    "passes: |got - want| <= atol + rtol*|want|, NaN matches NaN, an Inf the same Inf.")
    add_model_options(p)
    p.add_argument("--cases", type=int, default=16, help="number of random inputs (default 16; a per-point plan's batch calls draw one "
                                                            "per point of the largest, up to 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--reference", metavar="DIR|FILE.npz",
                   help="stored inputs and expected outputs instead of onnxruntime: an ONNX test_data_set folder "
                        "(input_*.pb, output_*.pb) or a folder of them, or a .npz of arrays named after the model's "
                        "inputs and outputs (or input_0.., output_0..)")
    p.add_argument("--entry", action="append", metavar="NAME", choices=ENTRIES,
                   help="run only this entry point (repeatable; default every one the generated set offers: "
                        "infer per point, infer_batch with 1, B-1, B, B+1 and 1000 points for a host SIMD block of B, "
                        "infer_one)")
    p.add_argument("--infer-one", action="store_true",
                   help="also emit and verify <name>_infer_one for a per-point plan (whole-field plans always have it)")
    p.add_argument("--input-range", action="append", metavar="NAME=LO:HI", default=[],
                   help="draw input NAME uniform in [LO, HI) (an integer input: the integers LO to HI) instead of "
                        "[-1, 1) (integer inputs by default take the indices, categories or compared values the model "
                        "uses them for); repeatable")
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


def parse_ranges(items):
    """``{name: (low, high)}`` from ``--input-range NAME=LO:HI`` arguments."""
    ranges = {}
    for item in items:
        name, _, span = item.rpartition("=")
        low, _, high = span.partition(":")
        try:
            low, high = float(low), float(high)
        except ValueError:
            raise UsageError(f"--input-range {item}: give NAME=LO:HI with LO and HI numbers, e.g. "
                             "--input-range x=-2:2") from None
        if not name or not (low < high) or not all(map(math.isfinite, (low, high))):
            raise UsageError(f"--input-range {item}: give NAME=LO:HI with finite LO < HI")
        ranges[name] = (low, high)
    return ranges


def run(args):
    if args.cases < 1:
        raise UsageError(f"--cases {args.cases}: give at least 1")
    v = run_verify(args.model, local_options(args), cases=args.cases, seed=args.seed, keep=args.keep,
                   reference=args.reference, entries=args.entry, input_ranges=parse_ranges(args.input_range))
    plan = v.plan
    raised = f" (--cases {args.cases}: one case per point of the largest batch call)" if (
        args.reference is None and v.reference.cases > args.cases) else ""
    print(f"{plan.name}: {v.reference.cases} cases{raised}, precision {plan.low_precision or plan.precision}, "
          f"weights {'embedded' if plan.embed else 'file-loaded'}")
    print(f"reference: {v.reference.source}")
    for name, draw in v.reference.draws.items():
        shown = ", ".join(str(int(c)) for c in draw.categories[:8]) + (", ..." if len(draw.categories) > 8 else "")
        print(f"input {name!r}: {draw.why}" + (f" ({shown})" if draw.categories else ""))
    for line in describe_calls(plan.name, v.calls):
        print(f"ran: {line}")
    print(report(v.results, v.tolerance))
    print("PASS" if v.passed else "FAIL")
    return 0 if v.passed else 1
