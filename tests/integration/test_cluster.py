"""End to end on the shared cluster (the session's ZooKeeper, 1 JobManager,
2 TaskManagers x 3 slots, real Spark), driven through the `sluice` CLI."""

from __future__ import annotations

import os
import sys
import time

import grpc
import pytest
from harness import EXAMPLES, JOBS, assert_update_stream, read_counts, sluice
from helpers import wait_until

from sluice import graph, rpc, states
from sluice.client import SluiceError
from sluice.v1 import common_pb2, dataexchange_pb2, dataexchange_pb2_grpc, taskmanager_pb2, taskmanager_pb2_grpc

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration


def wait_state(cluster, job_id, states, timeout=120):
    return wait_until(
        lambda: (s := cluster.status(job_id))["state"] in states and s,
        timeout=timeout,
        message=f"job {job_id} in {states}",
    )


def test_cluster_json_lists_every_process(cluster):
    roles = sorted(p["role"] for p in cluster.info["processes"])
    # the shared cluster runs on the session's ZooKeeper: no zookeeper entry of its own (test_ha
    # and test_cluster_restart start clusters with theirs)
    assert roles == ["jobmanager", "supervisor", "taskmanager", "taskmanager"]
    for p in cluster.info["processes"]:
        # the supervisor (sluice/cli/supervisor.py) serves nothing; a JobManager or TaskManager
        # records how to restart it (an embedded ZooKeeper its data directory, test_ha checks that)
        assert isinstance(p["pid"], int) and (":" in p["address"]) == (p["role"] != "supervisor")
        assert ("command" in p) == (p["role"] in ("jobmanager", "taskmanager"))
    assert cluster.info["zookeeper"] and cluster.info["cluster_id"]
    status = sluice("cluster", "status", "--dir", cluster.dir, "--json").stdout
    assert '"taskmanagers_registered": 2' in status


def test_page_views_exact_counts_over_two_taskmanagers(cluster, tmp_path):
    expected = generate(str(tmp_path / "in"), events=60_000, files=6, urls=2_000, seed=11)
    job_id = cluster.run(
        os.path.join(EXAMPLES, "page_views.py"),
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        parallelism=2,
    )
    status = wait_state(cluster, job_id, ("FINISHED", "FAILED", "CANCELED"))
    assert status["state"] == "FINISHED", status
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)
    # parallelism 2 spread over both TaskManagers, and status --json carries the contract fields
    tms = set(cluster.addresses("taskmanager"))
    assert {t["taskmanager"] for t in status["tasks"]} == tms
    assert {t["subtask"] for t in status["tasks"]} == {0, 1}
    assert status["leader"] in cluster.addresses("jobmanager")
    for key in ("job_id", "name", "restarts", "last_completed_checkpoint", "restored_checkpoint"):
        assert key in status
    assert all(t["state"] == "FINISHED" for t in status["tasks"])
    sink = [t for t in status["tasks"] if "sink" in t["operator"]]
    assert sum(t["records_out"] for t in sink) == len(lines)


def test_chained_bodies_keyed_sum(cluster, tmp_path):
    job_id = cluster.run(os.path.join(JOBS, "word_lengths.py"), str(tmp_path / "out"), parallelism=2)
    assert wait_state(cluster, job_id, ("FINISHED", "FAILED"))["state"] == "FINISHED"
    final, _ = read_counts(str(tmp_path / "out"))
    words = ["flink", "spark", "sluice", "flink", "kafka", "spark", "flink", "beam"] * 25
    expected: dict[str, int] = {}
    for w in words:
        if len(w) > 4:
            expected[w] = expected.get(w, 0) + len(w)
    assert final == expected


def test_failing_body_fails_job_with_traceback(cluster):
    proc = sluice("run", os.path.join(JOBS, "failing_body.py"), "--cluster-dir", cluster.dir, check=False)
    assert proc.returncode == 1
    assert "FAILED" in proc.stderr
    job = next(j for j in cluster.client().list() if j.name == "failing_body")
    status = cluster.status(job.job_id)
    assert status["state"] == "FAILED"
    assert "Traceback" in status["failure"] and "cannot parse 'x'" in status["failure"]
    human = sluice("status", job.job_id, "--cluster-dir", cluster.dir).stdout
    assert "cannot parse 'x'" in human


