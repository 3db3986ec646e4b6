"""The CLI's view of a running job (sluice/cli/progress.py) from JobInfo protos — summary, live
panel, plain lines, backpressure levels, the watch loop with Ctrl-C — and `sluice logs`
(sluice/cli/logs.py) on log files in a temporary cluster directory. No cluster, no sockets."""

from __future__ import annotations

import argparse
import io
import json
import os

import pytest
from rich.console import Console

from sluice.cli import logs, progress
from sluice.client import SluiceError
from sluice.states import CheckpointStatus, ExecutionState, JobStatus, to_proto
from sluice.v1 import common_pb2

NOW = 1_700_000_100_000
JOB = "0123456789abcdef0123456789abcdef"


def job_info(state: JobStatus = JobStatus.RUNNING, **kw) -> common_pb2.JobInfo:
    info = common_pb2.JobInfo(job_id=JOB, name="page_views", state=to_proto(state), **kw)
    return info


def add_task(info, operator, subtask=0, rin=0.0, rout=0.0, bp=0.0, busy=0.0, records_in=0, records_out=0, **kw):
    t = info.tasks.add(operator=operator, subtask=subtask, state=to_proto(ExecutionState.RUNNING), **kw)
    t.counters.records_in, t.counters.records_out = records_in, records_out
    t.io.records_in_per_second, t.io.records_out_per_second = rin, rout
    t.io.backpressured_ms_per_second, t.io.busy_ms_per_second = bp, busy
    return t


def add_checkpoint(info, cid, status=CheckpointStatus.COMPLETED, trigger_ms=NOW - 5_000, duration=250, size=2048, **kw):
    info.checkpoints.add(
        checkpoint_id=cid, status=to_proto(status), trigger_ms=trigger_ms, duration_ms=duration, size_bytes=size, **kw
    )


# -- pure formatting -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ms", "level"),
    [(0, "OK"), (100, "OK"), (100.5, "LOW"), (500, "LOW"), (500.1, "HIGH"), (1000, "HIGH")],
)
def test_backpressure_levels_are_flinks(ms, level):
    assert progress.backpressure_level(ms) == level


def test_summary_sums_rates_and_finds_the_worst_backpressure():
    info = job_info(restarts=2)
    add_task(info, "page views", 0, rin=1000, rout=1000, bp=50)
    add_task(info, "page views", 1, rin=1500.5, rout=1500, bp=640)
    add_task(info, "aggregate by url -> counts sink", 0, rin=300, rout=300, bp=5)
    add_checkpoint(info, 3)
    add_checkpoint(info, 4, CheckpointStatus.FAILED, failure="declined")
    add_checkpoint(info, 5, CheckpointStatus.IN_PROGRESS, trigger_ms=NOW - 100, duration=0)
    s = progress.summarize(info, NOW)
    assert s.records_in_per_second == 2800.5 and s.records_out_per_second == 2800
    assert (s.backpressure, s.backpressure_ms_per_second, s.backpressure_task) == ("HIGH", 640, "page views (2)")
    assert s.checkpoint == progress.LastCheckpoint(3, 4.75, 250, 2048)  # completed 4.75 s before NOW
    assert (s.completed_checkpoints, s.failed_checkpoints, s.restarts) == (1, 1, 2)
    assert s.restored is None
    assert progress.checkpoint_text(s.checkpoint) == "3, 4s ago, took 250 ms, 2 KiB"
    assert progress.rates_text(s) == "2,800 records/s in, 2,800 out"


def test_summary_reads_the_job_metrics_when_the_history_lacks_the_checkpoint():
    info = job_info(last_completed_checkpoint=9, restored_checkpoint=7)
    info.metrics.last_checkpoint_duration_ms, info.metrics.last_checkpoint_size_bytes = 30, 3 * 1024 * 1024
    info.metrics.num_restarts, info.metrics.number_of_completed_checkpoints = 1, 9
    s = progress.summarize(info, NOW)
    assert s.checkpoint == progress.LastCheckpoint(9, None, 30, 3 * 1024 * 1024)
    assert progress.checkpoint_text(s.checkpoint) == "9, took 30 ms, 3 MiB"
    assert (s.restarts, s.completed_checkpoints, s.backpressure, s.backpressure_task) == (1, 9, "OK", "")
    assert s.restored == "restored from checkpoint 7"
    assert progress.checkpoint_text(None) == "none yet"


