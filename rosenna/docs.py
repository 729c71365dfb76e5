"""Facts rendered into README.md and docs/ from their one Python definition (status codes, op
lists, the .rwt readers' checks, the command line, the toolchain-profile schema).

``python -m rosenna.docs`` rewrites the marked regions of README.md and docs/weights-format.md;
tests check they are current. The documentation site renders :data:`REFERENCE` at build time
(``docs/_ext/rosenna_reference.py``: the ``{rosenna-reference}`` directive), so the reference
pages are generated from the code and cannot drift.
"""

import argparse
import ast
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


def _cell(text):
    """Text for one Markdown table cell: one line, no bare ``|``, no ``<`` read as HTML."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "\\<") for i, p in enumerate(parts))


def _usage(parser):
    """A parser's usage at a fixed width (argparse would follow $COLUMNS)."""
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _subparsers(parser):
    """``[(name, help, subparser)]`` of a parser's subcommands, in --help order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _options_table(parser):
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            spelled = ", ".join(f"`{o}`" + (f" `{action.metavar or action.dest.upper()}`" if action.nargs != 0 else "")
                                for o in action.option_strings)
        else:
            spelled = f"`{action.metavar or action.dest}`"
        default = action.default
        text = (action.help or "") % {"default": default}
        said = "default" in text or default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0
        parts = [text] + ([] if said else [f"(default: `{default}`)"])
        if action.choices:
            parts.append(f"One of: {', '.join(f'`{c}`' for c in action.choices)}.")
        rows.append(f"| {_cell(spelled)} | {_cell(' '.join(p for p in parts if p))} |")
    if not rows:
        return ""
    return "\n".join(["| argument | meaning |", "| --- | --- |"] + rows)


def cli_reference(parser=None):
    """Every `rosenna` command and subcommand: its usage, description and arguments (from argparse)."""
    if parser is None:
        from rosenna.cli import build_parser

        parser = build_parser()
    out = []

    def walk(p, name, summary, depth):
        out.append(f"{'#' * depth} `{name}`\n")
        if summary:
            out.append(f"{summary[0].upper() + summary[1:]}.\n")
        out.append(f"```text\n{_usage(p)}\n```\n")
        if p.description:
            out.append(_cell(p.description).replace("\\|", "|") + "\n")
        table = _options_table(p)
        if table:
            out.append(table + "\n")
        for sub_name, sub_help, sub in _subparsers(p):
            walk(sub, f"{name} {sub_name}", sub_help, min(depth + 1, 4))

    for sub_name, sub_help, sub in _subparsers(parser):
        walk(sub, f"rosenna {sub_name}", sub_help, 2)
    return "\n".join(out).rstrip()


def _schema_type(node):
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    if "anyOf" in node:
        return " or ".join(_schema_type(n) for n in node["anyOf"])
    kind = node.get("type", "")
    if kind == "array":
        return f"list of {_schema_type(node.get('items', {}))}"
    if kind == "object":
        return "mapping"
    words = {"string": "text", "integer": "integer", "number": "number"}.get(kind, kind)
    limits = []
    if "pattern" in node:
        limits.append(f"matching `{node['pattern']}`")
    if "minimum" in node:
        limits.append(f">= {node['minimum']}")
    if "maximum" in node:
        limits.append(f"<= {node['maximum']}")
    if "exclusiveMaximum" in node:
        limits.append(f"< {node['exclusiveMaximum']}")
    if node.get("minLength"):
        limits.append("not empty")
    return words + (f" ({', '.join(limits)})" if limits else "")


def toolchain_schema_reference():
    """Every key of a toolchain profile (rosenna.toolchain.schema.SCHEMA): its type, whether a
    complete profile needs it, and the placeholders a flag may use."""
    from rosenna.toolchain import schema

    required = set(schema.MERGED_REQUIRED["required"])
    for key, sub in schema.MERGED_REQUIRED["properties"].items():
        required.update(f"{key}.{k}" for k in sub["required"])
    rows = ["| key | type | required after `extends` |", "| --- | --- | --- |"]

    def walk(props, prefix):
        for key, node in props.items():
            dotted = prefix + key
            rows.append(f"| `{dotted}` | {_cell(_schema_type(node))} | {'yes' if dotted in required else ''} |")
            if node.get("type") == "object":
                walk(node.get("properties", {}), dotted + ".")

    walk(schema.SCHEMA["properties"], "")
    placeholders = ", ".join(f"`{{{p}}}`" for p in schema.PLACEHOLDERS)
    return "\n".join(rows) + (
        f"\n\nPlaceholders a flag or `devflags` string may use, filled when the profile is resolved: "
        f"{placeholders} (`{{archspec}}` only in `optimize.c` and `optimize.fortran`). Unknown keys are "
        f"refused. Defaults: `thresholds.constant_limit_bytes` {schema.DEFAULT_CONSTANT_LIMIT_BYTES}, "
        f"`thresholds.embed_threshold` {schema.DEFAULT_EMBED_THRESHOLD:,}.")


def operators_reference(conformance_md=None):
    """The ops table with the ONNX node-test figures of ``docs/conformance.md`` beside each op."""
    from rosenna import conformance

    if conformance_md is None:
        conformance_md = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                      "docs", "conformance.md")
    figures = {}
    if os.path.isfile(conformance_md):
        with open(conformance_md, encoding="utf-8") as handle:
            figures = {op: row for op, (row, _) in conformance.parse_markdown(handle.read()).items()}
    rows = ["| op | defined in | what rosenna does with it | node tests passed |", "| --- | --- | --- | ---: |"]
    for line in ops_table().splitlines()[2:]:
        op = line.split("|")[1].strip()
        row = figures.get(op)
        rows.append(f"{line} {f'{row[1]} of {row[0]}' if row else '-'} |")
    return "\n".join(rows)


def _message_text(node):
    """The text of a message expression, an f-string's fields shown as ``{expression}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_message_text(v) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message_text(node.left), _message_text(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "{" + ast.unparse(node.left) + "}") + \
            (right if right is not None else "{" + ast.unparse(node.right) + "}")
    return None