def test_slow_sink_holds_the_source_back(cluster, tmp_path):
    """Credit-based flow control: in-flight data stays bounded while the consumer is slow."""
    job_id = cluster.run(os.path.join(JOBS, "slow_sink.py"), str(tmp_path / "out"), "2.0", parallelism=2)
    try:

        def totals():
            s = cluster.status(job_id)
            src = sum(t["records_out"] for t in s["tasks"] if t["operator"] == "numbers")
            dst = sum(t["records_in"] for t in s["tasks"] if t["operator"] != "numbers")
            return src, dst

        wait_until(lambda: totals()[1] >= 4000, timeout=120, message="the slow sink receiving data")
        # 2 producers x 2 consumers x (2 queued + 2 credit + 1 in the sender) + 2 in process, of 1000 rows
        bound = 22 * 1000
        deadline = time.monotonic() + 8
        samples = []
        while time.monotonic() < deadline:
            src, dst = totals()
            samples.append((src, dst))
            assert src - dst <= bound, f"{src - dst} rows in flight (bound {bound}); samples {samples}"
            time.sleep(1.0)
        # Held back, the generator spends its time waiting for room downstream (Flink's grading:
        # more than 10 % of the time backpressured is no longer OK).
        wait_until(
            lambda: all(
                t["backpressure"] != "OK" for t in cluster.status(job_id)["tasks"] if t["operator"] == "numbers"
            ),
            timeout=60,
            message="the generator reported backpressured",
        )
    finally:
        sluice("cancel", job_id, "--cluster-dir", cluster.dir, check=False)
        assert wait_state(cluster, job_id, ("CANCELED", "FAILED", "FINISHED"))["state"] == "CANCELED"
    overview = wait_until(
        lambda: (o := cluster.client().cluster()).free_slots == o.total_slots and o,
        timeout=30,
        message="slots freed after cancel",
    )
    assert overview.total_slots == cluster.taskmanagers * cluster.slots


# -- bad input ----------------------------------------------------------------------------------
def _op(job, id, kind, parallelism=1, settings=None, name=""):
    config, code = graph.encode_operator(settings if settings is not None else {})
    job.operators.add(
        id=id,
        name=name or id,
        kind=states.to_proto(graph.OperatorKind(kind)),
        parallelism=parallelism,
        config=config,
        code=code,
    )


def _valid_job(tmp_path) -> common_pb2.JobGraph:
    job = common_pb2.JobGraph(name="bad", max_parallelism=128)
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "a.jsonl").write_text('{"url": "/a", "user": 1, "ts": 1}\n')
    _op(job, "src", "source_files", settings={"path": str(tmp_path / "in"), "format": "json", "suffix": ".jsonl"})
    _op(job, "map", "map", settings={"body": lambda df: df})
    _op(job, "sink", "sink_print")
    job.edges.add(source="src", target="map", partitioning=states.to_proto(graph.Partitioning.FORWARD))
    job.edges.add(source="map", target="sink", partitioning=states.to_proto(graph.Partitioning.FORWARD))
    return job


def _body_not_callable(job) -> None:
    job.operators[1].code.clear()
    job.operators[1].config = '{"body": 42}'


