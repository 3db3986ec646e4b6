"""Jobs without Python on the shared secured cluster: the page_views
job as a DeclarativeJob in JSON submitted with grpcurl (mutual TLS from cluster.json, gRPC
reflection), the same job from `sluice sql`, both with the input's exact counts per url; a
`sluice sql` job over a directory of Parquet files (schema from the footer, on the client) into
a Parquet sink and one into a text sink, their output read back exactly, and one whose second
file differs from the schema failing, naming that file; and a query naming an unknown column
refused at submit, naming the column, with no job created."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest
from harness import EXAMPLES, JOBS, REPO, assert_update_stream, read_counts, sluice
from helpers import wait_until

from sluice.output import read_output
from sluice.states import JobStatus, from_proto

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration

GRPCURL = os.path.join(os.path.dirname(sys.executable), "grpcurl")
JOB_JSON = os.path.join(JOBS, "page_views_declarative.json")
QUERY = "SELECT url, COUNT(*) AS count FROM events GROUP BY url"


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> tuple[str, collections.Counter]:
    """A directory of page_views events (jsonl) and the count per url in it."""
    directory = str(tmp_path_factory.mktemp("events") / "in")
    counts = generate(directory, events=20_000, files=4, urls=300, seed=11)
    return directory, collections.Counter(counts)


def grpcurl(cluster, method: str, body: str) -> subprocess.CompletedProcess:
    """`grpcurl -d @ JOBMANAGER sluice.v1.JobManager/<method>` with `body` on stdin, authenticated
    with the client certificate of cluster.json's `tls` (the service described by reflection)."""
    tls = cluster.info["tls"]
    address = cluster.addresses("jobmanager")[0]
    command = [GRPCURL, "-cacert", tls["ca"], "-cert", tls["cert"], "-key", tls["key"]]
    command += ["-max-time", "60", "-d", "@", address, f"sluice.v1.JobManager/{method}"]
    return subprocess.run(command, input=body, capture_output=True, text=True, timeout=90, cwd=REPO)


def wait_finished(cluster, job_id: str, timeout: float = 180) -> None:
    with cluster.client() as client:

        def ended():
            state = from_proto(JobStatus, client.get(job_id).state)
            return state if state.terminal else None

        state = wait_until(ended, timeout=timeout, message=f"job {job_id} to end", interval=0.2)
    assert state == JobStatus.FINISHED, cluster.status(job_id)


def job_names(cluster) -> list[str]:
    with cluster.client() as client:
        return [j.job_id for j in client.list()]


def test_grpcurl_submits_the_page_views_job_as_json(cluster, events, tmp_path):
    inputs, expected = events
    out = tmp_path / "out"
    with open(JOB_JSON, encoding="utf-8") as f:
        body = f.read().replace("@INPUT@", inputs).replace("@OUTPUT@", str(out))
    job_file = tmp_path / "job.json"
    job_file.write_text(body, encoding="utf-8")

    proc = grpcurl(cluster, "SubmitJob", job_file.read_text(encoding="utf-8"))
    assert proc.returncode == 0, proc.stderr
    reply = json.loads(proc.stdout)
    job_id = reply.get("job_id") or reply["jobId"]  # grpcurl prints proto field names; JSON mapping allows both
    wait_finished(cluster, job_id)

    final, lines = read_counts(str(out))
    assert final == dict(expected)
    assert_update_stream(lines)
    # the graph is the one the Python API builds: a source, a keyed count, a file sink
    with cluster.client() as client:
        graph = client.job_graph(job_id)
    assert [op.name for op in graph.operators] == ["files in", "aggregate by url", "file sink"]


def test_sluice_sql_gives_the_same_counts(cluster, events, tmp_path):
    inputs, expected = events
    out = tmp_path / "out"
    # no --schema: inferred from a sample of the files, as `sluice run` does for from_files
    proc = sluice(
        "sql", QUERY, "--source", f"json:{inputs}", "--sink", f"csv:{out}", "-p", "2", "--cluster-dir", cluster.dir
    )
    assert "FINISHED" in proc.stderr, proc.stderr
    final, lines = read_counts(str(out))
    assert final == dict(expected)
    assert_update_stream(lines)


