"""bench/output_check.py: exactly-once checked at the output. Sluice outputs are written by the
real file sink (committed parts, commit order = file-name order); the peer's are batch files as
bench/structured_streaming_bench.py writes them. A correct update stream passes; a duplicated
committed line, a count that does not grow, a wrong or missing final count each fail, named
by file, line and key."""

from __future__ import annotations

import os
import shutil
import sys

import pyarrow as pa
import pytest

from taskmanager.operators.sinks import FileSinkWriter
from taskmanager.spark_engine import Batch
from taskmanager.task import SOURCE_SNAPSHOT_LOG, task_tag

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import failover_bench
import output_check as oc

JOB = "a1b2c3d4e5f6a7b8"
EXPECTED = {"/a": 3, "/b": 2, "/c": 1}


def violated(r: oc.OutputCheck) -> oc.Violation:
    """The check's violation (the test fails when there is none)."""
    assert r.violation is not None, r.describe()
    return r.violation


def sluice_output(tmp_path, epochs: list[dict[int, list[tuple[str, int]]]]) -> str:
    """Each epoch: per sink subtask, the (url, count) lines it writes; one checkpoint commits each epoch."""
    out = str(tmp_path / "out")
    writers = {
        s: FileSinkWriter({"path": out}, s, JOB, 0, True, tag=task_tag(JOB, 1, "agg", s))
        for s in {s for e in epochs for s in e}
    }
    for cid, epoch in enumerate(epochs, 1):
        for s, rows in epoch.items():
            if rows:
                table = pa.table({"url": [u for u, _ in rows], "count": [c for _, c in rows]})
                writers[s].process(Batch(engine=None, table=table))
        for w in writers.values():
            w.snapshot(cid)
        for w in writers.values():
            w.notify_complete(cid)
    return out


# a correct update stream: /a and /c on subtask 0, /b on subtask 1; /a updated twice in one epoch
GOOD = [
    {0: [("/a", 1), ("/c", 1)], 1: [("/b", 1)]},
    {0: [("/a", 2), ("/a", 3)], 1: [("/b", 2)]},
]


def test_a_correct_sluice_update_stream_passes(tmp_path):
    r = oc.check_sluice_output(sluice_output(tmp_path, GOOD), EXPECTED)
    assert r.ok, r.describe()
    assert (r.files, r.lines) == (4, 6)
    assert {k: v[0] for k, v in r.final.items()} == EXPECTED
    assert r.describe().startswith("exactly once (no line twice, counts increasing, final counts exact)")


def test_the_parts_are_read_in_commit_order(tmp_path):
    out = sluice_output(tmp_path, GOOD)
    parts = [p for p, _ in oc.sluice_parts(out)]
    assert [oc.part_checkpoint(p) for p in parts] == [1, 1, 2, 2]


def test_a_duplicated_committed_line_fails(tmp_path):
    out = sluice_output(tmp_path, GOOD)
    # the first part of checkpoint 2 committed again under a later checkpoint: a duplicate delivery
    second = [p for p, _ in oc.sluice_parts(out)][2]
    shutil.copy(second, second.replace("part-000000000002-", "part-000000000003-"))
    r = oc.check_sluice_output(out, EXPECTED)
    assert not r.ok
    v = violated(r)
    assert (v.rule, v.key, v.line) == ("duplicate line", "/a", 1)
    assert v.file is not None and os.path.basename(v.file).startswith("part-000000000003-00000-")
    assert "/a,2 was already committed in part-000000000002-00000-" in v.detail and "line 1" in v.detail
    assert "VIOLATION: duplicate line" in r.describe()


