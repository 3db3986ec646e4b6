"""Every operator kind is complete: a descriptor (sluice/kinds/table.py) with its rules, a class
the TaskManager runs it with (taskmanager/operators/registry.py) and a rule for its inline
state on a rescale (sluice/kinds/redistribution.py); and the modules that read the table do
not branch on kinds themselves. A new kind fails here until each of those is there."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from sluice import graph
from sluice.checkpoints.rescale import RescaleError, redistribute
from sluice.kinds import config_checks, input_checks, output_schemas, redistribution
from sluice.kinds.table import DESCRIPTORS, OperatorKind, Role, descriptor, kinds
from sluice.v1 import common_pb2
from taskmanager.operators.base import Operator, Source
from taskmanager.operators.registry import OPERATORS, runtime_class

ROOT = Path(__file__).resolve().parents[2]
KINDS = list(OperatorKind)


def test_every_kind_has_one_descriptor_and_every_descriptor_a_kind():
    missing = [k.name for k in OperatorKind if k not in DESCRIPTORS]
    assert not missing, f"kinds without a descriptor in sluice/kinds/table.py DESCRIPTORS: {missing}"
    assert all(d.kind == k for k, d in DESCRIPTORS.items())
    assert len(DESCRIPTORS) == len(OperatorKind)


def test_every_kind_travels_in_the_proto_enum():
    wire = {name.removeprefix("OPERATOR_KIND_") for name in common_pb2.OperatorKind.keys()} - {"UNSPECIFIED"}
    assert {k.name for k in OperatorKind} == wire, "add the kind to proto/sluice/v1/common.proto (make proto)"


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_descriptor_names_a_rule_of_each_kind(kind):
    d = descriptor(kind)
    assert isinstance(d.role, Role)
    for rule, module in (
        (d.check_config, config_checks),
        (d.output_schema, output_schemas),
        (d.redistribute, redistribution),
        *((check, input_checks) for check in d.check_columns),
        *(((d.check_inputs, input_checks),) if d.check_inputs is not None else ()),
    ):
        assert callable(rule) and inspect.getmodule(rule) is module, f"{kind}: {rule!r} is not a rule of {module}"
    assert isinstance(d.code, frozenset) and all(isinstance(c, str) for c in d.code)
    assert (d.unbounded is not None) <= (d.role == Role.SOURCE), "only a source may be unbounded"
    assert d.keyed_sink <= (d.role == Role.SINK) and (d.routing_key is not None) <= d.keyed_sink
    assert not (d.keyed and d.check_inputs is not None), "a keyed kind follows key_by: its inputs are checked so"


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_every_kind_has_a_runtime_class_of_its_role(kind):
    cls = runtime_class(kind)
    assert cls is not None, f"{kind}: no class in taskmanager/operators/registry.py OPERATORS or sources.py SOURCES"
    if descriptor(kind).role == Role.SOURCE:
        assert issubclass(cls, Source) and kind not in OPERATORS
    else:
        assert issubclass(cls, Operator) and OPERATORS[kind] is cls
        assert cls.is_sink == (descriptor(kind).role == Role.SINK), f"{kind}: is_sink disagrees with its role"


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_every_kind_has_a_rescale_rule(kind):
    rule = descriptor(kind).redistribute
    assert inspect.getmodule(rule) is redistribution
    assert redistribute(kind, "op", [None, None], 3) == [None] * 3  # no state: nothing to move
    if rule is redistribution.refuse:
        with pytest.raises(RescaleError, match=rf"operator 'op' \({kind}\) holds state this version cannot move"):
            redistribute(kind, "op", [{"x": 1}, None], 3)
    else:
        assert len(redistribute(kind, "op", [_a_state(kind), None], 3)) == 3


def _a_state(kind: OperatorKind) -> dict:
    """A small inline state of `kind` as its runtime snapshots it."""
    states: dict[OperatorKind, dict] = {
        OperatorKind.SOURCE_FILES: {"offset": 1},
        OperatorKind.SOURCE_COLLECTION: {"offset": 1},
        OperatorKind.SOURCE_GENERATOR: {"offset": 1},
        OperatorKind.SINK_FILE: {"pending": []},
        OperatorKind.SINK_SQLITE: {"sink": "s", "subtask": 0, "pending": []},
    }
    return states.get(kind, {"watermark": 5})


def test_the_roles_partition_the_kinds_and_graph_groups_read_them():
    by_role = [set(kinds(role)) for role in Role]
    assert set().union(*by_role) == set(OperatorKind) and sum(map(len, by_role)) == len(OperatorKind)
    assert graph.SOURCE_KINDS == kinds(Role.SOURCE) and graph.SINK_KINDS == kinds(Role.SINK)
    assert graph.CODE_SETTINGS == {k: d.code for k, d in DESCRIPTORS.items() if d.code}


# The modules that read the table instead of branching on kinds.
READERS = (
    "sluice/graph.py",
    "sluice/checkpoints/rescale.py",
    "sluice/key_partitioning.py",
    "sluice/api/stream_graph.py",
)


@pytest.mark.parametrize("path", READERS)
def test_the_readers_of_the_table_name_no_kind(path):
    tree = ast.parse((ROOT / path).read_text())
    named = sorted(
        {
            f"{node.lineno}: OperatorKind.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "OperatorKind"
            and node.attr in OperatorKind.__members__
        }
    )
    assert not named, f"{path} branches on kinds; put the rule in the kinds' descriptors instead: {named}"
