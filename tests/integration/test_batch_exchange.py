"""BATCH exchanges on the shared cluster (1 JobManager, 2 TaskManagers, real Spark): a
job at parallelism 4 whose hash exchanges cross TaskManagers goes through blocking result
partitions (files on each TaskManager, read locally and over DataExchange once their
producers finished); the keyed counts come out once per url, the event-time windows fire at
the end with no row late, and the partitions' files are gone after the job."""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import sys
import textwrap

import pytest
from harness import EXAMPLES
from helpers import wait_until

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration

WINDOW_MS = 60_000
JOB = textwrap.dedent(
    """
    import sys

    from sluice.api import FileSink, StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy

    source, counts_dir, windows_dir = sys.argv[1:4]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode("BATCH")
    events = env.from_files(source, format="json", schema="url string, user long, ts long", name="page views")
    events.key_by("url").count().sink_to(FileSink(counts_dir, columns=("url", "count")), name="counts sink")
    # no out-of-orderness allowed: streaming would drop disordered rows as late; BATCH reads all
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    windows = events.assign_timestamps_and_watermarks(strategy).key_by("url").window(
        TumblingEventTimeWindows.of({window_ms})
    )
    windows.count().sink_to(
        FileSink(windows_dir, columns=("url", "window_start", "window_end", "count")), name="windows sink"
    )
    env.execute("batch exchange")
    """
).format(window_ms=WINDOW_MS)


def lines(directory) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "part-*.csv"))):
        with open(path) as f:
            out += [line.rstrip("\n") for line in f if line.strip()]
    return out


def taskmanager_logs(cluster) -> list[str]:
    return [p["log"] for p in cluster.info["processes"] if p["role"] == "taskmanager"]


def working_dirs(cluster) -> set[str]:
    """The working directory of every TaskManager process the cluster ran (restarts included)."""
    found: list[str] = []
    for log in taskmanager_logs(cluster):
        with open(log) as f:
            found += re.findall(r": working directory (\S+)", f.read())  # not "removing the working directory"
    return set(found)


def test_a_batch_job_exchanges_through_blocking_partitions_across_taskmanagers(cluster, tmp_path):
    expected = generate(str(tmp_path / "in"), events=20_000, files=16, urls=300, seed=5, disorder_ms=30_000)
    events: collections.Counter[tuple[str, int]] = collections.Counter()
    for path in glob.glob(str(tmp_path / "in" / "*.jsonl")):
        with open(path) as f:
            for line in f:
                e = json.loads(line)
                events[(e["url"], e["ts"] - e["ts"] % WINDOW_MS)] += 1
    job_file = tmp_path / "batch_job.py"
    job_file.write_text(JOB)
    counts_dir, windows_dir = tmp_path / "counts", tmp_path / "windows"
    job_id = cluster.run(str(job_file), str(tmp_path / "in"), str(counts_dir), str(windows_dir), parallelism=4)

    final = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=300,
        message="the batch job to end",
    )
    assert final["state"] == "FINISHED", final.get("failure")
    assert final["restarts"] == 0
    assert len({t["taskmanager"] for t in final["tasks"]}) == 2  # the exchanges crossed TaskManagers

    counts = [tuple(line.rsplit(",", 1)) for line in lines(counts_dir)]
    assert len(counts) == len({url for url, _ in counts})  # BATCH: one final line per url, no updates
    assert {url: int(n) for url, n in counts} == expected

    windows: collections.Counter[tuple[str, int]] = collections.Counter()
    for line in lines(windows_dir):
        url, start, _end, n = line.rsplit(",", 3)
        assert (url, int(start)) not in windows, f"window {url} {start} fired twice"
        windows[(url, int(start))] = int(n)
    assert windows == events  # every window fired at the end of the input, and no row was late
    assert not glob.glob(str(counts_dir / ".*")) and not glob.glob(str(windows_dir / ".*"))

    written = 0
    for log in taskmanager_logs(cluster):
        with open(log) as f:
            written += len(re.findall(rf"\[job {job_id} .*blocking partition .* finished: \d+ bytes", f.read()))
    assert written > 0  # the exchanges went through blocking partitions

    dirs = working_dirs(cluster)
    assert len(dirs) >= 2
    wait_until(
        lambda: not any(glob.glob(os.path.join(d, "partitions", "**", "*.arrow"), recursive=True) for d in dirs),
        timeout=60,
        message="the JobManager to release the job's blocking partitions",
    )