def test_a_count_that_decreases_fails(tmp_path):
    # a replay from an older state: /b goes back to 1 after 2
    out = sluice_output(tmp_path, [*GOOD, {1: [("/b", 1)]}])
    r = oc.check_sluice_output(out, None)  # (a) would catch the repeated "/b,1" too; the rules apply in order
    assert (violated(r).rule, violated(r).key) == ("duplicate line", "/b")
    out2 = sluice_output(tmp_path / "2", [{0: [("/a", 2)]}, {0: [("/a", 1)]}])
    r = oc.check_sluice_output(out2, None)
    v = violated(r)
    assert (v.rule, v.key, v.line) == ("count not increasing", "/a", 1)
    assert "count 1 after 2" in v.detail and v.file is not None and oc.part_checkpoint(v.file) == 2


def test_a_missing_key_fails(tmp_path):
    out = sluice_output(tmp_path, [{0: [("/a", 1), ("/a", 2), ("/a", 3)], 1: [("/b", 1), ("/b", 2)]}])
    r = oc.check_sluice_output(out, EXPECTED)
    assert (violated(r).rule, violated(r).key, violated(r).file) == ("missing key", "/c", None)
    assert "expected count 1" in str(violated(r))


def test_a_wrong_final_count_and_an_unexpected_key_fail(tmp_path):
    r = oc.check_sluice_output(sluice_output(tmp_path, GOOD), {**EXPECTED, "/a": 4})
    assert (violated(r).rule, violated(r).key, violated(r).line) == ("final count", "/a", 2)
    assert "last committed count 3, expected 4" in violated(r).detail
    r = oc.check_sluice_output(sluice_output(tmp_path / "2", GOOD), {"/a": 3, "/b": 2})
    assert (violated(r).rule, violated(r).key) == ("unexpected key", "/c")


def test_without_expected_counts_only_rules_a_and_b_apply(tmp_path):
    r = oc.check_sluice_output(sluice_output(tmp_path, GOOD), None)
    assert r.ok and not r.checked_final
    assert "final counts" not in r.describe()


def test_no_output_directory_fails(tmp_path):
    r = oc.check_sluice_output(str(tmp_path / "nothing"), EXPECTED)
    assert violated(r).rule == "no output"


# -- the peer's batch files --------------------------------------------------------------------------
def peer_output(tmp_path, batches: dict[int, str]) -> str:
    out = tmp_path / "peer-out"
    out.mkdir()
    for batch_id, text in batches.items():
        (out / f"batch-{batch_id:06d}.csv").write_text(text)
    (out / ".batch-000099.csv.tmp").write_text("/a,1\n")  # a batch being written: not committed
    return str(out)


def test_a_correct_peer_update_stream_passes(tmp_path):
    r = oc.check_peer_output(peer_output(tmp_path, {0: "/a,1\n/b,1\n", 1: "/a,2\n/c,1\n", 2: "/a,3\n/b,2\n"}), EXPECTED)
    assert r.ok, r.describe()
    assert (r.files, r.lines) == (3, 6)


def test_peer_batches_are_read_in_batch_id_order_not_name_order(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "batch-999999.csv").write_text("/a,1\n")
    (out / "batch-1000000.csv").write_text("/a,2\n")  # sorts before by name; after by batch id
    assert oc.check_peer_output(str(out), {"/a": 2}).ok


@pytest.mark.parametrize(
    "batches, rule, key, where",
    [
        ({0: "/a,1\n/b,1\n", 1: "/a,2\n/c,1\n", 2: "/a,3\n/b,2\n/c,1\n"}, "duplicate line", "/c", ("000002", 3)),
        ({0: "/a,2\n/b,1\n", 1: "/a,1\n/c,1\n"}, "count not increasing", "/a", ("000001", 1)),
        ({0: "/a,1\n/b,1\n", 1: "/a,3\n/b,2\n"}, "missing key", "/c", None),
        ({0: "/a,1\n/b,1\n/c,1\n", 1: "/a,3\nbroken\n"}, "malformed", "broken", ("000001", 2)),
    ],
)
def test_peer_violations_are_named_by_file_line_and_key(tmp_path, batches, rule, key, where):
    v = violated(oc.check_peer_output(peer_output(tmp_path, batches), EXPECTED))
    assert (v.rule, v.key) == (rule, key)
    if where is None:
        assert v.file is None and v.line is None
    else:
        assert v.file is not None and os.path.basename(v.file) == f"batch-{where[0]}.csv" and v.line == where[1]
        assert f"batch-{where[0]}.csv line {where[1]}" in str(v)