def test_restored_text_never_says_none():
    assert progress.restored_text(job_info()) is None  # a fresh start: nothing to say
    assert progress.restored_text(job_info(restored_checkpoint=0)) == "restored from checkpoint 0"
    assert progress.restored_text(job_info(restored_savepoint="/sp/a")) == "started from savepoint /sp/a"


def test_the_live_panel_shows_state_rates_checkpoint_restarts_and_backpressure():
    info = job_info(restarts=1, message="waiting for slots")
    add_task(info, "src", rin=12345, rout=12000, bp=200)
    add_checkpoint(info, 8, duration=40, size=5 * 1024)
    console = Console(record=True, width=120, color_system=None)
    console.print(progress.render(progress.summarize(info, NOW), "Ctrl-C: cancel the job or detach"))
    text = console.export_text()
    assert f"page_views {JOB}  RUNNING" in text
    assert "records/s     12,345 records/s in, 12,000 out" in text
    assert "checkpoint    8, 4s ago, took 40 ms, 5 KiB" in text
    assert "restarts      1" in text and "waiting for slots" in text
    assert "backpressure  LOW (worst 200 ms/s: src (1))" in text
    assert "Ctrl-C: cancel the job or detach" in text


def test_plain_lines_say_each_state_exception_and_checkpoint_once():
    lines = progress.ProgressLines()
    info = job_info()
    assert lines.lines(info, NOW) == ["RUNNING"]
    assert lines.lines(info, NOW) == []  # nothing changed
    add_task(info, "src", rin=10, rout=4, bp=0)
    add_checkpoint(info, 1, duration=12, size=100)
    add_checkpoint(info, 2, CheckpointStatus.IN_PROGRESS)
    assert lines.lines(info, NOW) == [
        "checkpoint 1 completed in 12 ms, 100 B; 10 records/s in, 4.0 out; backpressure OK"
    ]
    info.checkpoints[1].status = to_proto(CheckpointStatus.FAILED)
    info.checkpoints[1].failure = "declined"
    info.exceptions.add(time_ms=NOW, attempt=0, task="src (1/1)", cause="ValueError: bad", restarted=True)
    info.state, info.message = to_proto(JobStatus.RESTARTING), "restarting after: ValueError: bad"
    assert lines.lines(info, NOW) == [
        "attempt 0 failed in task src (1/1): ValueError: bad (restarting)",
        "checkpoint 2 FAILED: declined; 10 records/s in, 4.0 out; backpressure OK",
        "RESTARTING — restarting after: ValueError: bad",
    ]
    info.state, info.message = to_proto(JobStatus.FINISHED), ""
    assert lines.lines(info, NOW) == ["FINISHED"]


def test_status_cells_and_a_sources_records_in():
    info = job_info()
    src = add_task(info, "page views", rin=900.4, rout=880, bp=120, busy=310, records_out=5000, chain_id="page-views")
    chained = add_task(info, "gen -> map", records_out=7)
    sink = add_task(info, "counts sink", records_in=40, records_out=40)
    assert progress.task_io_cells(src) == ["900", "880", "310", "120", "[yellow]LOW[/yellow]"]
    graph = common_pb2.JobGraph()
    graph.operators.add(id="page-views", name="page views", kind=common_pb2.OPERATOR_KIND_SOURCE_FILES)
    graph.operators.add(id="gen", name="gen", kind=common_pb2.OPERATOR_KIND_SOURCE_GENERATOR)
    graph.operators.add(id="counts-sink", name="counts sink", kind=common_pb2.OPERATOR_KIND_SINK_FILE)
    sources = progress.source_chains(graph)
    assert progress.records_in_shown(src, sources) == 5000  # a TaskManager that counted 0: its rows read
    assert progress.records_in_shown(chained, sources) == 0  # a chain's output is not what its source read
    assert progress.records_in_shown(sink, sources) == 40
    src.chain_id = ""  # a JobManager that does not say the chain: by name
    assert progress.records_in_shown(src, sources) == 5000
    assert progress.records_in_shown(src, progress.source_chains(None)) == 0
    src.counters.records_in = 5100  # counted by the TaskManager: as it is
    assert progress.records_in_shown(src, sources) == 5100