#: rosenna's own errors (rosenna.errors, the toolchain's): what a user sees after `error:`. Python's
#: ValueError and the like raised in the package are internal checks, not messages to a user.
OWN_ERRORS = ("RosennaError", "ModelError", "UnsupportedOp", "UsageError", "ToolchainError", "BuildError",
              "ProfileError", "TemplateError")


def error_messages(package_dir=None):
    """``[(module path, error class, message)]`` of every error rosenna raises with a literal message
    (read from the source with ast, so the list is every one there is)."""
    package_dir = package_dir or os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(package_dir)
    found = []
    for folder, _, names in sorted(os.walk(package_dir)):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                    continue
                func = node.exc.func
                kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if kind not in OWN_ERRORS:
                    continue
                text = _message_text(node.exc.args[0])
                if text:
                    found.append((os.path.relpath(path, root).replace(os.sep, "/"), node.lineno, kind, text))
    return [(where, kind, text) for where, _, kind, text in sorted(found)]


def error_messages_table():
    """Every error message in the source, by module: what the one line after `error:` says."""
    rows = ["| raised in | error | message |", "| --- | --- | --- |"]
    for where, kind, text in error_messages():
        rows.append(f"| `{where}` | {kind} | {_cell(text)} |")
    return "\n".join(rows)


#: What the documentation site's ``{rosenna-reference}`` directive renders, by name.
REFERENCE = {
    "cli": cli_reference,
    "status-codes": status_table,
    "rwt-checks": rwt_checks_table,
    "toolchain-schema": toolchain_schema_reference,
    "operators": operators_reference,
    "error-messages": error_messages_table,
}

#: Marked regions of README.md (the operator table lives in the reference: operators_reference).
REGIONS = {"status-codes": status_table}
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
