"""Facts rendered into README.md and docs/ from their one Python definition (status codes, op
lists, the .rwt readers' checks).

``python -m rosenna.docs`` rewrites the marked regions of README.md and docs/weights-format.md;
tests check they are current.
"""

import os
import re
import sys

from rosenna import abi, ops


def status_table():
    rows = ["| code | C macro | Fortran constant | meaning |", "| --- | --- | --- | --- |"]
    for code, key, text in abi.STATUS_CODES:
        rows.append(f"| {code} | `{abi.status_name(key)}` | `<name>_status_{key.lower()}` | {text} |")
    return "\n".join(rows)


def ops_table():
    """One row per registered op: where it is defined and what rosenna does with it."""
    rows = ["| op | defined in | what rosenna does with it |", "| --- | --- | --- |"]
    folded = set(ops.folded_ops())
    for name in sorted(ops.REGISTRY):
        cls = type(ops.REGISTRY[name])
        module = sys.modules[cls.__module__]
        own = (cls.__doc__ or "").strip()
        summary = own.splitlines()[0] if own else re.split(r"[:.](\s|$)", (module.__doc__ or "").strip())[0]
        if name in folded:
            summary = "folded at generation time (constant inputs or static shapes only)"
        where = "rosenna/ops/" + cls.__module__.rsplit(".", 1)[-1] + ".py"
        rows.append(f"| {name} | `{where}` | {summary.strip()} |")
    return "\n".join(rows)


def rwt_checks_table():
    """abi.RWT_CHECKS, in the order both readers run them, with each failure's status."""
    codes = {key: code for code, key, _ in abi.STATUS_CODES}
    rows = ["| step | field | check | status if not |", "| --- | --- | --- | --- |"]
    for i, check in enumerate(abi.RWT_CHECKS, 1):
        where = "per tensor: " if check.per_tensor else ""
        rows.append(f"| {i} | {where}`{check.field}` | {check.doc} | {codes[check.status]} `{check.status}` |")
    return "\n".join(rows)


REGIONS = {"status-codes": status_table, "ops": ops_table}
#: Marked regions of other documents, by path from the repository root.
DOC_REGIONS = {"docs/weights-format.md": {"rwt-checks": rwt_checks_table}}


def render_readme(text, regions=None):
    for key, fn in (REGIONS if regions is None else regions).items():
        pattern = re.compile(rf"(<!-- {key}:begin -->\n).*?(<!-- {key}:end -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + fn() + "\n" + m.group(2), text)
    return text


def main(path="README.md"):
    root = os.path.dirname(os.path.abspath(path))
    for target, regions in [(path, REGIONS)] + [(os.path.join(root, doc), r) for doc, r in DOC_REGIONS.items()]:
        with open(target, encoding="utf-8") as handle:
            text = handle.read()
        new = render_readme(text, regions)
        if new != text:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(new)
            print(f"updated {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
