"""Composite keys, avg and schemas checked at submit, on one shared local cluster (embedded
ZooKeeper, 1 JobManager, 2 TaskManagers, real Spark), driven through the `sluice` CLI:
a job keyed by two columns with sum and avg gives the exact value of every key through a file
sink, and a job naming a column that is not there is rejected at submit, by the client and by
the JobManager, with the message that names it."""

from __future__ import annotations

import glob
import json
import math
import os
import re
import textwrap

import pytest
from harness import committed_rows, sluice
from helpers import wait_until

from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.client import SluiceError

pytestmark = pytest.mark.integration

COUNTRIES = ("DE", "FR", "US")
DEVICES = ("phone", "tablet", "tv", "watch")


def write_events(directory, files: int = 6, per_file: int = 400) -> list[dict]:
    """JSON lines over `files` files; every 37th event has no device (a null key column)
    and every 11th no value (avg skips it, count does not)."""
    os.makedirs(directory)
    events = []
    for f in range(files):
        with open(os.path.join(directory, f"events-{f}.jsonl"), "w") as out:
            for i in range(per_file):
                n = f * per_file + i
                e: dict = {"country": COUNTRIES[n % 3], "device": DEVICES[(n * 7) % 4], "v": (n * 13) % 101 - 20}
                if n % 37 == 5:
                    del e["device"]
                if n % 11 == 3:
                    e["v"] = None
                events.append(e)
                out.write(json.dumps(e) + "\n")
    return events


def expected_per_key(events: list[dict]) -> dict[tuple[str, str], tuple[int, int, float]]:
    """(country, device) -> (rows, sum of v, mean of the non-null v), computed without Sluice."""
    acc: dict[tuple[str, str], list[int]] = {}
    for e in events:
        if e.get("device") is None:
            continue
        a = acc.setdefault((e["country"], e["device"]), [0, 0, 0])
        a[0] += 1
        if e["v"] is not None:
            a[1] += e["v"]
            a[2] += 1
    return {k: (n, total, total / nv) for k, (n, total, nv) in acc.items()}


JOB = textwrap.dedent(
    """\
    import sys

    from sluice.api import FileSink, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    events = env.from_files(sys.argv[1], format="json", schema="country string, device string, v long")
    per_key = events.key_by("country", "device").aggregate(n=("count", "*"), total=("sum", "v"), mean=("avg", "v"))
    per_key.sink_to(FileSink(sys.argv[2], columns=("country", "device", "n", "total", "mean")))
    env.execute("two_keys")
    """
)

REJECTED = textwrap.dedent(
    """\
    import sys

    from sluice.api import FileSink, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    rows = env.from_collection([{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    rows.filter("v > 0").key_by("k").sum("v").sink_to(FileSink(sys.argv[1], columns=("k", "sum")))
    env.execute("wrong_sink_column")
    """
)
MESSAGE = "operators[3].config.columns: no column 'sum'; columns are: k, v"


def test_two_column_key_with_sum_and_avg_gives_exact_values_per_key(cluster, tmp_path):
    events = write_events(tmp_path / "in")
    expected = expected_per_key(events)
    jobfile = tmp_path / "two_keys.py"
    jobfile.write_text(JOB)
    job_id = cluster.run(str(jobfile), str(tmp_path / "in"), str(tmp_path / "out"), parallelism=2)
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=240,
        message=f"job {job_id} to end",
    )
    assert status["state"] == "FINISHED", status
    assert {t["subtask"] for t in status["tasks"]} == {0, 1}

    # An update stream: a key's row count grows with each update, so its last value has the largest n.
    final: dict[tuple[str, str], tuple[int, int, float]] = {}
    for country, device, n, total, mean in committed_rows(tmp_path / "out"):
        key = (country, device)
        assert device, f"a row with a null key reached the sink: {(country, device, n)}"
        if key not in final or int(n) > final[key][0]:
            final[key] = (int(n), int(total), float(mean))
    assert set(final) == set(expected)
    for key, (want_n, want_total, want_mean) in expected.items():
        got = final[key]
        assert got[:2] == (want_n, want_total), key
        assert math.isclose(got[2], want_mean, rel_tol=1e-12), (key, got[2], want_mean)

    # the rows with a null device were dropped by the producers, counted and logged
    dropped = 0
    for log in glob.glob(os.path.join(cluster.dir, "log", "*")):
        with open(log, errors="replace") as f:
            text = f.read()
        dropped += sum(
            int(m) for m in re.findall(r"(\d+) rows with a null in key \(country, device\) were dropped in all", text)
        )
    assert dropped == sum(1 for e in events if e.get("device") is None)


def test_a_wrong_sink_column_is_rejected_at_submit(cluster, tmp_path):
    jobfile = tmp_path / "wrong_sink_column.py"
    jobfile.write_text(REJECTED)
    proc = sluice("run", str(jobfile), "--cluster-dir", cluster.dir, "--", str(tmp_path / "out"), check=False)
    assert proc.returncode == 2, proc
    assert f"invalid job: {MESSAGE}" in proc.stdout + proc.stderr
    assert not os.path.exists(tmp_path / "out")

    # The JobManager checks the carried schemas too, for a client that did not.
    env = StreamExecutionEnvironment()
    rows = env.from_collection([{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    rows.filter("v > 0").key_by("k").sum("v").sink_to(FileSink(str(tmp_path / "out"), columns=("k", "sum")))
    client = cluster.client()
    try:
        with pytest.raises(SluiceError) as info:
            client.submit(env.get_job_graph("wrong_sink_column"))
        assert f"invalid job: {MESSAGE}" in str(info.value)
        assert not any(j.name == "wrong_sink_column" for j in client.list())
    finally:
        client.close()