BAD_JOBS = {
    "cycle": (
        lambda j: j.edges.add(source="map", target="map", partitioning=states.to_proto(graph.Partitioning.FORWARD)),
        "edges",
    ),
    "unknown operator": (lambda j: setattr(j.operators[1], "kind", 999), "operators[1].kind"),
    "zero parallelism": (lambda j: setattr(j.operators[1], "parallelism", 0), "operators[1].parallelism"),
    "parallelism above max": (lambda j: setattr(j.operators[1], "parallelism", 129), "operators[1].parallelism"),
    "body not callable": (_body_not_callable, "operators[1].config.body"),
    "config is not JSON": (lambda j: setattr(j.operators[1], "config", "{garbage"), "operators[1].config"),
    "code a sink does not take": (
        lambda j: j.operators[2].code.update({"path": b"\x80\x05garbage"}),
        "operators[2].code.path",
    ),
    "missing input directory": (
        lambda j: setattr(
            j.operators[0],
            "config",
            '{"path": "/nonexistent/sluice-input", "format": "json", "suffix": ".jsonl"}',
        ),
        "operators[0].config.path",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_bad_job_rejected_with_invalid_argument(cluster, tmp_path, case):
    mutate, field = BAD_JOBS[case]
    job = _valid_job(tmp_path)
    mutate(job)
    with cluster.client() as client, pytest.raises(SluiceError) as err:
        client.submit(job)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in str(err.value)


def test_a_job_of_plain_data_operators_needs_no_python_pickles(cluster, tmp_path):
    """Files -> SQL filter -> select -> key_by + count -> files, written as a JobGraph by hand with
    JSON configs and no `code` at all: what a client in any language can submit."""
    (tmp_path / "in").mkdir()
    expected: dict[str, int] = {}
    for part in range(2):
        with open(tmp_path / "in" / f"part-{part}.jsonl", "w") as f:
            for i in range(500):
                url, ts = f"/page/{(i * 7 + part) % 13}", i
                f.write(f'{{"url": "{url}", "user": {i % 5}, "ts": {ts}}}\n')
                if ts >= 100:
                    expected[url] = expected.get(url, 0) + 1
    source, out = tmp_path / "in", tmp_path / "out"
    job = common_pb2.JobGraph(name="plain data", max_parallelism=128)
    for op_id, kind, config in [
        (
            "src",
            common_pb2.OPERATOR_KIND_SOURCE_FILES,
            f'{{"path": "{source}", "format": "json", "schema": "url string, user bigint, ts bigint", '
            '"suffix": ".jsonl"}',
        ),
        ("recent", common_pb2.OPERATOR_KIND_FILTER, '{"body": "ts >= 100"}'),
        ("pick", common_pb2.OPERATOR_KIND_SELECT, '{"columns": ["url", "ts"]}'),
        ("views", common_pb2.OPERATOR_KIND_AGGREGATE, '{"keys": ["url"], "aggs": {"views": ["count", "*"]}}'),
        ("out", common_pb2.OPERATOR_KIND_SINK_FILE, f'{{"path": "{out}", "columns": ["url", "views"]}}'),
    ]:
        job.operators.add(id=op_id, name=op_id, kind=kind, parallelism=2, config=config)
    job.operators[0].output_schema = "url string, user bigint, ts bigint"
    forward, hash_ = common_pb2.PARTITIONING_FORWARD, common_pb2.PARTITIONING_HASH
    job.edges.add(source="src", target="recent", partitioning=forward)
    job.edges.add(source="recent", target="pick", partitioning=forward)
    job.edges.add(source="pick", target="views", partitioning=hash_, keys=["url"])
    job.edges.add(source="views", target="out", partitioning=forward)
    assert not any(op.code for op in job.operators)
    with cluster.client() as client:
        job_id = client.submit(job)
        info = client.wait(job_id, timeout=180)
    assert states.from_proto(states.JobStatus, info.state) == states.JobStatus.FINISHED, info.failure
    final, lines = read_counts(str(out))
    assert final == expected
    assert_update_stream(lines)


def test_unknown_job_id_not_found(cluster):
    with cluster.client() as client:
        for call in (client.get, client.cancel):
            with pytest.raises(SluiceError) as err:
                call("no-such-job")
            assert err.value.code == grpc.StatusCode.NOT_FOUND
    proc = sluice("status", "no-such-job", "--cluster-dir", cluster.dir, check=False)
    assert proc.returncode == 1 and "no job with id" in proc.stderr


def test_cli_rejects_missing_input_before_submitting(cluster, tmp_path):
    proc = sluice(
        "run",
        os.path.join(EXAMPLES, "page_views.py"),
        "--cluster-dir",
        cluster.dir,
        "--",
        "--input",
        str(tmp_path / "missing"),
        "--output",
        str(tmp_path / "out"),
        check=False,
    )
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr and "path" in proc.stderr


def test_taskmanager_rejects_foreign_sessions_and_bad_requests(cluster):
    address = cluster.addresses("taskmanager")[0]
    # as the roles that may call these methods: a JobManager (TaskExecutor), a TaskManager (DataExchange)
    with rpc.channel(address, cluster.tls("jobmanager-0")) as ch:
        tm = taskmanager_pb2_grpc.TaskExecutorStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            tm.SubmitTask(taskmanager_pb2.TaskDeploymentDescriptor(leader_session_id="not-the-leader"), timeout=5)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as err:
            tm.CancelTask(taskmanager_pb2.CancelTaskRequest(leader_session_id=""), timeout=5)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with rpc.channel(address, cluster.tls("taskmanager-1")) as ch:
        exchange = dataexchange_pb2_grpc.DataExchangeStub(ch)
        request = dataexchange_pb2.ConsumerMessage(
            request=dataexchange_pb2.PartitionRequest(partition_id="nope", subpartition=0, initial_credit=1)
        )
        with pytest.raises(grpc.RpcError) as err:
            list(exchange.Subscribe(iter([request]), timeout=10))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_no_bad_input_crashed_a_process(cluster):
    """Runs after the bad-input tests in this module: every process is still up and serving."""
    out = sluice("cluster", "status", "--dir", cluster.dir, "--json").stdout
    import json

    status = json.loads(out)
    assert all(p["alive"] for p in status["processes"]), status
    assert status["leader"] and status["taskmanagers_registered"] == 2
