"""Event time end to end on a real cluster: windowed counts over out-of-order input equal an
independent computation with exactly one row per (url, window); late records go to the side
output or are dropped and counted; session windows with aggregates and apply; an idle source
subtask does not hold back the windows; and after kill -9 of a TaskManager or of the leading
JobManager every window is still emitted exactly once."""

from __future__ import annotations

import collections
import json
import os
import sys
import zlib
from typing import Any

import pytest
from harness import (
    EXAMPLES,
    JOBS,
    ONE_FILE_READS,
    SMALL_READS,
    committed_rows,
    kill9,
    kill_taskmanager_running,
    pid_at,
    sluice,
    wait_end,
    wait_for,
)
from helpers import wait_until

sys.path.insert(0, EXAMPLES)
from generate_page_views import expected_windows, generate

pytestmark = pytest.mark.integration

MAX_WATERMARK = 2**63 - 1
WINDOWED = os.path.join(EXAMPLES, "windowed_page_views.py")


def window_rows(directory) -> list[tuple[str, int, int, int]]:
    return [(u, int(s), int(e), int(c)) for u, s, e, c in committed_rows(directory)]


def assert_windows_exact(directory, expected) -> None:
    """One line per (url, window), each with the independently computed count, none missing."""
    rows = window_rows(directory)
    keys = collections.Counter((u, s, e) for u, s, e, _c in rows)
    twice = [k for k, n in keys.items() if n > 1]
    assert not twice, f"{len(twice)} windows emitted more than once, e.g. {twice[:3]}"
    want = {(r.url, r.window_start, r.window_end): r.count for r in expected.itertuples()}
    got = {(u, s, e): c for u, s, e, c in rows}
    missing = [k for k in want if k not in got]
    wrong = [(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]]
    extra = [k for k in got if k not in want]
    assert not missing and not wrong and not extra, (missing[:3], wrong[:3], extra[:3], len(got), len(want))


def run_windowed(cluster, work, *args, parallelism=2, options=None) -> str:
    return cluster.run(
        WINDOWED,
        "--input",
        str(work / "in"),
        "--output",
        str(work / "out"),
        *args,
        parallelism=parallelism,
        options=options,
    )


def test_sliding_windows_over_out_of_order_input_are_exact(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=120_000, files=24, urls=500, seed=3, disorder_ms=2_000)
    expected = expected_windows(str(tmp_path / "in"), 10_000, 2_500)
    with open(tmp_path / "in" / "events-9999.jsonl", "w") as f:  # no time: dropped and counted, no crash
        f.write('{"url": "/x", "user": 1}\n{"url": "/x", "user": 2, "ts": null}\n')
    job = run_windowed(cluster, tmp_path, "--window-ms", "10000", "--slide-ms", "2500", "--out-of-orderness-ms", "2000")
    status = wait_end(cluster, job)
    assert_windows_exact(tmp_path / "out", expected)
    assert status["records_late_dropped"] == 0  # the bound covers the disorder: nothing is late
    assert status["records_dropped"] == 2
    by_kind = collections.defaultdict(list)
    for t in status["tasks"]:
        by_kind["window" in t["operator"]].append(t["watermark"])
    assert by_kind[True] == [MAX_WATERMARK] * 2  # the end of input fired every window
    assert all(w is not None and w > 1_700_000_000_000 for w in by_kind[False])  # the sources' watermarks


def test_late_records_go_to_the_side_output_or_are_counted(cluster, tmp_path):
    """No out-of-orderness allowed on input out of order by up to 3 s: some records are late.
    With a side output every event is either in its window's count or in the late output;
    without one, the counts and numLateRecordsDropped add up to the input."""
    # one source subtask reading 40 files of 1 s each in order, a file per read: a
    # file's first records are up to 3 s behind the previous file's last ones, whose watermark
    # fired their windows already
    generate(str(tmp_path / "in"), events=40_000, files=40, urls=50, seed=4, disorder_ms=3_000)
    expected = expected_windows(str(tmp_path / "in"), 1_000)
    late_dir = str(tmp_path / "late")
    job = run_windowed(
        cluster, tmp_path, "--window-ms", "1000", "--late-output", late_dir, parallelism=1, options=ONE_FILE_READS
    )
    status = wait_end(cluster, job)
    late: collections.Counter[tuple[str, int]] = collections.Counter()
    for url, _user, ts in committed_rows(tmp_path / "late"):
        late[(url, int(ts) - int(ts) % 1000)] += 1
    assert sum(late.values()) > 0, "the input should have produced late records"
    assert status["records_late_dropped"] == 0
    rows = window_rows(tmp_path / "out")
    assert len({(u, s) for u, s, _e, _c in rows}) == len(rows)  # one row per window
    got = {(u, s): c for u, s, _e, c in rows}
    for r in expected.itertuples():
        assert got.get((r.url, r.window_start), 0) + late[(r.url, r.window_start)] == r.count, r

    job = cluster.run(
        WINDOWED,
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out2"),
        "--window-ms",
        "1000",
        parallelism=1,
        options=ONE_FILE_READS,
    )
    status = wait_end(cluster, job)
    counted = sum(c for _u, _s, _e, c in window_rows(tmp_path / "out2"))
    assert status["records_late_dropped"] > 0
    assert counted + status["records_late_dropped"] == int(expected["count"].sum())
    text = sluice("status", job, "--cluster-dir", cluster.dir).stdout
    assert f"numLateRecordsDropped {status['records_late_dropped']}" in text


