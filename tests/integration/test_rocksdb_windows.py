"""Windows on the rocksdb state backend end to end, on a real cluster (docs/state-backends.md).

The job (tests/integration/jobs/rocksdb_windows.py) counts views and sums user ids per url in
sliding event-time windows, with `state.backend: rocksdb`, over a watched directory. A
TaskManager is killed with -9 mid-job; the job restores its window panes from the latest
checkpoint's RocksDB databases, and the committed window rows equal an independent
computation, one row per (url, window). The checkpoints hold a rocksdb handle for the window
operator, with the pane starts inline; the restore after the kill opens them. After a stop
with a savepoint and a resume from it, every window is still committed once, exactly.
"""

from __future__ import annotations

import collections
import json
import os
import random
import zlib

import pytest
from harness import (
    JOBS,
    checkpoint_root,
    committed_rows,
    kill_taskmanager_running,
    last_line,
    retained,
    sluice,
    taskmanager_log_lines,
    wait_for,
)
from helpers import wait_until

pytestmark = pytest.mark.integration

JOB = os.path.join(JOBS, "rocksdb_windows.py")
BASE = 1_700_000_000_000
SIZE, SLIDE = 2_000, 1_000  # the job's default windows
SLICE = 2_000  # ms of event time per round of files
DISORDER = 300  # ms behind the round's clock at most; the job's bound is 500
PER_FILE = 1_500
URLS = 300


class Rounds:
    """Input written a round at a time: per round, one file for each of the 2 source subtasks
    (a file belongs to subtask crc32(name) % 2), event times within the round's slice, out of
    order by less than the watermark bound, so nothing is late."""

    def __init__(self, directory) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.rng = random.Random(19)
        self.events: list[tuple[str, int, int]] = []
        self.next = 0

    def _name(self, r: int, subtask: int, parallelism: int = 2) -> str:
        n = 0
        while zlib.crc32(f"r{r:04d}-{n}.jsonl".encode()) % parallelism != subtask:
            n += 1
        return f"r{r:04d}-{n}.jsonl"

    def _write(self, name: str, rows: list[tuple[str, int, int]]) -> None:
        hidden = os.path.join(self.dir, f".{name}")
        with open(hidden, "w") as f:
            f.writelines(json.dumps({"url": u, "user": v, "ts": t}) + "\n" for u, v, t in rows)
        os.rename(hidden, os.path.join(self.dir, name))

    def add(self, rounds: int) -> None:
        for r in range(self.next, self.next + rounds):
            start = BASE + r * SLICE
            for subtask in (0, 1):
                rows = [
                    (
                        f"/page/{self.rng.randrange(URLS)}",
                        self.rng.randrange(1_000),
                        start + i * SLICE // PER_FILE - self.rng.randrange(DISORDER),
                    )
                    for i in range(PER_FILE)
                ]
                self._write(self._name(r, subtask), rows)
                self.events += rows
        self.next += rounds

    def close(self, parallelism: int = 2) -> None:
        """One event per source subtask a minute of event time ahead: the watermark passes every
        window of the rounds (the closing events' own windows never fire)."""
        end = BASE + self.next * SLICE + 60_000
        for subtask in range(parallelism):
            self._write(self._name(self.next, subtask, parallelism), [("/end", 0, end)])

    def expected(self) -> dict[tuple[str, int, int], tuple[int, int]]:
        """(url, window_start, window_end) -> (views, sum of users), computed here."""
        views: collections.Counter = collections.Counter()
        users: collections.Counter = collections.Counter()
        for url, user, ts in self.events:
            start = ts - ts % SLIDE
            while start + SIZE > ts:
                views[(url, start, start + SIZE)] += 1
                users[(url, start, start + SIZE)] += user
                start -= SLIDE
        return {k: (views[k], users[k]) for k in views}


def window_rows(directory) -> list[tuple[str, int, int, int, int]]:
    return [(u, int(s), int(e), int(n), int(t)) for u, s, e, n, t in committed_rows(directory)]


def assert_exact(out, want) -> None:
    """One committed row per (url, window) of the input, each with the expected values."""
    rows = window_rows(out)
    twice = [k for k, n in collections.Counter((u, s, e) for u, s, e, _n, _t in rows).items() if n > 1]
    assert not twice, f"{len(twice)} windows committed more than once, e.g. {twice[:3]}"
    got = {(u, s, e): (n, t) for u, s, e, n, t in rows}
    wrong = [(k, got[k], v) for k, v in want.items() if got[k] != v]
    assert not wrong, f"{len(wrong)} windows differ (window, got, expected), e.g. {wrong[:3]}"
    assert set(got) == set(want), sorted(set(got) - set(want))[:3]


