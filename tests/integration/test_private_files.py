"""What a cluster writes is its user's alone (docs/security.md, "Files are the user's alone"):
the cluster directory, its logs, a job's checkpoints and its output carry no permission for the
group or others under the default process.umask of 077."""

from __future__ import annotations

import os
import stat
import sys

import pytest
from harness import EXAMPLES, read_counts, wait_ended

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration


def _shared(root: str) -> list[str]:
    """Every file and directory below `root` (itself included) that the group or others may use."""
    found = []
    for d, dirs, files in os.walk(root):
        for path in [d, *(os.path.join(d, n) for n in dirs + files)]:
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                found.append(f"{path} ({stat.filemode(mode)})")
    return sorted(set(found))


def test_logs_checkpoints_and_outputs_are_private(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=20_000, files=2, urls=500, seed=5)
    out = tmp_path / "out"
    job_id = cluster.run(
        os.path.join(EXAMPLES, "page_views.py"), "--input", str(tmp_path / "in"), "--output", str(out), parallelism=2
    )
    status = wait_ended(cluster, job_id)
    assert status["state"] == "FINISHED", status
    assert read_counts(str(out))[0], "the job wrote no output"
    checkpoints = os.path.join(cluster.dir, "checkpoints", job_id)
    assert os.path.isdir(checkpoints) and os.listdir(checkpoints), "the job left no checkpoint to look at"
    logs = os.path.join(cluster.dir, "log")
    assert any(n.startswith("taskmanager") for n in os.listdir(logs))
    assert stat.S_IMODE(os.stat(cluster.dir).st_mode) == 0o700
    for root in (logs, os.path.join(cluster.dir, "run"), checkpoints, str(out)):
        assert _shared(root) == [], f"readable by others below {root}"
