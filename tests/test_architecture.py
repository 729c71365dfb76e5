"""The package's shape (docs/architecture.md), checked from its source with ast:

- no import circles between rosenna's modules, whether the import is at module level or inside a
  function (a lazy import only hides a circle). A submodule's own parent packages do not count:
  Python initialises them before it;
- every package's docstring says what it owns;
- the emitters read the strategy's result, never its tables or analyses: no module of
  ``rosenna.emit`` imports a submodule of ``rosenna.strategy`` or reaches one through the package;
- nothing in ``rosenna.strategy`` or ``rosenna.emit`` writes to a plan: no attribute assigned,
  no ``setattr`` or ``object.__setattr__``, no cache in its ``__dict__`` (the plan is frozen; the
  test names the line that tries);
- the starter file for a new implementation (docs/templates/new_implementation.py) runs.

Files are split by idea, not by length: there is no line cap.
"""

import ast
import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent / "rosenna"

#: Circles found when this test was written, each with who mends it. The test fails on any other
#: circle, and on one of these once it is gone (then delete its line).
KNOWN_CIRCLES = {}
#: What ``rosenna.emit`` may take from ``rosenna.strategy``: the result (its whole-field part's types
#: included) and the tuning.
STRATEGY_RESULT = {"Strategy", "Decision", "Rejected", "Tuning", "TuningError", "Chain", "Layer", "of",
                   "Field", "Schedule", "GemmConv", "TiledConv"}


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


def _packages():
    return {name: path for name, path in _modules().items() if path.name == "__init__.py"}


def test_every_package_says_what_it_owns():
    """The docstring of every package says what it owns ("owns" / "own"), in a sentence or more."""
    vague = []
    for name, path in sorted(_packages().items()):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if len(doc) < 60 or not re.search(r"\bown(s|ed)?\b", doc, re.IGNORECASE):
            vague.append(name)
    assert not vague, f"packages whose docstring does not say what they own: {', '.join(vague)}"


def _strategy_uses(tree):
    """``[(line, what)]``: the imports of strategy internals and the attribute uses of them."""
    bad, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("rosenna.strategy."):
                bad.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "rosenna.strategy":
                bad += [(node.lineno, f"from rosenna.strategy import {a.name}") for a in node.names
                        if a.name not in STRATEGY_RESULT]
            elif node.module == "rosenna":
                aliases |= {a.asname or a.name for a in node.names if a.name == "strategy"}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("rosenna.strategy."):
                    bad.append((node.lineno, f"import {a.name}"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr not in STRATEGY_RESULT):
            bad.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return bad


def test_emit_reads_only_the_strategys_result():
    found = []
    for name, path in sorted(_modules().items()):
        if name == "rosenna.emit" or name.startswith("rosenna.emit."):
            found += [f"{path.relative_to(ROOT.parent)}:{line}: {what}" for line, what in
                      _strategy_uses(ast.parse(path.read_text()))]
    assert not found, "emit modules reaching into the strategy's internals: " + "; ".join(found)


def test_the_strategy_check_finds_a_reach():
    tree = ast.parse("from rosenna.strategy.mlp import BATCHED\nfrom rosenna import strategy\n"
                     "strategy.mlp.BATCHED\nstrategy.of(p)\nfrom rosenna.strategy import Tuning, select\n")
    assert [line for line, _ in _strategy_uses(tree)] == [1, 5, 3]


def _is_plan(node):
    """Whether ``node`` names a plan: a name ``plan`` or ``*_plan``, or an attribute ``.plan``."""
    if isinstance(node, ast.Name):
        return bool(re.fullmatch(r"(\w+_)?plan", node.id))
    return isinstance(node, ast.Attribute) and node.attr == "plan"


def _plan_dict(node):
    """Whether ``node`` is the ``__dict__`` of a plan or of anything it holds (``plan.__dict__``,
    ``weight.__dict__``, ``vars(plan)``): emit and the strategy keep no cache on what they read."""
    return ((isinstance(node, ast.Attribute) and node.attr == "__dict__")
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
                and node.args and _is_plan(node.args[0])))