def test_session_windows_with_aggregates_and_apply(cluster, tmp_path):
    gap = 5_000
    os.makedirs(tmp_path / "in")
    events: list[dict[str, Any]] = []
    for user in range(40):
        t = 1_700_000_000_000 + user * 997
        for i in range(30):
            t += (i * 7919 + user * 104_729) % 9_000  # gaps of 0-9 s: some sessions break, some go on
            events.append({"user": user, "url": f"/p/{(i * user) % 7}", "ts": t})
    events.sort(key=lambda e: (e["ts"] // 3_000, -e["ts"]))  # out of order within 3 s chunks: the job's bound
    quarter = -(-len(events) // 4)
    for f in range(4):  # each file a stretch of time, so a subtask reading its files in order is never late
        with open(tmp_path / "in" / f"e-{f}.jsonl", "w") as fh:
            fh.writelines(json.dumps(e) + "\n" for e in events[f * quarter : (f + 1) * quarter])
    want: dict[tuple[int, int, int], tuple[int, int, int]] = {}
    for user in range(40):
        times = sorted((e["ts"], e["url"]) for e in events if e["user"] == user)
        session = [times[0]]
        for ts, url in times[1:] + [(None, None)]:
            if ts is not None and ts <= session[-1][0] + gap:
                session.append((ts, url))
                continue
            start, end = session[0][0], session[-1][0] + gap
            want[(user, start, end)] = (len(session), session[0][0], len({u for _t, u in session}))
            session = [(ts, url)]
    job = cluster.run(
        os.path.join(JOBS, "sessions.py"),
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--apply-output",
        str(tmp_path / "urls"),
        "--gap-ms",
        str(gap),
        parallelism=2,
    )
    wait_end(cluster, job)
    got = {(int(u), int(s), int(e)): (int(v), int(f)) for u, s, e, v, f in committed_rows(tmp_path / "out")}
    assert len(got) == len(committed_rows(tmp_path / "out"))
    assert got == {k: (n, first) for k, (n, first, _urls) in want.items()}
    urls = {(int(u), int(s), int(e)): int(n) for u, s, e, n in committed_rows(tmp_path / "urls")}
    assert urls == {k: distinct for k, (_n, _f, distinct) in want.items()}


def test_an_idle_source_subtask_does_not_hold_back_the_windows(cluster, tmp_path):
    """A watched directory whose files all go to source subtask 0: subtask 1 reads nothing.
    With an idleness timeout the windows fire on subtask 0's watermark alone, while the job runs."""
    os.makedirs(tmp_path / "in")
    job = run_windowed(
        cluster,
        tmp_path,
        "--window-ms",
        "1000",
        "--monitor-interval",
        "100",
        "--idleness-ms",
        "500",
        "--checkpoint-interval",
        "300",
    )
    try:
        wait_for(cluster, job, lambda s: s["state"] == "RUNNING", "the job running")
        written = 0
        for n in range(1_000):
            name = f"events-{n:04d}.jsonl"
            if zlib.crc32(name.encode()) % 2:
                continue  # subtask 1's: not written
            with open(tmp_path / "in" / f".{name}", "w") as f:
                f.writelines(
                    json.dumps({"url": "/a", "user": 1, "ts": 1_700_000_000_000 + written * 1000 + i}) + "\n"
                    for i in range(10)
                )
            os.rename(tmp_path / "in" / f".{name}", tmp_path / "in" / name)
            written += 1
            if written == 5:
                break
        # windows [0 s, 1 s) .. [3 s, 4 s) are passed by subtask 0's watermark; the job never ends
        want = {("/a", 1_700_000_000_000 + k * 1000, 1_700_000_000_000 + (k + 1) * 1000, 10) for k in range(4)}
        wait_until(lambda: want <= set(window_rows(tmp_path / "out")), 60, "windows fired by one subtask's watermark")
        # the windows' input watermark shows in status (task metrics come with heartbeats)
        status = wait_for(
            cluster,
            job,
            lambda s: all(t["watermark"] is not None for t in s["tasks"] if "window" in t["operator"]),
            "the window tasks' watermark in status",
            timeout=30,
        )
        assert status["state"] == "RUNNING"
    finally:
        sluice("cancel", job, "--cluster-dir", cluster.dir, check=False)


# -- failures ---------------------------------------------------------------------------------------
def start_long_windowed(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=300_000, files=120, urls=2_000, seed=6, disorder_ms=1_500)
    return run_windowed(
        cluster,
        tmp_path,
        "--window-ms",
        "10000",
        "--slide-ms",
        "5000",
        "--out-of-orderness-ms",
        "1500",
        "--checkpoint-interval",
        "300",
        options=SMALL_READS,  # a kill lands mid-job
    )


@pytest.mark.chaos
def test_windows_exactly_once_across_a_taskmanager_kill(cluster, tmp_path):
    job = start_long_windowed(cluster, tmp_path)
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint")
    kill_taskmanager_running(cluster, job)
    status = wait_end(cluster, job, timeout=300)
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None
    assert_windows_exact(tmp_path / "out", expected_windows(str(tmp_path / "in"), 10_000, 5_000))


@pytest.mark.chaos
def test_windows_exactly_once_across_a_leader_kill(ha_cluster, tmp_path):
    """On the cluster of two JobManagers (conftest.py), the leader killed."""
    cluster = ha_cluster
    job = start_long_windowed(cluster, tmp_path)
    status = wait_for(
        cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint"
    )
    old = status["leader"]
    kill9(pid_at(cluster, old))
    status = wait_end(cluster, job, timeout=300)
    assert status["leader"] != old and status["restored_checkpoint"] is not None
    assert_windows_exact(tmp_path / "out", expected_windows(str(tmp_path / "in"), 10_000, 5_000))


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_windows_exact_after_a_stop_at_2_and_a_resume_at_3_with_idleness(cluster, tmp_path, backend):
    """A watched directory with an idleness timeout (200 ms) far shorter than a source batch and
    a monitor interval (5 s) far longer, stopped with a savepoint at parallelism 2 and resumed at
    3, the rest of the input arriving while no job runs. Each resumed subtask restores the names
    read by both old ones and finds its own files at its first listing; one that runs out of files
    goes idle without holding the others back. With disorder within the bound no record is late
    and every window is exact across both runs. (A file that reaches a subtask after it went idle
    and the others' watermark passed its rows is late, as with any idle source: docs/event-time.md,
    "Idleness"; tests/unit covers a subtask that is not idle while a file of its own waits.)"""
    events = 240_000
    generate(str(tmp_path / "all"), events=events, files=160, urls=500, seed=8, disorder_ms=750)
    expected = expected_windows(str(tmp_path / "all"), 5_000)
    far = 1_700_000_000_000 + 2 * events  # fires every window of the data, never its own
    for k in range(3):  # one such file per subtask at parallelism 3, after its data files
        name = next(n for i in range(100) if zlib.crc32((n := f"events-9999-{i}.jsonl").encode()) % 3 == k)
        with open(tmp_path / "all" / name, "w") as f:
            f.write(json.dumps({"url": "/flush", "user": 0, "ts": far}) + "\n")
    names = sorted(os.listdir(tmp_path / "all"))
    os.makedirs(tmp_path / "in")

    def publish(batch: list[str]) -> None:  # atomically, as a watched directory needs
        for name in batch:
            os.rename(tmp_path / "all" / name, tmp_path / "in" / name)

    publish(names[:100])
    args = ["--window-ms", "5000", "--out-of-orderness-ms", "1500", "--monitor-interval", "5000"]
    args += ["--idleness-ms", "200", "--checkpoint-interval", "300", "--state-backend", backend]
    job = run_windowed(cluster, tmp_path, *args)
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint")
    stop = sluice("stop", job, "--savepoint-dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir)
    savepoint = stop.stdout.strip().splitlines()[-1]
    before = wait_for(cluster, job, lambda s: s["state"] in ("FINISHED", "CANCELED", "FAILED"), "the stop")
    assert before["records_late_dropped"] == 0
    publish(names[100:])
    run = [
        "run",
        WINDOWED,
        "--detach",
        "--cluster-dir",
        cluster.dir,
        "--parallelism",
        "3",
        "--from-savepoint",
        savepoint,
    ]
    job_args = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), *args]
    resumed = sluice(*run, "--", *job_args).stdout.strip().splitlines()[-1]
    try:
        status = wait_for(
            cluster,
            resumed,
            lambda s: all(t["watermark"] == far - 1_501 for t in s["tasks"] if "window" in t["operator"]),
            "every window task at the far watermark",
            timeout=300,
        )
        assert status["records_late_dropped"] == 0
        want = {(r.url, r.window_start, r.window_end) for r in expected.itertuples()}
        wait_until(
            lambda: want <= {(u, s, e) for u, s, e, _c in window_rows(tmp_path / "out")},
            120,
            "every window of the data committed",
            interval=0.5,
        )
        assert_windows_exact(tmp_path / "out", expected)
    finally:
        sluice("cancel", resumed, "--cluster-dir", cluster.dir, check=False)
