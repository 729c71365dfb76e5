"""The package's shape, checked from its source with ast (nothing is imported or run):

- no import circles between rosenna's modules, whether the import is at module level or inside a
  function (a lazy import only hides a circle). A submodule's own parent packages do not count:
  Python initialises them before it;
- no module over :data:`MAX_LINES` lines unless its docstring says why (a line ``Long on
  purpose: ...``).
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "rosenna"
MAX_LINES = 400

#: Circles found when this test was written, each with who mends it. The test fails on any other
#: circle, and on one of these once it is gone (then delete its line).
KNOWN_CIRCLES = {}
#: Modules over MAX_LINES when this test was written, each with who splits it (same rules).
KNOWN_LONG = {}


def _modules():
    """module name -> path, for every .py file of the package."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name, path, modules):
    """The rosenna modules ``name`` imports (anywhere in the file)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in modules else base)
        for target in targets:
            if target in modules:
                found.add(target)
    # Importing a module initialises its packages first; a module's own packages are already being
    # initialised when it runs, so they are no edge.
    edges = set()
    for target in found:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            mod = ".".join(parts[:i])
            if mod in modules and mod != name and not (name + ".").startswith(mod + "."):
                edges.add(mod)
    return edges


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles = [c for c in _cycles(graph) if tuple(c) not in KNOWN_CIRCLES]
    gone = [k for k in KNOWN_CIRCLES if list(k) not in _cycles(graph)]
    assert not gone, f"no longer circles, delete them from KNOWN_CIRCLES: {gone}"
    detail = "; ".join(" <-> ".join(c) + " (" + ", ".join(f"{a} imports {b}" for a in c for b in sorted(graph[a] & set(c)))
                       + ")" for c in cycles)
    assert not cycles, f"import circles: {detail}"


def test_the_circle_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_long_modules_say_why():
    long = []
    for name, path in sorted(_modules().items()):
        text = path.read_text()
        lines = text.count("\n")
        doc = ast.get_docstring(ast.parse(text)) or ""
        rel = str(path.relative_to(ROOT.parent))
        if rel in KNOWN_LONG:
            assert lines > MAX_LINES, f"{rel} is {lines} lines now: delete it from KNOWN_LONG"
        elif lines > MAX_LINES and "Long on purpose:" not in doc:
            long.append(f"{rel} ({lines} lines)")
    assert not long, f"over {MAX_LINES} lines without 'Long on purpose:' in the docstring: {', '.join(long)}"