def _plan_writes(tree):
    """Lines writing to a plan: assigning to an attribute of a name called ``plan`` (or ``*_plan``),
    setattr, delattr or ``object.__setattr__`` on one, or a write into its ``__dict__`` (an
    item assigned or deleted, or ``update``, ``setdefault``, ``pop``, ``clear`` called): a cache
    kept on the plan is a write too."""
    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets += target.elts
            elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and re.fullmatch(r"(\w+_)?plan", target.value.id)):
                lines.append(node.lineno)
            elif isinstance(target, ast.Subscript) and _plan_dict(target.value):
                lines.append(node.lineno)
        if not isinstance(node, ast.Call):
            continue
        func, args = node.func, node.args
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and args and _is_plan(args[0]):
            lines.append(node.lineno)
        elif (isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__") and args
                and _is_plan(args[0])):
            lines.append(node.lineno)  # object.__setattr__(plan, ...), the frozen dataclass's back door
        elif (isinstance(func, ast.Attribute) and func.attr in ("update", "setdefault", "pop", "popitem", "clear")
                and _plan_dict(func.value)):
            lines.append(node.lineno)
    return lines


def test_nothing_downstream_writes_to_the_plan():
    found = []
    for name, path in sorted(_modules().items()):
        if name.startswith(("rosenna.emit", "rosenna.strategy")) or name == "rosenna.generate":
            found += [f"{path.relative_to(ROOT.parent)}:{line}" for line in _plan_writes(ast.parse(path.read_text()))]
    assert not found, "assignments to a plan: " + ", ".join(found)
    assert sorted(_plan_writes(ast.parse("plan.infer_one = True\nx.plan = 1\nsetattr(plan, 'a', 1)\n"
                                         "files[plan.name] = 2\na, new_plan.b = 1, 2\n"))) == [1, 3, 5]


def test_the_plan_check_finds_a_cache_on_the_plan():
    """The host form's regions were once cached in the plan's ``__dict__`` by emit/host_field.py
    (this snippet is that code): every such write is found, and reading the plan is not."""
    old = ("def host_regions(plan):\n"
           "    cached = plan.__dict__.get('_host_regions')\n"
           "    if cached is not None:\n"
           "        return cached\n"
           "    out = [plan.tuned.host_jam, vars(plan)['body']]\n"
           "    plan.__dict__['_host_regions'] = out\n"
           "    return out\n")
    assert _plan_writes(ast.parse(old)) == [6]
    others = ("object.__setattr__(plan, 'a', 1)\nvars(plan)['a'] = 1\nplan.__dict__.setdefault('a', 1)\n"
              "del plan.__dict__['a']\nself.plan.__dict__.update(a=1)\nstrategy.plan.__setattr__(s.plan, 'a', 1)\n"
              "x = plan.__dict__['a']\nd = dict(vars(plan))\nobject.__setattr__(self, 'a', 1)\n"
              "cache = weight.__dict__.setdefault('_literals', {})\n")
    assert sorted(_plan_writes(ast.parse(others))) == [1, 2, 3, 4, 5, 6, 10]


def test_the_starter_for_a_new_implementation_runs(tmp_path):
    """docs/templates/new_implementation.py, loaded as a module: its implementation answers for an
    MLP, a plan that is none, and its renderer builds a layout for the MLP."""
    import onnx

    from rosenna import strategy, zoo
    from rosenna.emit import cuda
    from rosenna.generate import Options, build_plan

    spec = importlib.util.spec_from_file_location(
        "starter", ROOT.parent / "docs" / "templates" / "new_implementation.py")
    starter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(starter)
    impl = starter.MyKernel()
    onnx.save(zoo.mlp("m", [3, 8, 2], ["Tanh", None]), str(tmp_path / "m.onnx"))
    onnx.save(zoo.mlp("w", [3, 300, 2], ["Tanh", None], dtype=__import__("numpy").float64), str(tmp_path / "w.onnx"))
    for model, fits in (("m", True), ("w", False)):
        plan = build_plan(str(tmp_path / f"{model}.onnx"), Options(lang="c"))[1]
        s = strategy.decide(plan)
        reasons = impl.fits(strategy.Subject(plan, s.chain, plan.path), s.tuning)
        assert isinstance(reasons, tuple) and (not reasons) == fits, reasons
    kind = starter.renderer()
    plan = build_plan(str(tmp_path / "m.onnx"), Options(lang="c"))[1]
    choice = cuda.choose(strategy.decide(plan))
    assert kind.layout(choice).size > 0 and "m_batch_kernel" in kind.kernel(plan, choice, [])


