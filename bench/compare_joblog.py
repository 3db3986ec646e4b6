"""What the TaskManager logs say about one Sluice job of bench/compare.py (pure parsing): its source
batches (`source batch: offset a -> b in s`), its sources' checkpoint snapshots and its sinks' commits
(the formats: taskmanager/task.py's SOURCE_BATCH_LOG and SOURCE_SNAPSHOT_LOG and the file sink's
`committed ... (checkpoint n)` line, pinned by tests/unit/test_bench_compare.py), and from them each
batch's end-to-end latency and the events read over time.
"""

from __future__ import annotations

import glob
import os

from bench_common import COMMITTED, SOURCE_BATCH, SOURCE_SNAPSHOT, log_epoch
from compare_plan import PARALLELISM

from sluice.storage import list_files


class SluiceJobLog:
    """The source batches, source snapshots and sink commits of one job, from every TaskManager log."""

    def __init__(self, log_paths: list[str], job_id: str, data: str):
        self.job_id = job_id
        self.batches: list[dict] = []
        self.snapshots: list[dict] = []
        self.commits: dict[int, float] = {}
        files = list_files(data)
        self.events_per_file = {path: _count_lines(path) for path in files}
        self.files = files
        for path in log_paths:
            with open(path, errors="replace") as f:
                for line in f:
                    if job_id[:8] in line:
                        self._read(line)

    def _read(self, line: str) -> None:
        """One log line of this job's: a batch, a snapshot or a commit (anything else is ignored)."""
        m = SOURCE_BATCH.match(line)
        if m and m.group(2) == self.job_id:
            end, took = log_epoch(m.group(1)), float(m.group(8))
            sub, lo, hi = int(m.group(5)), int(m.group(6)), int(m.group(7))
            self.batches.append(
                {
                    "attempt": int(m.group(3)),
                    "subtask": sub,
                    "lo": lo,
                    "hi": hi,
                    "start": end - took,
                    "end": end,
                    "events": self._events(sub, lo, hi),
                }
            )
            return
        m = SOURCE_SNAPSHOT.match(line)
        if m and m.group(2) == self.job_id:
            self.snapshots.append(
                {
                    "attempt": int(m.group(3)),
                    "subtask": int(m.group(5)),
                    "checkpoint": int(m.group(6)),
                    "offset": int(m.group(7)),
                    "time": log_epoch(m.group(1)),
                }
            )
            return
        m = COMMITTED.match(line)
        if m and m.group(2) == self.job_id:
            cid, t = int(m.group(6)), log_epoch(m.group(1))
            self.commits[cid] = max(t, self.commits.get(cid, t))

    def _events(self, subtask: int, lo: int, hi: int) -> int:
        mine = self.files[subtask::PARALLELISM]
        return sum(self.events_per_file[p] for p in mine[lo:hi])

    def latencies(self) -> tuple[list[tuple[float, int]], int]:
        """(seconds from batch read start to its counts committed, events) per batch; events of
        batches whose commit is not in the logs."""
        pairs, missing = [], 0
        for b in self.batches:
            covering = [
                s["checkpoint"]
                for s in self.snapshots
                if s["attempt"] == b["attempt"]
                and s["subtask"] == b["subtask"]
                and s["offset"] >= b["hi"]
                and s["time"] >= b["end"] - 0.002
            ]
            cid = min(covering) if covering else None
            if cid is None or cid not in self.commits:
                missing += b["events"]
                continue
            pairs.append((self.commits[cid] - b["start"], b["events"]))
        return pairs, missing

    def spans(self) -> list[tuple[float, float, int]]:
        return [(b["start"], b["end"], b["events"]) for b in self.batches]


def _count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def taskmanager_logs(cluster_dir: str) -> list[str]:
    """The TaskManager log files of the local cluster in `cluster_dir`."""
    return sorted(glob.glob(os.path.join(cluster_dir, "log", "taskmanager-*.log")))
