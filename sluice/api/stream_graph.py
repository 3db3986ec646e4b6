"""StreamGraph: what the job API's calls record, and the job graph built from it.

Every `DataStream`, `KeyedStream`, join and window adds its operators and edges here, through
these methods only; `StreamExecutionEnvironment.get_job_graph` turns the result into the
`JobGraph` proto. As in Flink's StreamGraph, nothing runs: a node is an operator's kind, its
settings (`payload`, a dict: plain data goes into the JSON config, anything else is pickled
into code by `sluice.graph.encode_operator`), its name and what the user set on it. What
differs between kinds (output columns, default parallelism, the job's state TTL) is read from
the kinds' descriptors (sluice/kinds/table.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sluice import graph, job_options, key_partitioning, states
from sluice import schema as schemas
from sluice.graph import OperatorKind, Partitioning
from sluice.kinds.output_schemas import Derivation
from sluice.kinds.table import descriptor
from sluice.v1 import common_pb2


@dataclasses.dataclass
class StreamNode:
    """One operator as the API recorded it."""

    kind: OperatorKind
    payload: dict[str, Any]
    name: str
    parallelism: int | None = None  # None: the kind's default, else the job's
    uid: str | None = None  # DataStream.uid: its id in the job graph
    schema: schemas.Schema | None = None  # declared: from_generator(schema=...), map(output_schema=...)
    union: bool = False  # DataStream.union: its inputs merged as they are


@dataclasses.dataclass(frozen=True)
class StreamEdge:
    source: str
    target: str
    partitioning: Partitioning | None  # None: forward, or what keep_keyed settles between parallelisms
    keys: tuple[str, ...] = ()
    output_tag: str = ""  # "": the source's main output; "late": a window's late data


class StreamGraph:
    """The operators (by API id: position and kind) and edges of one job, in the order added."""

    def __init__(self) -> None:
        self._nodes: dict[str, StreamNode] = {}
        self._edges: list[StreamEdge] = []

    # -- recording ----------------------------------------------------------------------------
    def add(self, kind: OperatorKind, payload: dict[str, Any], name: str | None) -> str:
        """A new operator; its API id."""
        op_id = f"{len(self._nodes) + 1}-{kind}"
        self._nodes[op_id] = StreamNode(kind, payload, name or kind)
        return op_id

    def connect(
        self,
        source: str,
        target: str,
        keys: Sequence[str] = (),
        partitioning: Partitioning | None = None,
        output_tag: str = "",
    ) -> None:
        """An edge: hashed on `keys` when given, else `partitioning`."""
        self._edges.append(
            StreamEdge(source, target, Partitioning.HASH if keys else partitioning, tuple(keys), output_tag)
        )

    def node(self, op_id: str) -> StreamNode:
        """The operator `op_id`, to read or change what the user set on it."""
        return self._nodes[op_id]

    def operator_ids(self) -> list[str]:
        return list(self._nodes)

    def set_uid(self, op_id: str, uid: str) -> None:
        """ValueError when another operator has `uid` already."""
        for other_id, other in self._nodes.items():
            if other_id != op_id and other.uid == uid:
                raise ValueError(f"uid {uid!r} is already the uid of operator {other.name!r}")
        self._nodes[op_id].uid = uid

    # -- reading ------------------------------------------------------------------------------
    def upstream(self, op_id: str) -> list[str]:
        """The operators `op_id` reads, in the order connected."""
        return [e.source for e in self._edges if e.target == op_id]

    def timestamp_column(self, op_id: str) -> str | None:
        """The event-time column of the stream `op_id` produces: that of the nearest
        assign_timestamps_and_watermarks upstream (None: the stream has no event time)."""
        seen: set[str] = set()
        todo = [op_id]
        while todo:
            current = todo.pop(0)
            if current in seen:
                continue
            seen.add(current)
            node = self._nodes[current]
            assigner = descriptor(node.kind).event_time_column  # assign_timestamps_and_watermarks
            if assigner is not None:
                return assigner(node.payload)
            todo += self.upstream(current)
        return None

    def output_schemas(self) -> dict[str, schemas.Schema | None]:
        """Each operator's output columns, derived from the sources through the operators
        (rules in sluice/kinds/output_schemas.py); None where they cannot be known before running."""
        inputs: dict[str, list[tuple[str, str]]] = {op_id: [] for op_id in self._nodes}
        for e in self._edges:
            inputs[e.target].append((e.source, e.output_tag))
        out: dict[str, schemas.Schema | None] = {}
        into: dict[str, list[schemas.Schema | None]] = {}
        for op_id, node in self._nodes.items():  # ids are added in order: inputs come first
            # a window's late-data side output carries its input rows as they were
            into[op_id] = [into[i][0] if tag and into[i] else out[i] for i, tag in inputs[op_id]]
            out[op_id] = _derive(node, into[op_id])
        return out

    def schema_of(self, op_id: str, output_tag: str = "") -> schemas.Schema | None:
        """The columns of `op_id`'s output, or of a window's late data (its input's)."""
        if output_tag:
            upstream = self.upstream(op_id)
            return self.output_schemas()[upstream[0]] if upstream else None
        return self.output_schemas()[op_id]

    def ids(self) -> dict[str, str]:
        """Each operator's id in the job graph: its uid (DataStream.uid) or its position and kind."""
        ids = {op_id: node.uid or op_id for op_id, node in self._nodes.items()}
        taken: dict[str, str] = {}
        for op_id, final in ids.items():
            if final in taken:
                raise ValueError(
                    f"uid {final!r} of operator {self._nodes[op_id].name!r} is also the id of "
                    f"operator {self._nodes[taken[final]].name!r}: give it another uid"
                )
            taken[final] = op_id
        return ids

    def job_graph(self, job: common_pb2.JobGraph, default_parallelism: int) -> common_pb2.JobGraph:
        """`job` (its name, max parallelism and config set) with these operators and edges; an
        operator without a parallelism of its own gets its kind's default or `default_parallelism`."""
        derived = self.output_schemas()
        ids = self.ids()
        for op_id, node in self._nodes.items():
            kind = descriptor(node.kind)
            p = node.parallelism
            if p is None:
                p = kind.default_parallelism or default_parallelism
            payload = node.payload
            if kind.state_ttl and "state_ttl_ms" not in payload:
                ttl = job_options.STATE_TTL.read(job.config)  # the job's default for states without ttl_ms
                payload = {**payload, **({"state_ttl_ms": round(ttl * 1000)} if ttl is not None else {})}
            # settings that name another operator name it by its final id
            payload = {k: ids[v] if k in ("left", "sink_id") and v in ids else v for k, v in payload.items()}
            config, code = graph.encode_operator(payload)  # plain settings as JSON, bodies pickled apart
            job.operators.add(
                id=ids[op_id],
                name=node.name,
                kind=states.to_proto(node.kind),
                parallelism=p,
                config=config,
                code=code,
                output_schema=s.ddl() if (s := derived[op_id]) is not None else "",
            )
        defaults = []  # edges whose partitioning the job did not choose
        for e in self._edges:
            if e.partitioning is None:
                defaults.append(len(job.edges))
            partitioning = e.partitioning or Partitioning.FORWARD  # keep_keyed settles uneven ones
            job.edges.add(
                source=ids[e.source],
                target=ids[e.target],
                partitioning=states.to_proto(partitioning),
                keys=list(e.keys),
                output_tag=e.output_tag,
            )
        # between operators of different parallelism a default edge is a rebalance, or a hash
        # edge out of an operator partitioned by key (sluice/key_partitioning.py)
        key_partitioning.keep_keyed(job, candidates=defaults)
        return job


def _derive(node: StreamNode, inputs: list[schemas.Schema | None]) -> schemas.Schema | None:
    """One operator's output columns from its inputs': as declared, a union's merged inputs,
    else its kind's rule (sluice/kinds/output_schemas.py)."""
    if node.schema is not None:
        return node.schema
    if node.union:
        return schemas.union(inputs)
    return descriptor(node.kind).output_schema(Derivation(node.payload, inputs))
