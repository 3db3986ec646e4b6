"""What a hash exchange asks of the operator it feeds: the `Combiner` a producer may apply
before sending (taskmanager/network/record_writer.py). Operators implement it
(`Operator.combiner_for`, taskmanager/operators/base.py); the network knows it only
through this protocol, so that nothing under taskmanager/network/ imports an operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa

# Partials a combiner computed inside Spark (`combine_in_spark`): how many input rows each
# (key, key group) row folds; the writer counts them and drops the column before sending.
ROWS = "__rows"


class Combiner(Protocol):
    """Producer-side pre-aggregation of the batches a hash exchange sends to an operator
    (taskmanager/network/record_writer.py)."""

    def columns(self) -> list[str]:
        """The value columns it reads, besides the key and its key group."""
        ...

    def combine(self, table: pa.Table, keys: Sequence[str]) -> pa.Table:
        """One batch (key columns, key group, `columns()`) pre-aggregated to what the operator consumes."""
        ...
