"""`rosenna conformance`: run every ONNX backend node test case through generate, compile and run,
against the tests' expected outputs; optionally write docs/conformance.md."""

import contextlib
import os
import tempfile
import time

from rosenna import conformance
from rosenna.errors import UsageError


def register(subparsers):
    p = subparsers.add_parser("conformance", help="run every ONNX node test case; write the table",
                              description=conformance.__doc__.split("\n")[0])
    p.add_argument("--write", metavar="FILE", help="write the markdown report to FILE")
    p.add_argument("--op", action="append", help="only the cases of these ops (repeatable)")
    p.add_argument("--fast", action="store_true",
                   help=f"only the test suite's default selection (at most {conformance.FAST_PER_OP} cases and one "
                        "expanded case per op, and a few named forms)")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    p.set_defaults(func=run)


def run(args):
    if args.write and not os.path.isdir(os.path.dirname(os.path.abspath(args.write))):
        raise UsageError(f"--write {args.write}: no such directory; give a path in an existing directory")
    found = conformance.collect(args.op)
    unknown = sorted(set(args.op or ()) - set(found))
    if unknown:
        raise UsageError(f"--op {', '.join(unknown)}: onnx defines no node test case of that op; the ops are named "
                         "as in docs/conformance.md (ai.onnx.ml.Binarizer for another domain)")
    if args.fast:
        found = conformance.fast_subset(found)
    cases = [case for op in sorted(found) for case in found[op]]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        root = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="rosenna-conf-"))
        outcomes = conformance.run(cases, root)
    seconds = time.monotonic() - started
    results = {}
    for o in outcomes:
        results.setdefault(o.case.op, []).append(o)
    for op, outs in sorted(results.items()):
        counts = {k: sum(o.status == k for o in outs) for k in ("passed", "refused", "failed")}
        print(f"{op:<36} {len(outs):>3} cases  {counts}", flush=True)
        for o in outs:
            if o.status == "failed":
                print(f"    FAILED {o.case.name}: {o.detail}", flush=True)
    totals = {k: sum(o.status == k for o in outcomes) for k in ("passed", "refused", "failed")}
    print(f"{len(outcomes)} cases: {totals['passed']} passed, {totals['refused']} refused, "
          f"{totals['failed']} failed ({seconds:.0f} s, {os.cpu_count()} cores)", flush=True)
    defined = sum(map(len, conformance.collect().values())) if args.op or args.fast else None
    text = conformance.markdown(results, seconds, defined)
    if args.write:  # whole or not at all
        partial = args.write + ".partial"
        try:
            with open(partial, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(partial, args.write)
        except OSError as exc:
            raise UsageError(f"--write {args.write}: cannot write it ({exc.strerror})") from None
    return 1 if totals["failed"] else 0