# -- JobManager failover: the expected counts come from the source offsets of each checkpoint ----------
def snapshot_log(tmp_path, offsets: dict[int, dict[int, int]], job: str = JOB) -> str:
    """TaskManager log lines of the source subtasks' snapshots, in the task's own format."""
    path = tmp_path / "taskmanager-0.log"
    with open(path, "a") as f:
        for cid, per_subtask in offsets.items():
            for s, n in per_subtask.items():
                line = SOURCE_SNAPSHOT_LOG % (task_tag(job, 1, "ids", s), cid, f"offset {n}")
                f.write(f"2026-11-23 12:00:0{cid},000 INFO sluice.taskmanager.task: {line}\n")
    return str(path)


def test_the_generator_counts_follow_the_source_subtasks_ids():
    # subtask 0 emits ids 0, 2, 4, ...: 500 of them hit each even key (id % 50) 20 times
    assert failover_bench.expected_counts({0: 500}) == {str(k): 20 for k in range(0, 50, 2)}
    both = failover_bench.expected_counts({0: 500, 1: 3})
    assert both["1"] == both["3"] == both["5"] == 1 and "7" not in both and both["0"] == 20


def by_parity(counts: dict[str, int], parity: int) -> list[tuple[str, int]]:
    return [(k, c) for k, c in counts.items() if int(k) % 2 == parity]


def test_failover_output_is_checked_against_the_generator_at_each_keys_checkpoint(tmp_path):
    at1, at2 = failover_bench.expected_counts({0: 500, 1: 500}), failover_bench.expected_counts({0: 1000, 1: 500})
    epochs = [{0: by_parity(at1, 0), 1: by_parity(at1, 1)}, {0: by_parity(at2, 0)}]  # odd keys: no update in 2
    logs = [snapshot_log(tmp_path, {1: {0: 500, 1: 500}, 2: {0: 1000, 1: 500}, 3: {0: 1500, 1: 1000}})]
    out = sluice_output(tmp_path / "ok", epochs)
    r = failover_bench.check_output(out, logs, JOB)
    assert r.ok and r.checked_final, r.describe()
    assert r.final["0"][0] == 40 and r.final["1"][0] == 20

    wrong = [epochs[0], {0: [*by_parity(at2, 0)[:-1], ("48", 41)]}]  # one count off by one
    r = failover_bench.check_output(sluice_output(tmp_path / "wrong", wrong), logs, JOB)
    assert (violated(r).rule, violated(r).key) == ("final count", "48")
    assert "last committed count 41, expected 40" in violated(r).detail

    lost = [epochs[0], {0: [(k, c) for k, c in by_parity(at2, 0) if k != "10"]}]  # key 10's update lost
    r = failover_bench.check_output(sluice_output(tmp_path / "lost", lost), logs, JOB)
    assert (violated(r).rule, violated(r).key) == ("final count", "10")


def test_failover_output_without_the_snapshot_lines_fails(tmp_path):
    at1 = failover_bench.expected_counts({0: 500, 1: 500})
    out = sluice_output(tmp_path / "o", [{0: list(at1.items())}])
    logs = [snapshot_log(tmp_path, {1: {0: 500}})]  # subtask 1's line is missing
    r = failover_bench.check_output(out, logs, JOB)
    assert violated(r).rule == "source snapshots" and "checkpoint 1" in violated(r).detail
    other = [snapshot_log(tmp_path / "..", {1: {0: 500, 1: 500}}, job="ffffeeeeddddcccc")]  # another job's
    assert violated(failover_bench.check_output(out, other, JOB)).rule == "source snapshots"