def wait_complete(out, want) -> None:
    def complete() -> bool:
        return {(u, s, e) for u, s, e, _n, _t in window_rows(out)} >= set(want)

    wait_until(complete, timeout=240, message="every window of the input committed")


def test_stop_with_savepoint_and_resume(cluster, tmp_path):
    """The resumed subtasks open the savepoint's self-contained databases (copied from its own
    directory) and rebuild their pane starts from them; the windows open at the stop fire once,
    exactly. (A resume at another parallelism splits the key ranges: tests/unit/test_rocksdb_panes.py.)"""
    inp = Rounds(tmp_path / "in")
    out = tmp_path / "out"
    inp.add(12)
    job = cluster.run(JOB, "--input", str(inp.dir), "--output", str(out), parallelism=2)
    job2 = None
    try:
        wait_until(lambda: window_rows(out), timeout=120, message="the first committed windows")
        inp.add(6)
        path = last_line(sluice("stop", job, "--savepoint-dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir))
        assert cluster.status(job)["state"] == "FINISHED"
        with open(os.path.join(path, "_metadata")) as f:
            saved = json.load(f)
        keyed = saved["operators"]["windows"]["keyed"]
        assert [h["backend"] for h in keyed] == ["rocksdb", "rocksdb"]
        assert all(any(n.endswith(".sst") for n in h["files"]) for h in keyed)  # self-contained

        inp.add(6)
        inp.close()
        args = ["run", JOB, "--detach", "--cluster-dir", cluster.dir, "--parallelism", "2", "--from-savepoint", path]
        job2 = last_line(sluice(*args, "--", "--input", str(inp.dir), "--output", str(out)))
        wait_for(cluster, job2, lambda s: s["state"] == "RUNNING", "the resumed job")
        want = inp.expected()
        wait_complete(out, want)
        assert_exact(out, want)
        assert cluster.status(job2)["records_late_dropped"] == 0
    finally:
        for j in (job, job2):
            if j:
                sluice("cancel", j, "--cluster-dir", cluster.dir, check=False)


@pytest.mark.chaos
def test_kill_9_of_a_taskmanager_restores_rocksdb_windows_exactly_once(cluster, tmp_path):
    """Last in the module: the cluster keeps one TaskManager afterwards."""
    inp = Rounds(tmp_path / "in")
    out = tmp_path / "out"
    inp.add(12)
    job = cluster.run(JOB, "--input", str(inp.dir), "--output", str(out), parallelism=2)
    try:
        wait_until(lambda: window_rows(out), timeout=120, message="the first committed windows")
        wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint")
        inp.add(12)
        kill_taskmanager_running(cluster, job)
        wait_for(
            cluster,
            job,
            lambda s: s["restarts"] >= 1 and s["state"] == "RUNNING" and s["restored_checkpoint"],
            "the job to restart from a checkpoint",
            timeout=240,
        )
        inp.add(6)
        # a checkpoint taken while windows are open: a rocksdb handle per window subtask, its
        # pane starts inline (the newest retained one: older ones may be discarded meanwhile)
        restored = wait_for(
            cluster, job, lambda s: s["last_completed_checkpoint"] > s["restored_checkpoint"], "a checkpoint"
        )
        metas = retained(checkpoint_root(cluster, job))
        newest = max(metas)
        assert newest > restored["restored_checkpoint"]
        window_handles = [
            (handle["operators"][op], h)
            for by_subtask in metas[newest]["tasks"].values()
            for handle in by_subtask.values()
            for op, h in handle.get("keyed", {}).items()
            if "panes" in handle.get("operators", {}).get(op, {})
        ]
        assert len(window_handles) == 2, window_handles  # each subtask of the window operator
        for inline, h in window_handles:
            assert h["backend"] == "rocksdb" and h["shared"] and h["private"] and inline["panes"], (inline, h)
            assert inline["watermark"] > BASE

        inp.close()
        want = inp.expected()
        wait_complete(out, want)
        assert_exact(out, want)
        status = cluster.status(job)
        assert status["records_late_dropped"] == 0  # the input kept within the bound: the comparison is whole

        assert wait_until(
            lambda: taskmanager_log_lines(cluster.dir, "window panes restored", job),
            timeout=30,
            message="a restore of window panes logged",
        )
    finally:
        sluice("cancel", job, "--cluster-dir", cluster.dir, check=False)