#: The words a documented module constant of emit/ or limits.py starts its ``#:`` comment with: a
#: fact of the hardware, an ABI, a compiler, an output format or the fixed device code (never a
#: choice of speed), a budget against hostile input (limits.py, each with its own option), or the
#: default of a profile setting defined there (the embed threshold).
NOT_TUNING = ("Fact", "Budget", "Default of")


def _numeric(node):
    """Whether a module-level value is a number, arithmetic, a container holding one, or a
    :class:`Tuning` built at import: what a tuning constant looks like."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_numeric(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(_numeric(v) for v in node.values)
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        return name == "Tuning"
    return False


def _tuning_constants(source):
    """``[(line, name)]``: module-level constants (``NAME = ...`` or ``_NAME = ...``, upper case)
    of a numeric value whose ``#:`` comment right above does not start with one of
    :data:`NOT_TUNING`."""
    lines = source.splitlines()
    found = []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names = [t.id for t in targets if isinstance(t, ast.Name) and re.fullmatch(r"_?[A-Z][A-Z0-9_]*", t.id)]
        if not names or node.value is None or not _numeric(node.value):
            continue
        k = node.lineno - 2
        while k >= 0 and lines[k].startswith("#:") and k - 1 >= 0 and lines[k - 1].startswith("#:"):
            k -= 1  # the first line of the comment block
        if not (k >= 0 and lines[k].startswith("#:") and lines[k][2:].strip().startswith(NOT_TUNING)):
            found += [(node.lineno, name) for name in names]
    return found


def test_no_module_level_tuning_constant_in_emit():
    """Every number that decides how generated code runs is a field of rosenna.strategy.Tuning
    (set per GPU by the profile, --tune on the command line); a module-level number in emit/ or
    limits.py is a named fact of the hardware, an ABI or a format, or a budget, and says so."""
    files = sorted(ROOT.joinpath("emit").rglob("*.py")) + [ROOT / "limits.py"]
    assert len(files) > 40, "the scan should see every module of rosenna/emit"
    found, facts = [], 0
    for path in files:
        source = path.read_text()
        found += [f"{path.relative_to(ROOT.parent)}:{line}: {name}" for line, name in _tuning_constants(source)]
        facts += len(re.findall(r"^#: (Fact|Budget|Default of)", source, re.M))
    assert not found, ("module-level numbers in emit/ or limits.py: make each a field of rosenna.strategy.Tuning, or "
                       "say in its '#:' comment that it is a Fact (hardware, ABI, format) or a Budget: " + "; ".join(found))
    assert facts >= 5, "the documented facts are where this test expects them"


def test_the_constant_check_finds_a_tuning_constant():
    source = ("THREADS = 256\nSMEM = 16 * 1024\nTILES = {'a': (4, 2)}\n_DEFAULT = Tuning()\nGUARD = '#if X'\n"
              "#: Fact: 32 lanes per warp.\nWARP = 32\n#: Threads per block.\nBLOCK = 128\nlimit = 5\n"
              "#: Budget: a cap against\n#: hostile input.\nMAX_NESTS = 1024\nNAMES = ('a', 'b')\n")
    assert [name for _, name in _tuning_constants(source)] == ["THREADS", "SMEM", "TILES", "_DEFAULT", "BLOCK"]