def test_an_unknown_column_is_refused_at_submit_naming_it(cluster, events, tmp_path):
    inputs, _expected = events
    before = job_names(cluster)
    proc = sluice(
        "sql",
        "SELECT url, COUNT(*) AS count FROM events WHERE urll LIKE '/a%' GROUP BY url",
        "--source",
        f"json:{inputs}",
        "--schema",
        "url string, user bigint, ts bigint",
        "--sink",
        f"csv:{tmp_path / 'out'}",
        "--cluster-dir",
        cluster.dir,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "declarative.steps[0].filter.condition" in proc.stderr and "unknown column 'urll'" in proc.stderr

    # the same over grpcurl, and a request with neither a job graph nor a declarative job
    with open(JOB_JSON, encoding="utf-8") as f:
        request = json.loads(f.read().replace("@INPUT@", inputs).replace("@OUTPUT@", str(tmp_path / "out")))
    request["declarative"]["steps"][0]["key_by"]["keys"] = ["page"]
    proc = grpcurl(cluster, "SubmitJob", json.dumps(request))
    assert proc.returncode != 0
    assert "InvalidArgument" in proc.stderr and "unknown column 'page'" in proc.stderr, proc.stderr
    proc = grpcurl(cluster, "SubmitJob", "{}")
    assert "InvalidArgument" in proc.stderr and "exactly one of job" in proc.stderr, proc.stderr
    assert job_names(cluster) == before


@pytest.fixture(scope="module")
def parquet_events(tmp_path_factory) -> tuple[str, list[dict]]:
    """A directory of three Parquet files of events (url, user, bytes) and their rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = tmp_path_factory.mktemp("parquet") / "in"
    directory.mkdir()
    rows = [{"url": f"/page/{(i * 7) % 40}", "user": i % 11, "bytes": (i * 37) % 1000} for i in range(6000)]
    for n in range(3):
        part = rows[n * 2000 : (n + 1) * 2000]
        table = pa.table({k: [r[k] for r in part] for k in ("url", "user", "bytes")})
        pq.write_table(table, directory / f"events-{n}.parquet", row_group_size=500)
    (directory / "notes.txt").write_text("not read: no .parquet suffix\n")
    return str(directory), rows


def test_sluice_sql_reads_parquet_into_a_parquet_sink(cluster, parquet_events, tmp_path):
    inputs, rows = parquet_events
    out = tmp_path / "out"
    query = "SELECT url, COUNT(*) AS views, SUM(bytes) AS total FROM events WHERE user % 3 <> 0 GROUP BY url"
    # no --schema: the client takes the first file's footer, and every task checks each file's
    proc = sluice(
        "sql",
        query,
        "--source",
        f"parquet:{inputs}",
        "--sink",
        f"parquet:{out}",
        "-p",
        "2",
        "--cluster-dir",
        cluster.dir,
    )
    assert "FINISHED" in proc.stderr, proc.stderr

    expected: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        if r["user"] % 3 != 0:
            expected[r["url"]][0] += 1
            expected[r["url"]][1] += r["bytes"]
    assert os.listdir(out) and all(n.endswith(".parquet") for n in os.listdir(out) if not n.startswith("."))
    final = read_output(str(out), final=True, key="url")
    assert list(final.columns) == ["url", "views", "total"]
    assert {r.url: [r.views, r.total] for r in final.itertuples()} == dict(expected)
    updates = read_output(str(out))  # the update stream: each (url, views) once, views growing per url
    assert_update_stream(list(zip(updates["url"], updates["views"], strict=True)))
    for _url, views in updates.groupby("url", sort=False)["views"]:
        assert views.is_monotonic_increasing

    shown = sluice("output", str(out), "--final", "--format", "json")  # the CLI reads Parquet parts too
    printed = {d["url"]: [d["views"], d["total"]] for d in map(json.loads, shown.stdout.splitlines())}
    assert printed == dict(expected)


def test_sluice_sql_writes_one_column_of_parquet_rows_to_a_text_sink(cluster, parquet_events, tmp_path):
    inputs, rows = parquet_events
    out = tmp_path / "out"
    proc = sluice(
        "sql",
        "SELECT upper(url) AS page FROM events WHERE bytes >= 990",
        "--source",
        f"parquet:{inputs}",
        "--schema",
        "url string, bytes bigint",  # a subset of the files' columns, checked against each footer
        "--sink",
        f"text:{out}",
        "--cluster-dir",
        cluster.dir,
    )
    assert "FINISHED" in proc.stderr, proc.stderr
    written = read_output(str(out), columns=["page"])
    assert sorted(written["page"]) == sorted(r["url"].upper() for r in rows if r["bytes"] >= 990)
    assert all(n.endswith(".txt") for n in os.listdir(out) if not n.startswith("."))


def test_a_parquet_file_unlike_the_schema_fails_the_job_naming_it(cluster, tmp_path):
    """The submit-time check sees the first file only; the source checks every file's footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    inputs = tmp_path / "in"
    inputs.mkdir()
    pq.write_table(pa.table({"url": ["/a", "/b"], "bytes": [1, 2]}), inputs / "a.parquet")
    pq.write_table(pa.table({"url": ["/c"], "bytes": pa.array([3], pa.int32())}), inputs / "b.parquet")
    proc = sluice(
        "sql",
        "SELECT url, SUM(bytes) AS total FROM events GROUP BY url",
        "--source",
        f"parquet:{inputs}",
        "--sink",
        f"json:{tmp_path / 'out'}",
        "--detach",
        "--cluster-dir",
        cluster.dir,
    )
    job_id = proc.stdout.strip().splitlines()[-1]
    with cluster.client() as client:

        def ended():
            info = client.get(job_id)
            return info if from_proto(JobStatus, info.state).terminal else None

        info = wait_until(ended, timeout=180, message=f"job {job_id} to end", interval=0.2)
    assert from_proto(JobStatus, info.state) == JobStatus.FAILED, cluster.status(job_id)
    assert "b.parquet" in info.failure and "'bytes' is int in the file" in info.failure, info.failure
