"""`rosenna conformance`: run the ONNX backend node tests of every lowered op through generate,
compile and run, against the tests' expected outputs; optionally write docs/conformance.md."""

import contextlib
import os
import tempfile

from rosenna import conformance


def register(subparsers):
    p = subparsers.add_parser("conformance", help="run the ONNX node tests of every lowered op; write the table",
                              description=conformance.__doc__.split("\n")[0])
    p.add_argument("--write", metavar="FILE", help="write the markdown report to FILE")
    p.add_argument("--op", action="append", help="only these ops (repeatable)")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    p.add_argument("--update", action="store_true",
                   help="with --write and --op: rerun only those ops and keep FILE's other rows (rows of ops "
                        "rosenna no longer lowers are dropped)")
    p.set_defaults(func=run)


def run(args):
    found = conformance.collect(args.op)
    results = {}
    with contextlib.ExitStack() as stack:
        root = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="rosenna-conf-"))
        for op, cases in sorted(found.items()):
            results[op] = conformance.run(cases, os.path.join(root, op))
            counts = {k: sum(o.status == k for o in results[op]) for k in ("passed", "refused", "failed")}
            print(f"{op:<20} {len(cases):>3} cases  {counts}", flush=True)
            for o in results[op]:
                if o.status == "failed":
                    print(f"    FAILED {o.case.name}: {o.detail}", flush=True)
    previous = None
    if args.update and args.write and os.path.exists(args.write):
        lowered = set(conformance.collect())
        with open(args.write, encoding="utf-8") as fh:
            previous = {op: v for op, v in conformance.parse_markdown(fh.read()).items() if op in lowered}
    text = conformance.markdown(results, previous)
    if args.write:
        with open(args.write, "w") as fh:
            fh.write(text)
    failed = sum(o.status == "failed" for outs in results.values() for o in outs)
    return 1 if failed else 0
