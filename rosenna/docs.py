"""Facts rendered into README.md from their one Python definition (status codes, op lists).

``python -m rosenna.docs`` rewrites the marked regions of README.md; a test checks they are current.
"""

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


REGIONS = {"status-codes": status_table, "ops": ops_table}


def render_readme(text):
    for key, fn in REGIONS.items():
        pattern = re.compile(rf"(<!-- {key}:begin -->\n).*?(<!-- {key}:end -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + fn() + "\n" + m.group(2), text)
    return text


def main(path="README.md"):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    new = render_readme(text)
    if new != text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(new)
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
