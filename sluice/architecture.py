"""The parts of docs/architecture.md that are generated from the code, and their one source.

* `PURE_CORES`: the modules that take events and return actions, with no I/O, thread or clock,
  and import no `grpc`, `kazoo` or `pyspark`. The one list: docs/architecture.md's table of
  pure cores is rendered from it (`pure_cores_reference`), tests/unit/test_architecture.py
  imports each in a fresh interpreter, and tests/unit/test_architecture_doc.py checks that
  mypy's strict override in pyproject.toml covers each.
* `enums_reference`: every `StrEnum` of the three packages, its proto enum and its transition
  table, found by reading the sources with `ast` (sluice/ imports neither jobmanager/ nor
  taskmanager/, so their enums are read, not imported).
* `operator_kinds_reference`: every `OperatorKind`, with its role, the job code it carries and
  the TaskManager class that runs it (read from taskmanager/operators/registry.py `OPERATORS`
  and taskmanager/operators/sources.py `SOURCES`).

`python -m sluice.reference_docs docs/architecture.md` (part of `make docs-config`) writes the
blocks; tests/unit/test_architecture_doc.py fails when one is stale.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_PACKAGES = ("sluice", "jobmanager", "taskmanager")
EDGE_LIBRARIES = ("grpc", "kazoo", "pyspark")

# module -> what it decides. A pure core takes events (or plain values) and returns actions (or
# values): no I/O, no threads, no clock, none of EDGE_LIBRARIES; mypy checks it strictly.
PURE_CORES: dict[str, str] = {
    "jobmanager.checkpoint.coordinator": "one job attempt's checkpoints: trigger, acks, persist, notify, discard",
    "jobmanager.checkpoint.shared_registry": "which shared files of incremental checkpoints are still referenced",
    "jobmanager.scheduler.slot_pool": "which TaskManagers are alive and which job holds which slot",
    "jobmanager.scheduler.execution_graph": "the life of one job attempt's executions: the event handlers",
    "jobmanager.scheduler.execution_graph_events": "the execution graph's events and actions",
    "jobmanager.scheduler.execution_graph_state": "the execution graph's transition tables, model and queries",
    "jobmanager.scheduler.restart_strategy": "whether, and after how long, a failed job restarts",
    "jobmanager.scheduler.pipelined_regions": "pipelined regions and the regions a failure restarts",
    "jobmanager.scheduler.taskmanager_losses": "which TaskManager losses count against a job",
    "jobmanager.reconfiguration.plan": "what a live reconfiguration redeploys or switches; the new graph",
    "jobmanager.reconfiguration.protocol": "the live reconfiguration protocol, with its abort and failure paths",
    "jobmanager.declarative.translate": "a declarative job made into the job graph the Python API builds",
    "jobmanager.rest.views": "protos shaped into the REST API's Flink-shaped JSON",
    "jobmanager.connectors.coordinator": "split assignment of a connector source, per subtask, with its valve",
    "sluice.checkpoints.retained": "a retained checkpoint's directory read as a savepoint",
    "sluice.checkpoints.rescale": "inline operator state moved to another parallelism",
    "sluice.checkpoints.shared_names": "a shared state file's name, and the checkpoint id it carries",
    "sluice.cli.spark_plan": "the argv, environment and readiness lines of a local Spark cluster",
    "sluice.connectors.enumerators": "the built-in split enumerators the JobManager runs",
    "sluice.key_partitioning": "which edges stay keyed; the validator's rule for keyed sinks",
    "taskmanager.slot_table": "a TaskManager's own view of its slots",
    "taskmanager.barrier_aligner": "barrier alignment of a task with several inputs",
    "sluice.kinds.table": "one descriptor per operator kind: role, keyed, code, checks, schema, rescale rule",
    "sluice.kinds.redistribution": "how each kind's inline state redistributes on a rescale",
    "sluice.kinds.config_checks": "each kind's config checks, naming the field",
    "sluice.kinds.input_checks": "each kind's input-shape and column checks",
    "sluice.kinds.output_schemas": "each kind's output columns",
    "sluice.api.stream_graph": "the job API's graph builder: operators, edges, schemas, the job graph",
    "sluice.api.arguments": "argument checks shared by the job API's modules",
    "jobmanager.checkpoint.events": "the checkpoint coordinator's config, events, actions and results",
    "jobmanager.checkpoint.savepoints": "savepoint requests and their records; a savepoint target checked",
    "jobmanager.master.status": "a job's status computed from a snapshot of its JobMaster",
    "jobmanager.master.exception_history": "a job's bounded exception history",
    "jobmanager.master.failover": "whether a failed task restarts its region, the job, or fails it",
    "jobmanager.master.deployment": "task deployment descriptors, restore states, partition ids and tags",
    "jobmanager.job_listing": "ListJobs paging and summaries; the cluster overview",
    "taskmanager.operators.malformed_checks": "what makes a CSV or JSON row malformed beyond Spark's parser",
    "taskmanager.state.changelog": "which files an incremental keyed-aggregate checkpoint writes and references",
}


def module_file(module: str) -> str:
    """`a.b.c` -> `a/b/c.py` (the file, relative to the repository)."""
    return module.replace(".", "/") + ".py"


def product_modules() -> list[str]:
    """Every Python file of the three packages, relative paths, without the generated stubs."""
    return sorted(
        p.relative_to(ROOT).as_posix()
        for package in PRODUCT_PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if "_pb2" not in p.name
    )


def pure_cores_reference() -> str:
    """The pure cores by folder (what each decides: PURE_CORES here, and its module docstring)."""
    folders: dict[str, list[str]] = {}
    for module in PURE_CORES:
        folder, _, name = module_file(module).rpartition("/")
        folders.setdefault(folder, []).append(f"`{name}`")
    rows = ["| folder | pure cores |", "|---|---|"]
    rows += [f"| `{folder}/` | {', '.join(names)} |" for folder, names in sorted(folders.items())]
    return "\n".join(rows)


# -- enums ------------------------------------------------------------------------------------
def _str_enums() -> Iterator[tuple[str, str, list[str], str]]:
    """(class, file, member names, transition table "NAME in file") of every StrEnum."""
    trees = {path: ast.parse((ROOT / path).read_text(encoding="utf-8")) for path in product_modules()}
    tables: dict[str, list[str]] = {}  # enum name -> "TABLE in file"
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                annotation = ast.unparse(node.annotation)
                if node.target.id.endswith("TRANSITIONS") and annotation.startswith("dict["):
                    key = annotation.removeprefix("dict[").split(",")[0].strip()
                    tables.setdefault(key, []).append(f"`{node.target.id}` in `{Path(path).name}`")
    for path, tree in trees.items():
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in cls.bases}
            if "StrEnum" not in bases:
                continue
            members = [
                s.targets[0].id
                for s in cls.body
                if isinstance(s, ast.Assign)
                and isinstance(s.targets[0], ast.Name)
                and not s.targets[0].id.startswith("_")
            ]
            yield cls.name, path, members, ", ".join(tables.get(cls.name, [])) or "—"


def _proto_names() -> dict[str, str]:
    """Python enum name -> its proto enum's name, for the sets that cross a process."""
    from sluice import states
    from sluice.graph import OperatorKind  # importing sluice.graph registers its enums

    assert OperatorKind in states._PROTO
    return {cls.__name__: wrapper.DESCRIPTOR.name for cls, (wrapper, _prefix) in states._PROTO.items()}


