"""Invariants of docs/architecture.md ("The rules, in one place") that are checked by scanning
the source with `ast`:

* One vocabulary: code compares enum members, never a string literal that spells one. Every
  `==`, `!=`, `in` or `not in` of the product packages whose operand is a string literal (or a
  literal tuple, list or set of them) equal to a value of one of the project's `StrEnum`s is
  an offence, unless it is listed in STRING_COMPARISONS_ALLOWED with the reason it is another
  vocabulary that happens to share a word.
* cluster.json is read and written only through `ClusterFile` (sluice/cluster_file.py): no
  other file of the product packages, `bench/` or the integration tests builds its path.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("sluice", "jobmanager", "taskmanager")


def _python_files(*folders: str) -> list[Path]:
    return [
        p
        for folder in folders
        for p in sorted((ROOT / folder).rglob("*.py"))
        if "_pb2" not in p.name and ".venv" not in p.parts
    ]


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- one vocabulary --------------------------------------------------------------------------
def enum_values(files: list[Path]) -> dict[str, list[str]]:
    """value -> ["Class.MEMBER", ...] of every `StrEnum` subclass defined in `files`."""
    out: dict[str, list[str]] = {}
    for path in files:
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
            if "StrEnum" not in bases:
                continue
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                    and isinstance(stmt.targets[0], ast.Name)
                ):
                    out.setdefault(stmt.value.value, []).append(f"{node.name}.{stmt.targets[0].id}")
    return out


def _literals(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _oneof_names(tree: ast.AST) -> set[str]:
    """Names bound to `x.WhichOneof(...)`: a proto oneof's field name, a vocabulary of its own."""
    return {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "WhichOneof"
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def string_comparisons(source: str | ast.Module, values: dict[str, list[str]]) -> Iterator[tuple[int, str, str]]:
    """(line, literal, the comparison) for each comparison of a literal that spells an enum value.

    `literal in x` with a non-literal `x` (a key looked up in a mapping) does not count, nor does a
    comparison with a proto oneof's field name (`kind = msg.WhichOneof(...)`)."""
    tree = ast.parse(source) if isinstance(source, str) else source
    oneofs = _oneof_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands[:-1], operands[1:], strict=True):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                sides = [(left, right), (right, left)]
            elif isinstance(op, (ast.In, ast.NotIn)):
                sides = [(right, left)] if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else []
            else:
                continue
            for literal_side, other in sides:
                if isinstance(other, ast.Name) and other.id in oneofs:
                    continue
                if isinstance(other, ast.Call) and getattr(other.func, "attr", "") == "WhichOneof":
                    continue
                for literal in _literals(literal_side):
                    if literal in values:
                        yield node.lineno, literal, ast.unparse(node)


# (file, literal) -> why the word is not the enum's. A new entry needs a reason of that kind;
# an enum's own value compared as a string is fixed instead.
STRING_COMPARISONS_ALLOWED: dict[tuple[str, str], str] = {
    ("sluice/cli/job_file.py", "map"): "a DDL type name (map<k, v>), not OperatorKind.MAP",
    ("sluice/cli/main.py", "status"): "a CLI subcommand name, not ItemKind.STATUS",
    ("sluice/graph.py", "batch"): "the job option execution.runtime-mode, not ItemKind.BATCH",
    ("sluice/connectors/enumerators.py", "hash"): "a split assignment policy, not Partitioning.HASH",
    ("sluice/config.py", "taskmanager"): "a process role of config.ROLES (an option's roles), not a TLS Role",
    ("jobmanager/server.py", "jobmanager"): "a process role of config.ROLES (an option's roles), not a TLS Role",
    ("taskmanager/server.py", "taskmanager"): "a process role of config.ROLES (an option's roles), not a TLS Role",
}


def test_the_scan_finds_literal_comparisons_and_skips_other_vocabularies():
    values = {"rocksdb": ["StateBackend.ROCKSDB"], "end": ["ItemKind.END"], "batch": ["ItemKind.BATCH"]}
    source = (
        "if h.get('backend') == 'rocksdb': pass\n"
        "if 'rocksdb' != backend: pass\n"
        "if backend in ('memory', 'rocksdb'): pass\n"
        "if 'end' in data: pass\n"  # a key of a mapping
        "kind = msg.WhichOneof('kind')\n"
        "if kind == 'batch': pass\n"  # a oneof's field name
        "if x == 'other': pass\n"
    )
    assert [line for line, _, _ in string_comparisons(source, values)] == [1, 2, 3]


def test_the_scan_knows_the_projects_enums():
    values = enum_values(_python_files(*PRODUCT_PACKAGES))
    assert "StateBackend.ROCKSDB" in values["rocksdb"]
    assert "JobStatus.RUNNING" in values["RUNNING"]
    assert "OperatorKind.MAP" in values["map"]


def test_code_compares_enum_members_never_string_literals():
    files = _python_files(*PRODUCT_PACKAGES)
    values = enum_values(files)
    found: set[tuple[str, str]] = set()
    offences = []
    for path in files:
        for line, literal, text in string_comparisons(_tree(path), values):
            key = (_rel(path), literal)
            found.add(key)
            if key not in STRING_COMPARISONS_ALLOWED:
                offences.append(f"{_rel(path)}:{line}: {text}  ('{literal}' is {', '.join(values[literal])})")
    assert not offences, (
        "compare enum members, not string literals (docs/architecture.md, One vocabulary):\n  "
        + "\n  ".join(offences)
        + "\nuse the member (a StrEnum member equals its value), or, if the word belongs to another "
        "vocabulary, list it in STRING_COMPARISONS_ALLOWED with the reason"
    )
    stale = sorted(set(STRING_COMPARISONS_ALLOWED) - found)
    assert not stale, f"STRING_COMPARISONS_ALLOWED lists comparisons that are gone; remove them: {stale}"


# -- cluster.json only through ClusterFile -----------------------------------------------------
CLUSTER_FILE_HOME = "sluice/cluster_file.py"


def _opens_cluster_json(source: str | ast.Module) -> list[int]:
    """Lines where `"cluster.json"` is a path being built (`join(d, "cluster.json")`,
    `f"{d}/cluster.json"`): a string literal, or the last part of an f-string, that is the file
    name; docstrings, comments and messages that only mention it do not count."""
    tree = ast.parse(source) if isinstance(source, str) else source
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (node.value == "cluster.json" or node.value.endswith("/cluster.json"))
    ]


def test_cluster_json_is_read_only_through_cluster_file():
    files = [*_python_files(*PRODUCT_PACKAGES, "bench", "tests/integration")]
    readers = sorted(
        f"{_rel(p)}:{line}" for p in files if _rel(p) != CLUSTER_FILE_HOME for line in _opens_cluster_json(_tree(p))
    )
    assert not readers, (
        "cluster.json is read and written only through ClusterFile (sluice/cluster_file.py: "
        "ClusterFile.read(dir), .write(dir)); these files name it as a path:\n  " + "\n  ".join(readers)
    )
    assert _opens_cluster_json(_tree(ROOT / CLUSTER_FILE_HOME)), "ClusterFile no longer names cluster.json"
