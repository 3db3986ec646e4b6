"""Savepoints end to end, through the CLI on a real cluster (docs/savepoints.md).

The reference job reads a watched directory (unbounded), so the job runs until it is stopped
or cancelled, and more input can arrive between a savepoint and the resume. Each test checks
the committed output against an independent count of every event written:

- savepoint -> cancel -> resume from the savepoint moved to another directory: exact final counts;
- stop with a savepoint commits everything up to it and nothing after (the resumed job's
  output continues it with no line twice), resumed at parallelism 3, then `sluice rescale`
  to 1: exact counts and an update stream without a duplicate at every step;
- bad input (missing, corrupt or foreign savepoint; unknown job; parallelism out of range)
  gives a clear error and leaves a running job untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from harness import EXAMPLES, assert_update_stream, last_line, read_counts, sluice, wait_for
from page_view_jobs import Input, run_page_views, wait_counts

sys.path.insert(0, EXAMPLES)

pytestmark = pytest.mark.integration

PAGE_VIEWS = os.path.join(EXAMPLES, "page_views.py")


def test_savepoint_cancel_and_resume_from_a_moved_savepoint(cluster, tmp_path):
    inp = Input(tmp_path)
    inp.add(events=60_000, files=20)
    job = run_page_views(cluster, inp, tmp_path / "out")
    wait_counts(tmp_path / "out", inp.expected)  # everything so far read and committed

    path = last_line(sluice("savepoint", job, "--dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir))
    assert os.path.isfile(os.path.join(path, "_metadata")), path
    metadata = json.loads(open(os.path.join(path, "_metadata")).read())
    assert metadata["format"] == "sluice-savepoint" and metadata["version"] == 1
    assert {"page-views", "counts", "counts-sink"} <= set(metadata["operators"])
    assert str(tmp_path) not in json.dumps(metadata), "a savepoint holds no absolute path"
    status = cluster.status(job)
    assert [s["status"] for s in status["savepoints"]] == ["COMPLETED"] and status["savepoints"][0]["path"] == path

    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")
    moved = str(tmp_path / "elsewhere" / "sp")
    shutil.move(path, moved)  # relocatable: nothing in it names where it was written

    inp.add(events=30_000, files=10)  # arrives while no job runs
    job2 = run_page_views(cluster, inp, tmp_path / "out", "--from-savepoint", moved)
    status = wait_for(cluster, job2, lambda s: s["state"] == "RUNNING", "the resumed job")
    assert status["restored_savepoint"] == moved and status["restored_checkpoint"] == metadata["checkpoint_id"]
    wait_counts(tmp_path / "out", inp.expected)
    sluice("cancel", job2, "--cluster-dir", cluster.dir)
    wait_for(cluster, job2, lambda s: s["state"] == "CANCELED", "the cancel")


def test_stop_with_savepoint_then_resume_at_3_then_rescale_to_1(cluster, tmp_path):
    inp = Input(tmp_path)
    out = tmp_path / "out"
    inp.add(events=60_000, files=20)
    job = run_page_views(cluster, inp, out)
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"], "a checkpoint")
    inp.add(events=40_000, files=20)  # still being read when the stop comes, most likely

    path = last_line(sluice("stop", job, "--savepoint-dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir))
    status = cluster.status(job)
    assert status["state"] == "FINISHED" and status["savepoint"] == path
    assert not [n for n in os.listdir(out) if n.startswith(".")], "the stop committed every part"
    _, at_stop = read_counts(str(out))
    assert_update_stream(at_stop)

    inp.add(events=30_000, files=10)
    job2 = run_page_views(cluster, inp, out, "--from-savepoint", path, parallelism=3)
    status = wait_for(cluster, job2, lambda s: s["state"] == "RUNNING", "the job at parallelism 3")
    assert {t["subtask"] for t in status["tasks"]} == {0, 1, 2}
    lines = wait_counts(out, inp.expected)
    assert_update_stream(lines)  # nothing after the savepoint was committed by the stopped job

    proc = sluice(
        "rescale", job2, "--parallelism", "1", "--savepoint-dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir
    )
    job3 = last_line(proc)
    assert cluster.status(job2)["state"] == "FINISHED"
    inp.add(events=20_000, files=10)
    status = wait_for(cluster, job3, lambda s: s["state"] == "RUNNING", "the job at parallelism 1")
    assert {t["subtask"] for t in status["tasks"]} == {0}
    lines = wait_counts(out, inp.expected)
    assert_update_stream(lines)
    sluice("cancel", job3, "--cluster-dir", cluster.dir)
    wait_for(cluster, job3, lambda s: s["state"] == "CANCELED", "the cancel")


def test_bad_savepoint_input_is_a_clear_error_and_the_job_goes_on(cluster, tmp_path):
    inp = Input(tmp_path)
    inp.add(events=20_000, files=10)
    job = run_page_views(cluster, inp, tmp_path / "out")
    wait_counts(tmp_path / "out", inp.expected)

    def fails(*args: str) -> str:
        cut = args.index("--") if "--" in args else len(args)  # client options go before the job's
        proc = sluice(*args[:cut], "--cluster-dir", cluster.dir, *args[cut:], check=False)
        assert proc.returncode != 0, proc.stdout
        return proc.stderr

    assert "no job with id" in fails("savepoint", "0" * 32)
    assert "parallelism must be between 1 and" in fails("rescale", job, "--parallelism", "0")
    assert "parallelism must be between 1 and" in fails("rescale", job, "--parallelism", "999")
    assert "no operator with uid 'nope'" in fails("rescale", job, "--parallelism", "2", "--operator", "nope")

    def run_from(path: str, *extra: str) -> str:
        return fails(
            "run",
            PAGE_VIEWS,
            "--from-savepoint",
            path,
            *extra,
            "--",
            "--input",
            str(inp.dir),
            "--output",
            str(tmp_path / "o2"),
        )

    assert "no _metadata there" in run_from(str(tmp_path / "missing"))
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "_metadata").write_text("{not json")
    assert "not JSON" in run_from(str(corrupt))
    (corrupt / "_metadata").write_text(json.dumps({"format": "sluice-savepoint", "version": 99}))
    assert "format version 99" in run_from(str(corrupt))

    path = last_line(sluice("savepoint", job, "--dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir))
    # a job that has none of the savepoint's operators: refused unless told to drop that state
    dedup = os.path.join(EXAMPLES, "dedup.py")
    err = fails(
        "run",
        dedup,
        "--from-savepoint",
        path,
        "--",
        "--input",
        str(inp.dir),
        "--output",
        str(tmp_path / "o3"),
        "--ttl-ms",
        "5",
    )
    assert "does not have: counts, counts-sink, page-views" in err and "--allow-non-restored-state" in err

    status = cluster.status(job)
    assert status["state"] == "RUNNING" and status["restarts"] == 0  # untouched by all of it
    inp.add(events=10_000, files=5)
    wait_counts(tmp_path / "out", inp.expected)
    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")


def test_cancel_then_resume_from_a_retained_checkpoint_at_another_parallelism(cluster, tmp_path):
    """`sluice run --from-savepoint <checkpoint dir>/<job>/chk-<n>` (docs/savepoints.md): the
    cancelled job's last checkpoint is retained, restores at parallelism 3, and the resumed
    job neither deletes nor changes it (no claim)."""
    inp = Input(tmp_path)
    out = tmp_path / "out"
    inp.add(events=60_000, files=20)
    job = run_page_views(cluster, inp, out)
    wait_counts(out, inp.expected)  # everything so far read and committed: a checkpoint has all of it
    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")

    job_dir = os.path.join(cluster.dir, "checkpoints", job)
    complete = sorted(
        int(n[4:]) for n in os.listdir(job_dir) if n.startswith("chk-") and os.path.isfile(f"{job_dir}/{n}/_metadata")
    )
    assert complete, os.listdir(job_dir)  # retained after the cancel
    chk = os.path.join(job_dir, f"chk-{complete[-1]}")
    before = {os.path.join(d, f): os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(chk) for f in fs}

    job_args = ["--", "--input", str(inp.dir), "--output", str(tmp_path / "o2")]
    err = sluice("run", PAGE_VIEWS, "--from-savepoint", job_dir, "--cluster-dir", cluster.dir, *job_args, check=False)
    err = err.stderr
    assert "no _metadata there" in err and f"chk-{complete[-1]}: give one of them" in err, err

    inp.add(events=30_000, files=10)  # arrives while no job runs
    job2 = run_page_views(cluster, inp, out, "--from-savepoint", chk, parallelism=3)
    status = wait_for(cluster, job2, lambda s: s["state"] == "RUNNING", "the job resumed at parallelism 3")
    assert {t["subtask"] for t in status["tasks"]} == {0, 1, 2}
    assert status["restored_checkpoint"] == complete[-1]
    lines = wait_counts(out, inp.expected)  # exact: nothing lost, nothing counted twice
    assert_update_stream(lines)  # and no committed line written twice
    wait_for(cluster, job2, lambda s: (s["last_completed_checkpoint"] or 0) > complete[-1], "a checkpoint of its own")
    after = {os.path.join(d, f): os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(chk) for f in fs}
    assert after == before  # the resumed job did not take the checkpoint over
    sluice("cancel", job2, "--cluster-dir", cluster.dir)
    wait_for(cluster, job2, lambda s: s["state"] == "CANCELED", "the cancel")
