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
* Size (issue 32): no module of the three packages (the generated `*_pb2*` stubs left out)
  has more than MAX_MODULE_LINES lines, and no class there more than MAX_CLASS_ATTRIBUTES
  attributes, counted with `ast` (`class_attributes`): the names assigned as `self.<name>`
  anywhere in the class body, and its class-level annotated fields (dataclass and NamedTuple
  fields; not `ClassVar`s). Enum classes are left out: their members are not attributes.
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
            for branch in node.orelse:
                visit(branch)
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


# -- size: modules and classes ----------------------------------------------------------------
MAX_MODULE_LINES = 600
MAX_CLASS_ATTRIBUTES = 25
ENUM_BASES = frozenset({"Enum", "StrEnum", "IntEnum", "Flag", "IntFlag"})


def _base_name(node: ast.expr) -> str:
    """`Enum`, `enum.Enum` and `Generic[T]` -> the class's own name (`Enum`, `Enum`, `Generic`)."""
    if isinstance(node, ast.Subscript):
        return _base_name(node.value)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def class_attributes(cls: ast.ClassDef) -> set[str]:
    """The attributes of `cls`: its class-level annotated fields (not `ClassVar`s) and every name
    assigned as `self.<name>` in its body (methods, nested functions; not nested classes, which
    are counted on their own)."""
    names = {
        stmt.target.id
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and _base_name(stmt.annotation) != "ClassVar"
        and not (isinstance(stmt.annotation, ast.Constant) and "ClassVar" in str(stmt.annotation.value))
    }

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                continue
            if (
                isinstance(child, ast.Attribute)
                and isinstance(child.ctx, ast.Store)
                and isinstance(child.value, ast.Name)
                and child.value.id == "self"
            ):
                names.add(child.attr)
            visit(child)

    for stmt in cls.body:
        if not isinstance(stmt, ast.ClassDef):
            visit(stmt)
    return names


def classes_and_attributes(trees: dict[str, ast.Module]) -> list[tuple[str, str, set[str]]]:
    """(file, class, attributes) of every class but the enums, nested classes included. A class
    is an enum when a base is one of ENUM_BASES or an enum class of these files."""
    classes = [(rel, node) for rel, tree in trees.items() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    enums = set(ENUM_BASES)
    grew = True
    while grew:  # an enum's subclass is an enum too, wherever it is defined
        found = {cls.name for _rel, cls in classes if {_base_name(b) for b in cls.bases} & enums}
        grew, enums = not found <= enums, enums | found
    return [(rel, cls.name, class_attributes(cls)) for rel, cls in classes if cls.name not in enums]


def _product_trees() -> dict[str, ast.Module]:
    return {rel: ast.parse((ROOT / rel).read_text(encoding="utf-8")) for rel in architecture.product_modules()}


def test_the_attribute_count_sees_fields_self_assignments_and_leaves_out_enums():
    source = (
        "import dataclasses, enum\n"
        "from typing import ClassVar\n"
        "@dataclasses.dataclass\n"
        "class Fields:\n    a: int\n    b: 'ClassVar[int]' = 0\n    c: ClassVar[int] = 0\n    d = 1\n"
        "class Plain:\n"
        "    def __init__(self):\n        self.a, (self.b, x) = 1, (2, 3)\n        self.c: int = 0\n"
        "        other.d = 1\n        print(self.e)\n"
        "    def grow(self):\n        self.a += 1\n        for self.f in ():\n            pass\n"
        "        def inner():\n            self.g = 1\n"
        "        class Nested:\n            def __init__(self):\n                self.h = 1\n"
        "class Colour(enum.StrEnum):\n    RED: str = 'red'\n"
        "class Shade(Colour):\n    pass\n"
    )
    found = {name: attrs for _rel, name, attrs in classes_and_attributes({"example.py": ast.parse(source)})}
    assert found == {"Fields": {"a"}, "Plain": {"a", "b", "c", "f", "g"}, "Nested": {"h"}}


def test_no_module_is_over_600_lines():
    modules = architecture.product_modules()
    assert len(modules) > 50 and not any("_pb2" in rel for rel in modules), "the scan found the wrong modules"
    long = {
        rel: n
        for rel in modules
        if (n := len((ROOT / rel).read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, (
        f"modules over {MAX_MODULE_LINES} lines: "
        + ", ".join(f"{rel} ({n} lines)" for rel, n in sorted(long.items()))
        + ". Split each along a seam into modules of one concern (as jobmanager/master/ did for the "
        "JobMaster) and give each new module its line in the code map of docs/architecture.md."
    )


def test_no_bench_test_or_example_module_is_over_600_lines():
    """The same limit for the code around the product: the benchmark harness and its suites, the
    tests and their helpers, the examples (generated `_pb2` modules aside)."""
    files = [p for d in ("bench", "tests", "examples") for p in (ROOT / d).rglob("*.py") if "_pb2" not in p.name]
    assert len(files) > 200, "the scan found the wrong files"
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, (
        f"files over {MAX_MODULE_LINES} lines: "
        + ", ".join(f"{rel} ({n} lines)" for rel, n in sorted(long.items()))
        + '. Split a suite into its declaration, its runs and its report (bench/README.md "Harness"), '
        "a test module by concern with shared helpers in a module without the test_ prefix."
    )


def test_no_class_has_more_than_25_attributes():
    classes = classes_and_attributes(_product_trees())
    assert len(classes) > 100, "the scan found no classes"
    big = sorted((c for c in classes if len(c[2]) > MAX_CLASS_ATTRIBUTES), key=lambda c: (c[0], c[1]))
    assert not big, (
        f"classes with more than {MAX_CLASS_ATTRIBUTES} attributes (self.<name> assignments and annotated "
        "fields):\n  "
        + "\n  ".join(f"{rel}: {name} has {len(attrs)}: {', '.join(sorted(attrs))}" for rel, name, attrs in big)
        + "\nGroup attributes that change together into a small helper class or a frozen dataclass "
        "(as FileSource's ContinuousFileMonitor and FileFormatReader, JobSnapshot's CheckpointStatsSnapshot "
        "and RestartStatus, ExecutionGraphState's RegionRestart) and keep the class's public names."
    )
