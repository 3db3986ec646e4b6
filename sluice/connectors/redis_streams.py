"""Redis Streams source and sink on the connector API (docs/connectors.md).

`RedisStreamSource(url, streams)`: one split per stream, each read by one reader subtask
(subtask crc32(stream) % parallelism) from the entry id after `start_id`. With
`pattern="clicks:*"` instead, the JobManager finds the streams (SCAN ... TYPE stream),
once, or every `discovery_interval_s` seconds so that streams created later are read. A split's
position is the id of the last entry read; it is stored in every checkpoint, and after a
failure the reader reads again from there (streams are replayable). `bounded=True`
reads each stream up to its last entry when the reader first got the split (that id is
part of the split's state, so a restore ends at the same entry). Rows carry the entry's
fields as strings (cast with `types`, e.g. {"n": "int64"}), and its id in `id_column`
when set. Entries are not acknowledged or deleted: this is not a consumer group.

`RedisStreamSink(url, stream)`: exactly once. Each writer subtask appends its rows to a
staging stream of its own; at a checkpoint's barrier the staging stream is sealed and
named in the checkpoint (the committable); when the checkpoint completes, one Lua
script (atomic in Redis) copies the staged entries to the target stream with XADD,
records the checkpoint in a marker hash (field: subtask) and deletes the staging stream
— unless the marker already shows that checkpoint, which makes a commit repeated after
a failure a no-op. Entries get new ids from Redis at commit. Staging streams of a
failed attempt are deleted when its successor writes. Needs one Redis server (not
Redis Cluster: the script touches several keys).
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa

from sluice.connectors.api import (
    END,
    JSON,
    NOTHING_YET,
    Committer,
    DeliveryGuarantee,
    Poll,
    ReaderContext,
    Sink,
    SinkContext,
    SinkWriter,
    Source,
    SourceReader,
    SourceSplit,
    SplitEnumerator,
)
from sluice.connectors.enumerators import RedisStreamEnumerator, StaticSplitEnumerator

__all__ = ["RedisStreamSink", "RedisStreamSource"]

TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}


def _client(url: str) -> Any:
    import redis  # local: only jobs with Redis connectors need it (and the client never imports it)

    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=30)


def _id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


class RedisStreamSource(Source):
    def __init__(
        self,
        url: str,
        streams: list[str] | None = None,
        bounded: bool = False,
        start_id: str = "0-0",
        batch_size: int = 1000,
        id_column: str | None = None,
        types: dict[str, str] | None = None,
        pattern: str | None = None,
        discovery_interval_s: float | None = None,
    ) -> None:
        if (streams is None) == (pattern is None):
            raise ValueError("RedisStreamSource needs either streams=[...] or pattern='prefix:*'")
        if streams is not None and (not streams or not all(isinstance(s, str) and s for s in streams)):
            raise ValueError("RedisStreamSource needs one or more stream names")
        if streams is not None and len(set(streams)) != len(streams):
            raise ValueError("RedisStreamSource: a stream is listed twice")
        if discovery_interval_s is not None and (pattern is None or bounded):
            raise ValueError("RedisStreamSource: discovery_interval_s needs a pattern and an unbounded source")
        _id(start_id)  # ValueError for a malformed id
        for column, name in (types or {}).items():
            if name not in TYPES:
                raise ValueError(f"RedisStreamSource types[{column!r}]: {name!r} is not one of {', '.join(TYPES)}")
        if batch_size < 1:
            raise ValueError("RedisStreamSource batch_size must be at least 1")
        self.url, self.streams, self.bounded = url, list(streams or []), bounded
        self.pattern, self.discovery_interval_s = pattern, discovery_interval_s
        self.start_id, self.batch_size, self.id_column = start_id, batch_size, id_column
        self.types = dict(types or {})

    def create_enumerator(self) -> SplitEnumerator:
        if self.pattern is not None:  # the JobManager scans for the streams (jobmanager/connectors/lookups.py)
            return RedisStreamEnumerator(self.url, self.pattern, self.discovery_interval_s, self.start_id)
        splits = [SourceSplit(s, {"stream": s, "after": self.start_id}) for s in self.streams]
        return StaticSplitEnumerator(splits, assignment="hash")  # a reader keeps its streams

    def create_reader(self, ctx: ReaderContext) -> SourceReader:  # noqa: ARG002 — every subtask reads alike
        return RedisStreamReader(self)


class RedisStreamReader(SourceReader):
    def __init__(self, source: RedisStreamSource) -> None:
        self.source = source
        self.client = _client(source.url)
        self.splits: dict[str, dict[str, Any]] = {}  # split id -> {"stream", "after", ["end"]}

    def add_splits(self, splits: list[SourceSplit]) -> None:
        for split in splits:
            data = dict(split.data)
            if self.source.bounded and "end" not in data:  # the last entry now: where this split ends
                last = self.client.xrevrange(data["stream"], count=1)
                data["end"] = last[0][0] if last else "0-0"
            self.splits[split.id] = data

    def _finished(self, data: dict[str, Any]) -> bool:
        return "end" in data and _id(data["after"]) >= _id(data["end"])

    def poll_next(self) -> pa.Table | Poll:
        for sid in [s for s, d in self.splits.items() if self._finished(d)]:
            del self.splits[sid]
        if not self.splits:
            return END if self.no_more_splits else NOTHING_YET
        rows: list[dict[str, Any]] = []
        n = self.source.batch_size
        if self.source.bounded:
            for data in self.splits.values():
                entries = self.client.xrange(data["stream"], min="(" + data["after"], max=data["end"], count=n)
                self._take(data, entries, rows)
        else:
            reply = self.client.xread({d["stream"]: d["after"] for d in self.splits.values()}, count=n)
            by_stream = {d["stream"]: d for d in self.splits.values()}
            for stream, entries in reply or []:
                self._take(by_stream[stream], entries, rows)
        if not rows:
            return NOTHING_YET
        return self._table(rows)

    def _take(self, data: dict[str, Any], entries: list[Any], rows: list[dict[str, Any]]) -> None:
        for entry_id, fields in entries:
            row = dict(fields)
            if self.source.id_column:
                row[self.source.id_column] = entry_id
            rows.append(row)
            data["after"] = entry_id

    def _table(self, rows: list[dict[str, Any]]) -> pa.Table:
        names: dict[str, None] = {}
        for row in rows:
            names.update(dict.fromkeys(row))
        schema = pa.schema([(n, TYPES[self.source.types.get(n, "string")]) for n in names])
        columns = {n: pa.array([r.get(n) for r in rows], pa.string()) for n in names}
        return pa.table({n: columns[n].cast(schema.field(n).type) for n in names}, schema=schema)

    def snapshot_state(self, checkpoint_id: int) -> list[SourceSplit]:  # noqa: ARG002 — positions only
        return [SourceSplit(sid, dict(data)) for sid, data in self.splits.items()]

    def close(self) -> None:
        self.client.close()


# Atomic in Redis: copy a staging stream to the target unless the marker shows the
# checkpoint committed already; record it; drop the staging stream.
_COMMIT = """
local cid = tonumber(ARGV[2])
local done = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
if cid > 0 and done >= cid then
  redis.call('DEL', KEYS[2])
  return -1
