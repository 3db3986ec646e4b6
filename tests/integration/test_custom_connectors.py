"""A source and a sink written only against the public connector API
(tests/integration/jobs/line_connectors.py) on the shared cluster (1 JobManager,
2 TaskManagers, real Spark): the directory enumerator in the JobManager assigns
the files there at the start and a file that appears while the job runs, the readers'
positions and the sink's pending parts survive a kill -9 of a TaskManager, and the
committed counts are exact with no line written twice."""

from __future__ import annotations

import collections
import csv
import os

import pytest
from harness import JOBS, kill_taskmanager_running, wait_for
from helpers import wait_until

pytestmark = pytest.mark.integration


def write_words(directory, name: str, words: list[str]) -> None:
    """Visible at once and whole: written under a hidden name, then renamed."""
    hidden = directory / f".{name}"
    hidden.write_text("".join(f"{w}\n" for w in words))
    os.replace(hidden, directory / name)


def committed(out) -> list[tuple[str, int]]:
    lines = []
    for path in sorted(out.glob("part-*.csv")):
        with open(path, newline="") as f:
            lines += [(row[0], int(row[1])) for row in csv.reader(f)]
    return lines


def finals(lines: list[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for word, count in lines:
        out[word] = max(out.get(word, 0), count)
    return out


@pytest.mark.chaos
def test_user_connectors_are_exact_across_a_kill_and_a_file_found_later_is_read(cluster, tmp_path):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    expected: collections.Counter[str] = collections.Counter()
    for f in range(3):
        words = [f"w{(f * 131 + i * 17) % 40}" for i in range(600)]
        expected.update(words)
        write_words(inputs, f"f{f}.txt", words)
    job_id = cluster.run(os.path.join(JOBS, "custom_connector.py"), str(inputs), str(out), "500", parallelism=2)
    wait_for(
        cluster,
        job_id,
        lambda s: s["state"] == "RUNNING" and s["last_completed_checkpoint"] and committed(out),
        "counts committed",
    )
    kill_taskmanager_running(cluster, job_id)  # the supervisor starts it again
    wait_for(cluster, job_id, lambda s: s["state"] == "RUNNING" and s["restarts"] >= 1, "the job to run again")

    late = [f"late{i % 5}" for i in range(100)] + ["w1"] * 10
    expected.update(late)
    write_words(inputs, "late.txt", late)  # a split the enumerator finds after the job started
    wait_until(lambda: finals(committed(out)) == dict(expected), 240, "every word counted, the late file too")
    status = cluster.status(job_id)
    assert status["restored_checkpoint"] is not None, status
    lines = committed(out)
    dups = [k for k, n in collections.Counter(lines).items() if n > 1]
    assert not dups, f"{len(dups)} lines committed twice, e.g. {dups[:5]}"
    cluster.client().cancel(job_id)
    wait_for(cluster, job_id, lambda s: s["state"] == "CANCELED", "the job to be cancelled")
