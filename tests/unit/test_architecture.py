"""The import rules of docs/architecture.md, checked against the code.

* The pure cores (PURE_CORES of sluice/architecture.py) import no grpc, kazoo
  or pyspark: each core is imported in a fresh interpreter (one per core, so a
  failure names the core that pulled the module in, with the import chain from
  this repository).
* jobmanager/ and taskmanager/ never import each other, and sluice/ imports
  neither: checked statically with `ast` over every .py file, so imports
  inside functions and under `if TYPE_CHECKING:` count too.
* A task knows operators only through `Operator` and `Source`: nothing under
  taskmanager/network/ imports taskmanager/operators/, and the task's modules
  (`TASK_MODULES`) import no concrete operator or source class (a hook on the
  base classes replaces each `isinstance`).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sluice import architecture

ROOT = Path(__file__).resolve().parents[2]

# The one list of pure cores, shared with the docs' table and mypy's strict override.
PURE_CORES = tuple(architecture.PURE_CORES)
EDGE_LIBRARIES = architecture.EDGE_LIBRARIES

# The task and the parts it is split into (taskmanager/task.py)
TASK_MODULES = (
    "taskmanager/task.py",
    "taskmanager/operator_chain.py",
    "taskmanager/checkpointer.py",
    "taskmanager/event_time.py",
)

# Imports whose target is computed at run time cannot be checked statically.
# The one allowed in sluice/: `sluice jobmanager|taskmanager` (container entry
# points) run `<role>.server.main` through importlib in run_process().
DYNAMIC_IMPORT_SITES = {"sluice/cli/processes.py"}

# Runs in a fresh interpreter: import one core, report every edge-library module
# loaded and, for each top-level one, the frames in this repository that led to it.
_PROBE = r"""
import importlib, json, sys, traceback
root, core, edge = sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(","))
sys.path.insert(0, root)
chains = {}

class Witness:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in edge and top not in chains:
            chains[top] = [f"{f.filename[len(root) + 1:]}:{f.lineno}: {f.line}"
                           for f in traceback.extract_stack()[:-1] if f.filename.startswith(root + "/")]
        return None

sys.meta_path.insert(0, Witness())
importlib.import_module(core)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in edge)
print(json.dumps({"loaded": loaded, "chains": chains}))
"""


@pytest.mark.parametrize("core", PURE_CORES)
def test_pure_core_imports_no_grpc_kazoo_or_pyspark(core):
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT), core, ",".join(EDGE_LIBRARIES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"importing {core} failed:\n{proc.stderr}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if report["loaded"]:
        how = "\n".join(
            f"  {top}, imported via:\n    " + "\n    ".join(chain or ["(outside this repository)"])
            for top, chain in sorted(report["chains"].items())
        )
        pytest.fail(
            f"pure core {core} must not import {', '.join(EDGE_LIBRARIES)}, but loading it loaded "
            f"{', '.join(report['loaded'][:10])}{' ...' if len(report['loaded']) > 10 else ''}\n{how}\n"
            "Keep I/O in the adapters (servicers, dispatcher, job_master, task, server): "
            "the core takes events and returns actions."
        )


# -- static import graph ---------------------------------------------------------------------
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool = False) -> tuple[list[tuple[str, int]], list[int]]:
    """(imported module names with line numbers, line numbers of imports with a computed target)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    dynamic: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((arg.value, node.lineno))
                else:
                    dynamic.append(node.lineno)
    return found, dynamic


def _package_imports(package: str) -> dict[str, tuple[list[tuple[str, int]], list[int]]]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        out[rel] = imports_of(path.read_text(), _module_name(path), is_package=path.name == "__init__.py")
    return out


def _offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    """`file:line imports module`, one per offending import statement."""
    worst: dict[tuple[str, int], str] = {}
    for rel, (found, _dynamic) in _package_imports(package).items():
        for name, line in found:
            if name.split(".")[0] in forbidden and len(name) > len(worst.get((rel, line), "")):
                worst[(rel, line)] = name
    return [f"{rel}:{line} imports {name}" for (rel, line), name in sorted(worst.items())]


def test_static_scan_sees_lazy_relative_and_importlib_imports():
    source = (
        "import os\n"
        "def f():\n    from taskmanager.task import Task\n"
        "from . import sibling\n"
        "from ..other import thing\n"
        "import importlib\nimportlib.import_module('jobmanager.server')\n"
        "importlib.import_module(f'{role}.server')\n"
    )
    found, dynamic = imports_of(source, "sluice.cli.example")
    names = {name for name, _ in found}
    assert {
        "os",
        "taskmanager.task",
        "sluice.cli",
        "sluice.cli.sibling",
        "sluice.other.thing",
        "jobmanager.server",
    } <= names
    assert dynamic == [8]


def test_static_scan_covers_the_packages():
    dispatcher = dict(_package_imports("jobmanager"))["jobmanager/dispatcher.py"][0]
    assert "jobmanager.job_master" in {name for name, _ in dispatcher}
    for package in ("sluice", "jobmanager", "taskmanager"):
        assert len(_package_imports(package)) > 3, f"no Python files found under {package}/"


