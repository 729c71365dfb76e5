import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import models  # noqa: E402

# generate's fsyncs (rosenna.outdir) cost ~80 ms a model here; the suite's output is scratch
os.environ.setdefault("ROSENNA_NO_FSYNC", "1")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """One directory of test models per xdist worker (each worker writes its own)."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def model(model_dir):
    """``model("gemm_small")`` -> path of the test model, written once per worker."""
    return lambda name: models.write(name, model_dir)


def have(tool):
    return shutil.which(tool) is not None




# -- test tiers ----------------------------------------------------------------------------------
# Each test gets the markers of what it needs (registered in setup.cfg): host (builds or runs code
# with gcc/gfortran/make), nvcc, hipcc, gpu. They are read off the test's own source and that of
# the module-level helpers it calls, and off its skip conditions, so a new test is tiered without
# anyone remembering to: `pytest -m "not nvcc and not hipcc"` runs where no device compiler is.
import ast  # noqa: E402
import inspect  # noqa: E402

_TIER_WORDS = {
    "nvcc": ("nvcc",),
    "hipcc": ("hipcc",),
    "gpu": ("nvidia-smi", "CUDA_VISIBLE_DEVICES", "needs a GPU"),
    "host": ("gcc", "gfortran", '"make"', "'make'", "subprocess", "run_packing", "compile", "verify(", "_build(",
             "conformance.run("),
}


_TESTS = os.path.dirname(os.path.abspath(__file__))


def _test_text(item, cache={}):
    fn = getattr(item, "function", None)
    if fn is None:
        return ""
    key = (item.module.__name__, fn.__name__)
    if key not in cache:
        try:
            text = inspect.getsource(fn)
            called = {n.func.id for n in ast.walk(ast.parse(inspect.cleandoc("\n" + text)))
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            for name in called:  # helpers of the test suite, from its own file or another one
                helper = getattr(item.module, name, None)
                if inspect.isfunction(helper) and \
                        os.path.dirname(os.path.abspath(inspect.getsourcefile(helper))) == _TESTS:
                    text += inspect.getsource(helper)
            for _, fixture in _module_fixtures(item):  # what its own file's fixtures run, it needs too
                text += _fixture_text(fixture)
        except (OSError, TypeError, SyntaxError):
            text = ""
        reasons = " ".join(str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
        cache[key] = text + reasons
    return cache[key]


# tryfirst: the groups must be marked before xdist's worker hook reads them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        text = _test_text(item)
        for tier, words in _TIER_WORDS.items():
            if any(word in text for word in words) and not item.get_closest_marker(tier):
                item.add_marker(getattr(pytest.mark, tier))
    _schedule(items)
    _name_groups(config, items)


# -- scheduling on xdist workers -----------------------------------------------------------------
# `pytest -n auto` runs with `--dist loadgroup --no-loadscope-reorder` (setup.cfg): the workers get
# the tests one at a time in the order below. The tests of one file that use a module-scoped fixture
# of that file which builds or runs something (a host-tier word in its source: a conformance run, a
# sanitizer build) form one group that a single worker runs, so that fixture is made once, not once
# on each worker. The order, stable within each class: device compiles first (nvcc, hipcc: the
# longest tests), then host builds, then the rest (mostly short), groups first within a class, so
# that no long test starts while the other worker has nothing left to do. Without -n none of this
# changes what runs.
def _module_fixtures(item):
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    found = []
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name)
        func = getattr(defs[-1], "func", None) if defs else None
        if func is not None and getattr(func, "__module__", None) == item.module.__name__:
            found.append((defs[-1].scope, func))
    return found


def _fixture_text(func):
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):
        return ""


def _cost_class(item):
    if item.get_closest_marker("nvcc") or item.get_closest_marker("hipcc"):
        return 0
    return 1 if item.get_closest_marker("host") else 2


def _group_of(item):
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _name_groups(config, items):
    """On an xdist worker with --dist loadgroup: append each test's group to its node id, which is
    what the scheduler reads. xdist 3.8 does this by setting ``item._nodeid``; pytest 9.2 keeps the
    id in ``item._id`` and ignores ``_nodeid``, so without this every group was split between the
    workers and each built the group's fixture (the torch exports: 2 x 150 s). Older pytest: xdist
    does it itself."""
    if not getattr(config.option, "loadgroup", False) or not items or hasattr(items[0], "_nodeid"):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        group = _group_of(item)
        if group is not None and hasattr(item, "_id") and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{group}")


def _schedule(items):
    for item in items:
        shared = [func.__name__ for scope, func in _module_fixtures(item)
                  if scope == "module" and any(w in _fixture_text(func) for w in _TIER_WORDS["host"])]
        if shared and _group_of(item) is None:
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}.{shared[0]}"))
    group_class = {}
    for item in items:
        group = _group_of(item)
        if group is not None:
            group_class[group] = min(group_class.get(group, 2), _cost_class(item))
    # Within a class a group goes first: its fixture makes it the longer unit.
    items.sort(key=lambda item: (group_class[_group_of(item)], 0) if _group_of(item) in group_class
               else (_cost_class(item), 1))


# -- where the suite's CPU goes ------------------------------------------------------------------
# ROSENNA_TEST_CPU=FILE: each test appends one line to FILE, "cpu wall nodeid worker" (seconds; the
# xdist worker, "-" without -n), with the CPU of the test process (all its threads) and of the
# compilers and programs it waited for, from its first fixture's set-up to its last teardown. A
# module fixture's cost lands on the test that made it. Sum per file: `awk '{split($3, p, "::"); c[p[1]] += $1} END {for (f in c) print c[f], f}'
# FILE | sort -n`. Works with and without -n (each worker appends its own lines).
_CPU_LOG = os.environ.get("ROSENNA_TEST_CPU")


if _CPU_LOG:
    import resource  # noqa: E402
    import time  # noqa: E402

    def _cpu_now():
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        cpu, wall = _cpu_now(), time.monotonic()
        yield
        with open(_CPU_LOG, "a", encoding="utf-8") as log:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
            log.write(f"{_cpu_now() - cpu:.2f} {time.monotonic() - wall:.2f} {item.nodeid} {worker}\n")