def enums_reference() -> str:
    proto = _proto_names()
    rows = ["| enum | in | proto enum | members | transitions |", "|---|---|---|---|---|"]
    for name, path, members, transitions in sorted(_str_enums(), key=lambda e: (e[1], e[0])):
        rows.append(
            f"| `{name}` | `{path}` | {f'`{proto[name]}`' if name in proto else 'local'} "
            f"| {', '.join(members)} | {transitions} |"
        )
    return "\n".join(rows)


# -- operator kinds ---------------------------------------------------------------------------
def _kind_table(path: str, name: str) -> dict[str, str]:
    """`{OperatorKind.X: Cls, ...}` assigned to `name` at the top of `path`: member -> class name."""
    for node in ast.parse((ROOT / path).read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and isinstance(node.value, ast.Dict)
        ):
            return {
                k.attr: ast.unparse(v)
                for k, v in zip(node.value.keys, node.value.values, strict=True)
                if isinstance(k, ast.Attribute)
            }
    raise LookupError(f"{path} has no table {name} of OperatorKind -> class")


def operator_kinds_reference() -> str:
    from sluice import graph

    operators = _kind_table("taskmanager/operators/registry.py", "OPERATORS")
    sources = _kind_table("taskmanager/operators/sources.py", "SOURCES")
    rows = ["| kind | role | job code | runs as (TaskManager) |", "|---|---|---|---|"]
    for kind in graph.OperatorKind:
        role = "source" if kind in graph.SOURCE_KINDS else "sink" if kind in graph.SINK_KINDS else "transform"
        if kind in graph.KEYED_KINDS:
            role += ", after `key_by`"
        code = ", ".join(f"`{c}`" for c in sorted(graph.CODE_SETTINGS.get(kind, ()))) or "—"
        runs = operators.get(kind.name) or sources.get(kind.name)
        if runs is None and kind == graph.OperatorKind.SOURCE_CONNECTOR:
            runs = "ConnectorSource"  # built by Task from the unpickled Source (taskmanager/connectors/source.py)
        rows.append(f"| `{kind.name}` | {role} | {code} | `{runs or '?'}` |")
    return "\n".join(rows)