def test_status_json_gives_io_per_task_and_metrics_per_job():
    from sluice.cli.main import _job_dict

    info = job_info()
    add_task(info, "src", rin=2.5, bp=700, chain_id="src", attempt=3)
    info.metrics.number_of_completed_checkpoints, info.metrics.uptime_ms = 4, 60_000
    d = json.loads(json.dumps(_job_dict(info)))
    [task] = d["tasks"]
    assert task["io"]["records_in_per_second"] == 2.5 and task["io"]["backpressured_ms_per_second"] == 700
    assert set(task["io"]) == {f.name for f in common_pb2.TaskIOMetrics.DESCRIPTOR.fields}
    assert (task["chain_id"], task["attempt"], task["backpressure"]) == ("src", 3, "HIGH")
    assert d["metrics"]["number_of_completed_checkpoints"] == 4 and d["metrics"]["uptime_ms"] == 60_000
    assert list(d)[-1] == "metrics"  # added after every key of the first contract


# -- the watch loop -----------------------------------------------------------------------------------
class FakeClient:
    """GetJob answers in order (the last one repeats); KeyboardInterrupt where the list says so."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.cancelled: list[str] = []
        self.on_leader_change = self.on_unavailable = None

    def get(self, job_id):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer is KeyboardInterrupt:
            raise KeyboardInterrupt
        return answer

    def cancel(self, job_id):
        self.cancelled.append(job_id)
        self.answers = [job_info(message="cancelling"), job_info(JobStatus.CANCELED)]
        return "RUNNING"


class Stdin(io.StringIO):
    def __init__(self, text: str, tty: bool):
        super().__init__(text)
        self.tty = tty

    def isatty(self):
        return self.tty


def watch(client, stdin=None):
    out = io.StringIO()
    console = Console(file=out, width=300, color_system=None)
    try:
        return progress.watch(client, JOB, poll=0, console=console, animate=False, stdin=stdin), out.getvalue()
    except progress.Detached as exc:
        return exc, out.getvalue()


def test_watch_without_a_terminal_prints_plain_lines_until_the_end():
    running = job_info()
    add_checkpoint(running, 1, duration=10, size=10)
    info, out = watch(FakeClient([job_info(), running, job_info(JobStatus.FINISHED)]))
    assert progress.from_proto(JobStatus, info.state) == JobStatus.FINISHED
    assert out.splitlines() == [
        f"  {JOB}: RUNNING",
        f"  {JOB}: checkpoint 1 completed in 10 ms, 10 B; 0 records/s in, 0 out; backpressure OK",
        f"  {JOB}: FINISHED",
    ]


def test_ctrl_c_without_a_terminal_detaches():
    client = FakeClient([job_info(), KeyboardInterrupt, job_info()])
    result, out = watch(client, Stdin("", tty=False))
    assert isinstance(result, progress.Detached) and result.job_id == JOB
    assert "interrupted without a terminal to ask: detaching" in out
    assert f"keeps running; watch it with `sluice status {JOB}`" in out and client.cancelled == []


@pytest.mark.parametrize(("answer", "cancels"), [("c\n", True), ("\n", False), ("d\n", False), ("", False)])
def test_ctrl_c_on_a_terminal_asks_cancel_or_detach(answer, cancels):
    client = FakeClient([job_info(), KeyboardInterrupt, job_info()])
    result, out = watch(client, Stdin(answer, tty=True))
    assert f"cancel the job {JOB} or detach? [c/D]" in out
    if cancels:
        assert client.cancelled == [JOB] and progress.from_proto(JobStatus, result.state) == JobStatus.CANCELED
        assert f"{JOB}: cancel requested (state RUNNING); waiting for CANCELED" in out
        assert out.rstrip().endswith(f"{JOB}: CANCELED")
    else:
        assert isinstance(result, progress.Detached) and client.cancelled == []


def test_watch_gives_up_after_its_timeout():
    with pytest.raises(SluiceError, match="still RUNNING after 0"):
        progress.watch(FakeClient([job_info()]), JOB, timeout=0, poll=0, console=Console(file=io.StringIO()))  # type: ignore[arg-type]  # a fake client: get only


def test_attached_sets_the_watcher_of_the_execution_context_for_its_duration():
    from sluice.api import environment

    def watcher(client, job_id, timeout=None):
        return "watched"

    with progress.attached(watcher):
        assert environment._context["watcher"] is watcher  # env.execute() waits through it
    assert "watcher" not in environment._context


# -- sluice logs ---------------------------------------------------------------------------------------
JM_LOG = f"""2026-11-26 02:50:01,722 INFO  jobmanager sluice.jobmanager [t] [job {JOB}] submitted 'page_views'
2026-11-26 02:50:01,730 INFO  jobmanager sluice.jobmanager [t] [job ffff0000ffff0000ffff0000ffff0000] submitted 'other'
2026-11-26 02:50:03,118 INFO  jobmanager sluice.jobmanager.job [t] [job {JOB} attempt 0] checkpoint 1 completed
"""
TM_LOG = f"""WARNING: Using incubator modules: jdk.incubator.vector
26/11/26 02:49:35 WARN Utils: Your hostname resolves to a loopback address
2026-11-26 02:50:02,433 INFO  taskmanager sluice.taskmanager.task [t] [job {JOB} attempt 0] source batch
[Stage 6:>      (0 + 1) / 1]\r            \r2026-11-26 02:50:02,900 ERROR taskmanager [t] [job {JOB} attempt 0] failed
Traceback (most recent call last):
  File "task.py", line 1, in run
