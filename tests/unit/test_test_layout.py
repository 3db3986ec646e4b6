"""The shape of the test suite (CONTRIBUTING.md "Run the tests"): no test module imports another
(shared helpers live in modules without the `test_` prefix: tests/helpers.py, the harness, the
contract suites, tests/unit/*_scripts.py), every test under tests/integration/ takes a cluster
only through the fixtures of tests/integration/conftest.py or says why it starts its own, and
the tiers' start budgets stay written down."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
INTEGRATION = TESTS / "integration"


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "jobs" not in p.relative_to(TESTS).parts)


def _imported(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def test_no_test_module_imports_another():
    modules = _test_modules()
    assert len(modules) > 50, "the scan found too few test modules"
    bad = [
        f"{path.relative_to(TESTS)}:{line} imports {name}"
        for path in modules
        for line, name in _imported(ast.parse(path.read_text()))
        if name.split(".")[-1].startswith("test_") or name.split(".")[0] in ("unit", "integration", "tests")
    ]
    assert not bad, (
        "a test module imports another one; move what both need into a helper module (tests/helpers.py, "
        "tests/integration/harness.py, page_view_jobs.py, tests/unit/*_scripts.py):\n  " + "\n  ".join(bad)
    )


def _own_cluster_starts(tree: ast.Module) -> list[ast.FunctionDef]:
    """The functions (fixtures, tests) that start a cluster themselves."""
    starters = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
            strings = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name in ("running_cluster", "LocalCluster") or strings[:2] == ["cluster", "start"]:
                starters.append(node)
                break
    return starters


def test_a_cluster_of_its_own_says_why():
    """The shared `cluster` fixture is the default; a module-level function that starts a
    cluster of another shape names the reason in its docstring or in its module's docstring."""
    silent = []
    for path in sorted(INTEGRATION.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_doc = ast.get_docstring(tree) or ""
        for fn in _own_cluster_starts(tree):
            if not (ast.get_docstring(fn) or "own" in module_doc or "its own" in module_doc):
                silent.append(f"{path.relative_to(TESTS)}:{fn.lineno} {fn.name}")
    assert not silent, (
        "these start a cluster of their own without saying why (a docstring: two JobManagers, options, "
        "--insecure, a crash of the whole cluster...); or take the shared `cluster` fixture:\n  " + "\n  ".join(silent)
    )


def test_every_tier_has_a_cluster_start_budget():
    tree = ast.parse((INTEGRATION / "conftest.py").read_text())
    [budget] = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CLUSTER_START_BUDGET" for t in node.targets)
    ]
    tiers = ast.literal_eval(budget)
    assert set(tiers) == {"cluster", "chaos"} and all(isinstance(n, int) and n >= 1 for n in tiers.values())
