"""A TaskManager gives a finished job's memory back (taskmanager/memory_reclaim.py and
docs/monitoring.md, "Memory"): every task of a finished job is named in a reclaim of the
TaskManager that ran it, after the task finished."""

from __future__ import annotations

import re

from harness import taskmanager_log_lines, wait_end
from helpers import wait_until
from page_view_jobs import assert_exactly_once, start_page_views

TAG = re.compile(r"\[job \S+ attempt \d+ task [^\]]+\]")


def test_every_finished_task_is_named_in_a_reclaim_of_its_taskmanager(cluster, tmp_path):
    job_id, expected = start_page_views(cluster, tmp_path, events=40_000, files=8)
    wait_end(cluster, job_id)
    assert_exactly_once(tmp_path, expected)
    finished = {
        tag
        for line in taskmanager_log_lines(cluster.dir, f"[job {job_id} ", " finished: ")
        for tag in TAG.findall(line)
    }
    assert len(finished) >= 2, finished  # page views at parallelism 2: at least its two chains' subtasks

    def reclaimed() -> set[str] | None:
        lines = taskmanager_log_lines(cluster.dir, f"[job {job_id} ", "reclaimed memory in")
        named = {tag for line in lines for tag in TAG.findall(line)}
        return named if finished <= named else None

    wait_until(reclaimed, timeout=30, message=f"a reclaim naming each of {sorted(finished)}")
    for line in taskmanager_log_lines(cluster.dir, f"[job {job_id} ", "reclaimed memory in"):
        assert re.search(r"RSS \d+ -> \d+ MiB$", line.rstrip()), line