end
local entries = redis.call('XRANGE', KEYS[2], '-', '+')
for _, e in ipairs(entries) do
  redis.call('XADD', KEYS[3], '*', unpack(e[2]))
end
if cid > 0 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('DEL', KEYS[2])
return #entries
"""


class RedisStreamSink(Sink):
    guarantee = DeliveryGuarantee.EXACTLY_ONCE

    def __init__(self, url: str, stream: str, key_prefix: str = "sluice") -> None:
        if not stream:
            raise ValueError("RedisStreamSink needs a stream name")
        self.url, self.stream, self.key_prefix = url, stream, key_prefix

    def keys(self, job_id: str, sink_id: str) -> str:
        """The prefix of this sink's staging streams and marker hash in one job."""
        return f"{self.key_prefix}:sink:{job_id}:{sink_id}"

    def create_writer(self, ctx: SinkContext) -> SinkWriter:
        return RedisStreamWriter(self, ctx)

    def create_committer(self) -> Committer:
        return RedisStreamCommitter(self)


class RedisStreamWriter(SinkWriter):
    def __init__(self, sink: RedisStreamSink, ctx: SinkContext) -> None:
        self.sink, self.ctx = sink, ctx
        self.client = _client(sink.url)
        self.prefix = sink.keys(ctx.job_id, ctx.sink_id)
        self.token = uuid.uuid4().hex[:12]  # this writer's staging streams (an attempt's)
        self.seq = 0
        self.rows = 0  # staged since the last prepare_commit
        self.cleaned = False

    def _stage(self) -> str:
        return f"{self.prefix}:stage:{self.ctx.subtask}:{self.token}:{self.seq}"

    def _clean(self) -> None:
        """Staging streams of earlier attempts of this subtask: never committed (the restore
        committed what its checkpoint held before this writer wrote anything)."""
        self.cleaned = True
        mine = f"{self.prefix}:stage:{self.ctx.subtask}:{self.token}:"
        for key in self.client.scan_iter(match=f"{self.prefix}:stage:{self.ctx.subtask}:*", count=1000):
            if not key.startswith(mine):
                self.client.delete(key)

    def write(self, table: pa.Table) -> None:
        if not self.cleaned:
            self._clean()
        if table.num_rows == 0:
            return
        stage = self._stage()
        names = table.column_names
        pipe = self.client.pipeline(transaction=False)
        for row in table.to_pylist():
            pipe.xadd(stage, {n: "" if row[n] is None else str(row[n]) for n in names})
        pipe.execute()
        self.rows += table.num_rows

    def prepare_commit(self, checkpoint_id: int) -> list[JSON]:
        if not self.cleaned:
            self._clean()
        if self.rows == 0:
            return []
        committable = {
            "stage": self._stage(),
            "marker": f"{self.prefix}:committed",
            "subtask": self.ctx.subtask,
            "checkpoint": checkpoint_id,
        }
        self.seq, self.rows = self.seq + 1, 0
        return [committable]

    def close(self) -> None:
        self.client.close()


class RedisStreamCommitter(Committer):
    def __init__(self, sink: RedisStreamSink) -> None:
        self.sink = sink
        self.client = _client(sink.url)
        self.script = self.client.register_script(_COMMIT)

    def commit(self, committables: list[JSON]) -> None:
        for c in committables:
            self.script(
                keys=[c["marker"], c["stage"], self.sink.stream], args=[str(c["subtask"]), str(c["checkpoint"])]
            )

    def close(self) -> None:
        self.client.close()
