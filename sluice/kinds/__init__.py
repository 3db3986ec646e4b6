"""One descriptor per operator kind (`sluice/kinds/table.py`).

An operator kind's rules live in one row of `DESCRIPTORS`: its role (source, operator,
sink), whether its state is keyed, the settings that may be code, the checks of its
config, inputs and columns, its output schema rule and how its inline state redistributes
on a rescale. `sluice.graph.validate`, the job API's schema derivation
(`sluice.api.stream_graph`) and the rescale planner (`sluice.checkpoints.rescale`) read that
table instead of branching on kinds; `tests/unit/test_operator_kinds.py` fails for a kind
without a descriptor, a TaskManager runtime class or a rescale rule.

The modules, all pure (no grpc, kazoo or pyspark; nothing imports `sluice.graph`):
`common.py` (the validation error, shared names and helpers), `config_checks.py` (each
kind's config and code entries), `input_checks.py` (inputs and columns against the carried
schemas), `output_schemas.py` (each kind's output columns), `redistribution.py` (each kind's
inline state at a new parallelism) and `table.py` (`OperatorKind` and the descriptors).
"""