def test_jobmanager_never_imports_taskmanager():
    bad = _offenders("jobmanager", ("taskmanager",))
    assert not bad, (
        "jobmanager/ must not import taskmanager/ (they talk over gRPC only; shared code "
        "belongs in sluice/):\n  " + "\n  ".join(bad)
    )


def test_taskmanager_never_imports_jobmanager():
    bad = _offenders("taskmanager", ("jobmanager",))
    assert not bad, (
        "taskmanager/ must not import jobmanager/ (they talk over gRPC only; shared code "
        "belongs in sluice/):\n  " + "\n  ".join(bad)
    )


def test_sluice_imports_neither_jobmanager_nor_taskmanager():
    bad = _offenders("sluice", ("jobmanager", "taskmanager"))
    assert not bad, (
        "sluice/ (job API, client, CLI, shared plumbing) must not import jobmanager/ or "
        "taskmanager/:\n  " + "\n  ".join(bad)
    )


def test_sluice_loads_modules_by_computed_name_only_where_allowed():
    sites = {rel: lines for rel, (_found, lines) in _package_imports("sluice").items() if lines}
    unexpected = {rel: lines for rel, lines in sites.items() if rel not in DYNAMIC_IMPORT_SITES}
    assert not unexpected, (
        f"imports with a computed module name in {unexpected} escape the static check; "
        "use a plain import, or, if it loads neither jobmanager nor taskmanager, "
        "add the file to DYNAMIC_IMPORT_SITES"
    )


def _runtime_imports(source: str) -> list[str]:
    """The modules `source` imports when it runs (at module level or inside functions), leaving
    out those under `if TYPE_CHECKING:`, which are for annotations only."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.extend([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def test_the_job_api_modules_import_each_other_without_a_cycle():
    """sluice/api/: the environment builds on the streams, the streams on joins and windowing,
    all of them on the stream graph (sluice/api/stream_graph.py) and the argument checks; no
    module imports one that imports it back, not even inside a function."""
    api = sorted((ROOT / "sluice" / "api").glob("*.py"))
    modules = {_module_name(path): path for path in api if path.name != "__init__.py"}
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        imported = _runtime_imports(path.read_text())
        edges[module] = {name for name in imported if name in modules and name != module}
    assert len(modules) > 4 and any(edges.values()), "the scan found no job API modules or imports"
    done: set[str] = set()

    def walk(module: str, trail: list[str]) -> None:
        if module in trail:
            cycle = " -> ".join([*trail[trail.index(module) :], module])
            pytest.fail(f"the job API modules import each other in a circle: {cycle}")
        if module in done:
            return
        for target in sorted(edges[module]):
            walk(target, [*trail, module])
        done.add(module)

    for module in sorted(modules):
        walk(module, [])


def test_the_network_never_imports_operators():
    found = _package_imports("taskmanager")
    bad = [
        f"{rel}:{line} imports {name}"
        for rel, (names, _dynamic) in found.items()
        if rel.startswith("taskmanager/network/")
        for name, line in names
        if name == "taskmanager.operators" or name.startswith(("taskmanager.operators.", "taskmanager.connectors"))
    ]
    assert not bad, (
        "taskmanager/network/ must not import operators (what it needs of one is in "
        "taskmanager/network/combiner.py):\n  " + "\n  ".join(bad)
    )


def test_the_task_imports_no_concrete_operator():
    import importlib

    from taskmanager.operators.base import Operator, Source

    found = _package_imports("taskmanager")
    assert set(TASK_MODULES) <= set(found), "a task module is missing: update TASK_MODULES"
    bad = []
    for rel in TASK_MODULES:
        for name, line in found[rel][0]:
            if not name.startswith(("taskmanager.operators", "taskmanager.connectors")):
                continue
            module, _, attr = name.rpartition(".")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError, ValueError):
                continue  # a module itself, not a name in one
            if isinstance(obj, type) and issubclass(obj, (Operator, Source)) and obj not in (Operator, Source):
                bad.append(f"{rel}:{line} imports {name}")
    assert not bad, (
        "the task knows operators only through Operator and Source (taskmanager/operators/base.py): "
        "add a hook there instead of importing the concrete class:\n  " + "\n  ".join(bad)
    )


@pytest.mark.parametrize("package", ["jobmanager/reconfiguration", "jobmanager/connectors"])
def test_reconfiguration_and_connectors_see_the_job_master_only_through_their_ports(package):
    """They talk to a narrow port (reconfiguration/port.py, connectors/splits.py's ConnectorPort),
    never to the whole JobMaster: no import of jobmanager.job_master, at run time or for types."""
    bad = [
        f"{rel}:{line} imports {name}"
        for rel, (found, _dynamic) in _package_imports(package).items()
        for name, line in found
        if name == "jobmanager.job_master" or name.startswith("jobmanager.job_master.")
    ]
    assert not bad, f"{package}/ must not import jobmanager.job_master:\n  " + "\n  ".join(bad)
