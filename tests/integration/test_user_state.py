"""Keyed state and timers end to end: examples/dedup.py (a process function with list and
value state and event-time timers) keeps exactly the events an independent computation keeps,
and examples/click_join.py (an interval join of two streams) writes exactly the pairs an
independent computation finds — each across kill -9 of a TaskManager (state and timers
restored, output exactly once)."""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
from pathlib import Path

import pytest
from harness import (
    EXAMPLES,
    JOBS,
    SMALL_READS,
    checkpoint_root,
    committed_rows,
    kill_taskmanager_running,
    read_counts,
    wait_end,
    wait_for,
)
from helpers import wait_until

sys.path.insert(0, EXAMPLES)
from generate_clicks import expected_joins
from generate_clicks import generate as generate_clicks
from generate_page_views import generate, read_events

pytestmark = pytest.mark.integration

DEDUP = os.path.join(EXAMPLES, "dedup.py")
TTL = 5_000


def expected_firsts(directory: str, ttl: int) -> set[tuple[int, int, str]]:
    """Per user, events in (ts, url) order; an event is kept when the user's last kept one is
    at least `ttl` ms older."""
    import json

    by_user: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                e = json.loads(line)
                by_user[e["user"]].append((e["ts"], e["url"]))
    kept = set()
    for user, events in by_user.items():
        last = None
        for ts, url in sorted(events):
            if last is None or ts >= last + ttl:
                kept.add((user, ts, url))
                last = ts
    return kept


def assert_dedup_exact(out_dir, in_dir) -> None:
    rows = [(int(u), int(t), url) for u, t, url in committed_rows(out_dir)]
    twice = [r for r, n in collections.Counter(rows).items() if n > 1]
    assert not twice, twice[:5]
    want = expected_firsts(str(in_dir), TTL)
    assert set(rows) == want, (len(rows), len(want), sorted(set(rows) ^ want)[:5])


def run_dedup(cluster, tmp_path, events, files, state_backend="memory", builtin=False, batch_form=False, killed=False):
    """examples/dedup.py over generated events, detached; `killed`: a test kills a TaskManager mid-job,
    so the input is read two files per Spark call (a backlog read in one or two calls can end the job
    before the kill lands, however slow the job's function)."""
    generate(str(tmp_path / "in"), events=events, files=files, urls=100, seed=8, disorder_ms=1_000, users=500)
    assert len(read_events(str(tmp_path / "in"))[0]) == events
    return cluster.run(
        DEDUP,
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--ttl-ms",
        str(TTL),
        "--out-of-orderness-ms",
        "1000",
        "--checkpoint-interval",
        "300",
        "--state-backend",
        state_backend,
        *(["--builtin"] if builtin else []),
        *(["--batch-form"] if batch_form else []),
        parallelism=2,
        options=SMALL_READS if killed else None,
    )


@pytest.mark.chaos
@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_dedup_keeps_the_first_event_per_user_within_the_ttl_across_a_taskmanager_kill(cluster, tmp_path, backend):
    """On rocksdb the per-user lists, values and timers live in RocksDB databases, checkpointed
    as RocksDB checkpoints and restored from them."""
    job = run_dedup(cluster, tmp_path, events=200_000, files=100, state_backend=backend, killed=True)
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint")
    if backend == "rocksdb":
        root = checkpoint_root(cluster, job)
        meta = wait_until(
            lambda: [json.loads(Path(p).read_text()) for p in glob.glob(os.path.join(root, "chk-*", "_metadata"))],
            timeout=30,
            message="a completed checkpoint's metadata",
        )[0]
        backends = {
            h.get("backend", "memory")
            for by_subtask in meta["tasks"].values()
            for handle in by_subtask.values()
            for h in handle.get("keyed", {}).values()
        }
        assert backends == {"rocksdb"}, backends  # the process function's state: RocksDB files
    kill_taskmanager_running(cluster, job)
    status = wait_end(cluster, job, timeout=300)
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None
    assert_dedup_exact(tmp_path / "out", tmp_path / "in")


@pytest.mark.chaos
def test_builtin_deduplicate_is_exact_across_a_taskmanager_kill(cluster, tmp_path):
    """examples/dedup.py --builtin: stream.deduplicate("user", within_ms=TTL), vectorized, keeps
    exactly what the process function keeps, through a kill and a restore of its waiting rows
    and remembered users."""
    job = run_dedup(cluster, tmp_path, events=200_000, files=100, builtin=True, killed=True)
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint")
    kill_taskmanager_running(cluster, job)
    status = wait_end(cluster, job, timeout=300)
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None
    assert status["records_late_dropped"] == 0  # disorder within the bound: nothing is late
    assert_dedup_exact(tmp_path / "out", tmp_path / "in")


def test_the_batch_form_process_function_keeps_exactly_the_per_key_forms_events(cluster, tmp_path):
    """examples/dedup.py --batch-form: the same rule as `process_batch` (one call per batch, state
    read and written as lists), its per-user state and timers in RocksDB, checkpointed on the
    way; exactly the events the per-key form keeps."""
    job = run_dedup(cluster, tmp_path, events=60_000, files=30, state_backend="rocksdb", batch_form=True)
    status = wait_end(cluster, job, timeout=300)
    assert status["state"] == "FINISHED" and status["last_completed_checkpoint"], status
    assert any("process batches by user" in t["operator"] for t in status["tasks"]), status["tasks"]
    assert_dedup_exact(tmp_path / "out", tmp_path / "in")


