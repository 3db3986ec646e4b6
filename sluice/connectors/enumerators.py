"""The split enumerators the JobManager runs (docs/connectors.md). Each is a pure state
machine over plain JSON: no I/O, no clock (time is an argument), no user code, so the
JobManager can run it without unpickling anything.

* `StaticSplitEnumerator`: a list of splits computed on the client when the job is built
  (one per Redis stream, per file, per partition...).
* `DirectorySplitEnumerator`: one split per file of a directory; with `interval_s` it
  lists the directory again that often (the JobManager lists it, off its lock) and
  assigns the files that appeared since, so the source is unbounded.
* `RedisStreamEnumerator`: one split per Redis stream whose key matches a pattern,
  scanned by the JobManager (off its lock) once or every `interval_s` seconds.

Assignment policies (`assignment`): `balanced` gives one split to a reader that asks
while idle (it has no unfinished split), so fast readers take more; `hash` gives each
split to subtask crc32(id) % parallelism, all at once, so that a reader keeps the
splits it reads forever (unbounded splits such as streams).
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any, ClassVar, Self

from sluice.connectors.api import JSON, ConnectorConfigError, SourceSplit, SplitEnumerator

ASSIGNMENTS = ("balanced", "hash")
MAX_STATIC_SPLITS = 10_000
MAX_SPLIT_ID = 1024  # characters
MAX_SPLIT_BYTES = 16 * 1024  # one split as JSON: 64 of them fit in one RequestSplits answer
MIN_INTERVAL_S = 0.1


def _check_assignment(config: dict[str, JSON]) -> None:
    if config.get("assignment", "balanced") not in ASSIGNMENTS:
        raise ConnectorConfigError(
            "assignment", f"must be one of {', '.join(ASSIGNMENTS)}, got {config.get('assignment')!r}"
        )


class _Assigning(SplitEnumerator):
    """Pending splits and the assignment policy the built-ins share."""

    def __init__(self, assignment: str) -> None:
        self.assignment = assignment
        self.pending: list[SourceSplit] = []
        self.parallelism = 1

    def start(self, parallelism: int) -> None:
        self.parallelism = parallelism

    def handle_split_request(self, subtask: int, idle: bool) -> list[SourceSplit]:
        if self.assignment == "hash":
            mine = [s for s in self.pending if zlib.crc32(s.id.encode()) % self.parallelism == subtask]
            self.pending = [s for s in self.pending if zlib.crc32(s.id.encode()) % self.parallelism != subtask]
            return mine
        if idle and self.pending:
            return [self.pending.pop(0)]
        return []

    def add_splits_back(self, splits: list[SourceSplit], subtask: int) -> None:  # noqa: ARG002 — any reader may take them
        known = {s.id for s in self.pending}
        self.pending = [*(s for s in splits if s.id not in known), *self.pending]


class StaticSplitEnumerator(_Assigning):
    """A fixed list of splits; bounded as a list is (the readers decide whether a split ends)."""

    name: ClassVar[str] = "static"

    def __init__(self, splits: list[SourceSplit], assignment: str = "balanced") -> None:
        super().__init__(assignment)
        ids = [s.id for s in splits]
        if len(set(ids)) != len(ids):
            raise ConnectorConfigError("splits", "split ids must be unique")
        self.splits = list(splits)
        self.pending = list(splits)

    def config(self) -> dict[str, JSON]:
        return {"splits": [s.to_json() for s in self.splits], "assignment": self.assignment}

    @classmethod
    def check_config(cls, config: dict[str, JSON]) -> None:
        splits = config.get("splits")
        if not isinstance(splits, list):
            raise ConnectorConfigError("splits", "must be a list of {'id': ..., 'data': {...}}")
        if len(splits) > MAX_STATIC_SPLITS:
            raise ConnectorConfigError("splits", f"{len(splits)} splits, more than {MAX_STATIC_SPLITS}")
        for i, s in enumerate(splits):
            if not isinstance(s, dict) or not isinstance(s.get("id"), str) or not s["id"]:
                raise ConnectorConfigError(f"splits[{i}].id", "each split needs a non-empty string id")
            if len(s["id"]) > MAX_SPLIT_ID:
                raise ConnectorConfigError(f"splits[{i}].id", f"longer than {MAX_SPLIT_ID} characters")
            if not isinstance(s.get("data", {}), dict):
                raise ConnectorConfigError(f"splits[{i}].data", "must be an object")
            if len(json.dumps(s)) > MAX_SPLIT_BYTES:
                raise ConnectorConfigError(f"splits[{i}]", f"larger than {MAX_SPLIT_BYTES} bytes as JSON")
        ids = [s["id"] for s in splits]
        if len(set(ids)) != len(ids):
            raise ConnectorConfigError("splits", "split ids must be unique")
        _check_assignment(config)

    @classmethod
    def create(cls, config: dict[str, JSON]) -> Self:
        return cls([SourceSplit.from_json(s) for s in config["splits"]], config.get("assignment", "balanced"))

    @classmethod
    def restore(cls, config: dict[str, JSON], state: dict[str, JSON]) -> Self:
        e = cls.create(config)
        e.pending = [SourceSplit.from_json(s) for s in state["pending"]]
        return e

    def snapshot_state(self, checkpoint_id: int) -> dict[str, JSON]:  # noqa: ARG002 — same at any checkpoint
        return {"pending": [s.to_json() for s in self.pending]}

    def exhausted(self) -> bool:
        return not self.pending


def _check_interval(config: dict[str, JSON]) -> None:
    interval = config.get("interval_s")
    if interval is not None and (
        not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval < MIN_INTERVAL_S
    ):
        raise ConnectorConfigError("interval_s", f"must be at least {MIN_INTERVAL_S} seconds or None")


class _Discovering(_Assigning):
    """Splits found by a lookup the JobManager runs (`lookup()`, plain JSON): once
    without `interval_s` (bounded), else again every `interval_s` seconds. The names found
    so far are remembered (the state grows with the number of splits found)."""

    def __init__(self, interval_s: float | None, assignment: str) -> None:
        super().__init__(assignment)
        self.interval_s = interval_s
        self.seen: set[str] = set()
        self.listed_at: float | None = None  # None: never looked up
        self.asked = False

    def lookup(self) -> dict[str, JSON]:
        raise NotImplementedError

    def split_for(self, found: str) -> SourceSplit | None:
        """The split for a name the lookup found (None: not one to read)."""
        raise NotImplementedError

    def _restored(self, state: dict[str, JSON]) -> None:
        self.seen = set(state["seen"])
        self.pending = [SourceSplit.from_json(s) for s in state["pending"]]
        self.listed_at = float("-inf") if state.get("listed") else None  # look up again at once

    def snapshot_state(self, checkpoint_id: int) -> dict[str, JSON]:  # noqa: ARG002 — same at any checkpoint
        return {
            "seen": sorted(self.seen),
            "pending": [s.to_json() for s in self.pending],
            "listed": self.listed_at is not None,
        }

    def discovery(self, now: float) -> dict[str, JSON] | None:
        if self.asked:
            return None  # a lookup is under way
        if self.listed_at is None or (self.interval_s is not None and now - self.listed_at >= self.interval_s):
            self.asked = True
            return self.lookup()
        return None

    def on_discovered(self, found: list[str], now: float) -> None:
        self.asked = False
        if self.listed_at is not None and self.interval_s is None:
            return  # bounded: the first lookup is the input
        self.listed_at = now
        for name in sorted(found):
            split = self.split_for(name)
            if split is None or split.id in self.seen:
                continue
            self.seen.add(split.id)
            self.pending.append(split)

    def discovery_failed(self) -> None:
        self.asked = False

    def exhausted(self) -> bool:
        return self.interval_s is None and self.listed_at is not None and not self.pending


class DirectorySplitEnumerator(_Discovering):
    """A split per file of `path` whose name ends with `suffix` (hidden files and names
    starting with `_` are skipped: writers should write `.name` and rename). Each split's
    id is the file's name, its data {"path": <the file>}. Without `interval_s` the
    directory is listed once and the source is bounded; with it, it is listed again every
    `interval_s` seconds."""

    name: ClassVar[str] = "directory"

    def __init__(self, path: str, suffix: str = "", interval_s: float | None = None, assignment: str = "balanced"):
        super().__init__(interval_s, assignment)
        self.path, self.suffix = path, suffix

    def config(self) -> dict[str, JSON]:
        return {"path": self.path, "suffix": self.suffix, "interval_s": self.interval_s, "assignment": self.assignment}

    @classmethod
    def check_config(cls, config: dict[str, JSON]) -> None:
        if not isinstance(config.get("path"), str) or not config["path"]:
            raise ConnectorConfigError("path", f"needs a directory path, got {config.get('path')!r}")
        if not isinstance(config.get("suffix", ""), str):
            raise ConnectorConfigError("suffix", "must be a string such as '.jsonl'")
        _check_interval(config)
        _check_assignment(config)

    @classmethod
    def create(cls, config: dict[str, JSON]) -> Self:
        return cls(
            config["path"], config.get("suffix", ""), config.get("interval_s"), config.get("assignment", "balanced")
        )

    @classmethod
    def restore(cls, config: dict[str, JSON], state: dict[str, JSON]) -> Self:
        e = cls.create(config)
        e._restored(state)
        return e

    def lookup(self) -> dict[str, JSON]:
        return {"list": self.path, "suffix": self.suffix}

    def split_for(self, found: str) -> SourceSplit | None:
        name = os.path.basename(found)
        return None if name.startswith((".", "_")) else SourceSplit(name, {"path": found})


class RedisStreamEnumerator(_Discovering):
    """A split per Redis stream whose key matches `pattern` (Redis glob syntax), found with
    SCAN ... TYPE stream by the JobManager on `url`; data {"stream": <key>, "after":
    `start_id`}. Assigned by hash: a reader keeps its streams. Without `interval_s` the
    keys are scanned once; with it, again every `interval_s` seconds, so streams created
    while the job runs are read too."""

    name: ClassVar[str] = "redis_streams"

    def __init__(self, url: str, pattern: str, interval_s: float | None = None, start_id: str = "0-0") -> None:
        super().__init__(interval_s, "hash")
        self.url, self.pattern, self.start_id = url, pattern, start_id

    def config(self) -> dict[str, JSON]:
        return {"url": self.url, "pattern": self.pattern, "interval_s": self.interval_s, "start_id": self.start_id}

    @classmethod
    def check_config(cls, config: dict[str, JSON]) -> None:
        url = config.get("url")
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://")) or len(url) > 1024:
            raise ConnectorConfigError("url", "needs a redis:// or rediss:// URL of at most 1024 characters")
        if not isinstance(config.get("pattern"), str) or not config["pattern"]:
            raise ConnectorConfigError("pattern", "needs a key pattern such as 'clicks:*'")
        if not isinstance(config.get("start_id", "0-0"), str):
            raise ConnectorConfigError("start_id", "must be a stream entry id such as '0-0'")
        _check_interval(config)

    @classmethod
    def create(cls, config: dict[str, JSON]) -> Self:
        return cls(config["url"], config["pattern"], config.get("interval_s"), config.get("start_id", "0-0"))

    @classmethod
    def restore(cls, config: dict[str, JSON], state: dict[str, JSON]) -> Self:
        e = cls.create(config)
        e._restored(state)
        return e

    def lookup(self) -> dict[str, JSON]:
        return {"redis_streams": self.url, "pattern": self.pattern}

    def split_for(self, found: str) -> SourceSplit | None:
        return SourceSplit(found, {"stream": found, "after": self.start_id})


ENUMERATORS: dict[str, type[SplitEnumerator]] = {
    StaticSplitEnumerator.name: StaticSplitEnumerator,
    DirectorySplitEnumerator.name: DirectorySplitEnumerator,
    RedisStreamEnumerator.name: RedisStreamEnumerator,
}


def spec_of(enumerator: SplitEnumerator) -> dict[str, Any]:
    """How an enumerator travels in the job graph: its name and config (plain JSON)."""
    cls = ENUMERATORS.get(getattr(type(enumerator), "name", ""))
    if cls is None or type(enumerator) is not cls:
        known = ", ".join(f"{c.__module__}.{c.__name__}" for c in ENUMERATORS.values())
        raise TypeError(
            f"create_enumerator() returned a {type(enumerator).__name__}: the JobManager runs only the built-in "
            f"enumerators ({known}), since it never runs a job's code; describe the splits with one of them"
        )
    config = enumerator.config()
    cls.check_config(config)
    return {"name": cls.name, "config": config}


def build(spec: dict[str, Any]) -> SplitEnumerator:
    """The JobManager's enumerator from its spec (validated at submit)."""
    return ENUMERATORS[spec["name"]].create(spec["config"])


def restore(spec: dict[str, Any], state: dict[str, Any]) -> SplitEnumerator:
    return ENUMERATORS[spec["name"]].restore(spec["config"], state)