ValueError: bad
2026-11-26 02:50:03,121 INFO  taskmanager sluice.taskmanager.sink [t] committed part-000000000001-00000-{JOB[:8]}-44.csv
2026-11-26 02:50:04,000 INFO  taskmanager sluice.taskmanager.task [t] [job ffff0000ffff0000ffff0000ffff0000] other job
"""


@pytest.fixture
def cluster_dir(tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    (log / "jobmanager-0.log").write_text(JM_LOG)
    (log / "taskmanager-0.log").write_text(TM_LOG)
    (log / "taskmanager-1.log").write_text("2026-11-26 02:49:00,000 INFO  taskmanager started\n")
    processes = [
        {"role": "zookeeper", "pid": 1, "address": "127.0.0.1:2181", "log": str(tmp_path / "zk.log")},
        {"role": "jobmanager", "pid": 2, "address": "127.0.0.1:6123", "log": str(log / "jobmanager-0.log")},
        {
            "role": "taskmanager",
            "pid": 3,
            "address": "127.0.0.1:7001",
            "log": str(log / "taskmanager-0.log"),
            "command": ["python", "-m", "taskmanager", "--resource-id", "taskmanager-0-abcd"],
        },
        {"role": "taskmanager", "pid": 4, "address": "127.0.0.1:7002", "log": str(log / "taskmanager-1.log")},
    ]
    (tmp_path / "cluster.json").write_text(json.dumps({"cluster_id": "c", "zookeeper": "z", "processes": processes}))
    return tmp_path


def run_logs(cluster_dir, target, lines=None, follow=False):
    return logs.cmd_logs(argparse.Namespace(dir=str(cluster_dir), target=target, lines=lines, follow=follow))


def test_records_keep_tracebacks_with_their_line_and_drop_progress_bars():
    recs = logs.records(TM_LOG)
    assert [r.time for r in recs] == [
        "",
        "2026-11-26 02:49:35,000",
        "2026-11-26 02:50:02,433",
        "2026-11-26 02:50:02,900",
        "2026-11-26 02:50:03,121",
        "2026-11-26 02:50:04,000",
    ]
    failed = recs[3]
    assert failed.lines[0].startswith("2026-11-26 02:50:02,900 ERROR") and failed.lines[-1] == "ValueError: bad"
    assert len(failed.lines) == 4
    match = logs.matches_job(JOB)
    assert [match(r) for r in recs] == [False, False, True, True, True, False]  # the tag in a file name too


def test_logs_of_a_job_merge_every_process_in_time_order(cluster_dir, capsys):
    assert run_logs(cluster_dir, JOB[:8]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0].strip() for line in out] == ["jobmanager-0"] + ["taskmanager-0"] * 5 + [
        "jobmanager-0",
        "taskmanager-0",
    ]
    assert out[0].endswith("submitted 'page_views'") and out[-1].endswith(f"-{JOB[:8]}-44.csv")
    assert "checkpoint 1 completed" in out[-2] and "ValueError: bad" in out[5]
    assert not any("other" in line or "WARN Utils" in line for line in out)
    assert run_logs(cluster_dir, JOB, lines=2) == 0  # the last records only (a record keeps its traceback)
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_logs_of_a_taskmanager_by_any_of_its_names(cluster_dir, capsys):
    for name in ("taskmanager-0", "taskmanager-0-abcd", "127.0.0.1:7001"):
        assert run_logs(cluster_dir, name, lines=1) == 0
        assert capsys.readouterr().out.splitlines() == [
            "taskmanager-0 | 2026-11-26 02:50:04,000 INFO  taskmanager sluice.taskmanager.task [t] "
            "[job ffff0000ffff0000ffff0000ffff0000] other job"
        ]
    assert run_logs(cluster_dir, "127.0.0.1:7002") == 0
    assert "taskmanager started" in capsys.readouterr().out


def test_logs_refuse_what_they_cannot_tell(cluster_dir, tmp_path):
    with pytest.raises(SluiceError) as err:
        run_logs(cluster_dir, "tm-9")
    assert "TaskManagers: taskmanager-0 (127.0.0.1:7001, taskmanager-0-abcd); taskmanager-1 (127.0.0.1:7002)" in str(
        err.value
    )
    with pytest.raises(SluiceError, match="no job with an id starting with '01234567aa'"):
        run_logs(cluster_dir, "01234567aa")
    with pytest.raises(SluiceError, match="several jobs"):
        logs.resolve_job("ab12cd34", {"ab12cd34" + "0" * 24, "ab12cd34" + "1" * 24})
    with pytest.raises(SluiceError, match="give its --dir"):
        run_logs(tmp_path / "nowhere", JOB)


def test_logs_read_a_bounded_tail_and_follow_new_lines(tmp_path, capsys):
    path = tmp_path / "a.log"
    path.write_text("".join(f"2026-11-26 02:50:{i:02d},000 INFO line {i}\n" for i in range(50)))
    text, end = logs.read_tail(str(path), max_bytes=100)
    assert end == os.path.getsize(path) and len(text) <= 100
    assert text.startswith("2026-11-26 02:50:") and text.endswith("line 49\n")  # from a whole line
    src = logs.LogSource("taskmanager-0", str(path))
    offsets = {str(path): end}
    with open(path, "a") as f:
        f.write("2026-11-26 02:51:00,000 INFO line 50\n2026-11-26 02:51:01,000 INFO half")
    logs.follow([src], offsets, keep=None, polls=1)
    assert capsys.readouterr().out == "taskmanager-0 | 2026-11-26 02:51:00,000 INFO line 50\n"
    with open(path, "a") as f:
        f.write(" a line\n")
    logs.follow([src], offsets, keep=None, polls=1)  # a line is printed once whole
    assert capsys.readouterr().out == "taskmanager-0 | 2026-11-26 02:51:01,000 INFO half a line\n"
    path.write_text("2026-11-26 03:00:00,000 INFO after a restart\n")  # shorter: read from its start
    logs.follow([src], offsets, keep=None, polls=1)
    assert capsys.readouterr().out == "taskmanager-0 | 2026-11-26 03:00:00,000 INFO after a restart\n"