@pytest.mark.chaos
def test_click_join_pairs_each_click_with_its_impression_once_across_a_taskmanager_kill(cluster, tmp_path):
    data = str(tmp_path / "data")
    generate_clicks(data, impressions=80_000, files=40, click_rate=0.4, max_delay_ms=120_000, disorder_ms=500)
    job = cluster.run(
        os.path.join(EXAMPLES, "click_join.py"),
        "--impressions",
        os.path.join(data, "impressions"),
        "--clicks",
        os.path.join(data, "clicks"),
        "--output",
        str(tmp_path / "out"),
        "--upper-ms",
        "60000",
        "--out-of-orderness-ms",
        "500",
        "--checkpoint-interval",
        "300",
        parallelism=2,
        options=SMALL_READS,  # the kill lands mid-job
    )
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint")
    kill_taskmanager_running(cluster, job)
    status = wait_end(cluster, job, timeout=300)
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None
    assert status["records_late_dropped"] == 0  # the bound covers the disorder
    got = collections.Counter((int(i), int(t), int(c)) for i, _ad, t, c in committed_rows(tmp_path / "out"))
    want = expected_joins(data, 0, 60_000)
    assert sum(want.values()) > 1_000
    assert got == want, (
        sum(got.values()),
        sum(want.values()),
        list((got - want).items())[:3],
        list((want - got).items())[:3],
    )


def test_join_table_enriches_each_row_from_a_table_loaded_in_spark(cluster, tmp_path):
    counts = generate(str(tmp_path / "in"), events=30_000, files=6, urls=200, seed=9)
    os.makedirs(tmp_path / "table")
    category = {f"/page/{i}": f"c{i % 7}" for i in range(0, 200, 2)}  # odd pages have no category
    with open(tmp_path / "table" / "categories.csv", "w") as f:
        f.writelines(f"{url},{c}\n" for url, c in category.items())
    want: collections.Counter = collections.Counter()
    for url, n in counts.items():
        want[category.get(url, "none")] += n
    for how in ("inner", "left"):
        out = tmp_path / f"out-{how}"
        job = cluster.run(
            os.path.join(JOBS, "enrich.py"),
            "--input",
            str(tmp_path / "in"),
            "--table",
            str(tmp_path / "table"),
            "--output",
            str(out),
            "--how",
            how,
            parallelism=2,
        )
        wait_end(cluster, job)
        final, _lines = read_counts(str(out))
        expected = dict(want) if how == "left" else {c: n for c, n in want.items() if c != "none"}
        assert final == expected, how


def test_broadcast_rules_reach_every_subtask_and_the_keyed_side_reads_them(cluster, tmp_path):
    counts = generate(str(tmp_path / "in"), events=20_000, files=4, urls=100, seed=10)
    os.makedirs(tmp_path / "rules")
    factors = {f"/page/{i}": 1 + i % 5 for i in range(0, 100, 3)}
    for part, items in enumerate((list(factors.items())[::2], list(factors.items())[1::2])):
        with open(tmp_path / "rules" / f"rules-{part}.jsonl", "w") as f:
            f.writelines(f'{{"url": "{url}", "factor": {n}}}\n' for url, n in items)
    job = cluster.run(
        os.path.join(JOBS, "rules.py"),
        "--input",
        str(tmp_path / "in"),
        "--rules",
        str(tmp_path / "rules"),
        "--output",
        str(tmp_path / "out"),
        parallelism=2,
    )
    wait_end(cluster, job)
    final, lines = read_counts(str(tmp_path / "out"))
    assert len(lines) == len(counts)  # one line per url, from its timer
    assert final == {url: n * factors.get(url, 1) for url, n in counts.items()}


def test_window_join_pairs_impressions_and_clicks_in_the_same_window(cluster, tmp_path):
    data = str(tmp_path / "data")
    generate_clicks(data, impressions=30_000, files=10, click_rate=0.5, max_delay_ms=90_000, disorder_ms=500)
    window = 60_000
    want = collections.Counter(
        (i, t - t % window, t, c)
        for (i, t, c), n in expected_joins(data, -(10**9), 10**9).items()
        for _ in range(n)
        if t - t % window == c - c % window
    )
    job = cluster.run(
        os.path.join(JOBS, "window_join.py"),
        "--impressions",
        os.path.join(data, "impressions"),
        "--clicks",
        os.path.join(data, "clicks"),
        "--output",
        str(tmp_path / "out"),
        "--window-ms",
        str(window),
        parallelism=2,
    )
    status = wait_end(cluster, job)
    assert status["records_late_dropped"] == 0
    got = collections.Counter(tuple(int(x) for x in row) for row in committed_rows(tmp_path / "out"))
    assert sum(want.values()) > 1_000
    assert got == want, (sum(got.values()), sum(want.values()))
