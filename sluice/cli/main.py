"""The `sluice` command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sluice import config
from sluice.cli import progress
from sluice.cli.logs import add_logs_command
from sluice.cli.processes import add_process_commands
from sluice.cli.status import NOT_LISTED, iso, print_status, styled
from sluice.cli.status import job_dict as _job_dict
from sluice.client import CONNECT_TIMEOUT, JobManagerClient, SluiceError
from sluice.security.tls import add_certs_command
from sluice.states import (
    ExecutionState,
    JobStatus,
    ReconfigurationStatus,
    from_proto,
)
from sluice.v1 import common_pb2

# Wide when piped, so ids are never cut short.
console = Console(stderr=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)  # never break messages mid-line


def cluster_dir_default() -> str:
    """Every command's default cluster directory: $SLUICE_CLUSTER_DIR, else .sluice."""
    return os.environ.get("SLUICE_CLUSTER_DIR") or ".sluice"


def _client_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("finding the leader (default: --cluster-dir $SLUICE_CLUSTER_DIR or .sluice)")
    g.add_argument(
        "--cluster-dir", default=None, help="directory holding cluster.json (default $SLUICE_CLUSTER_DIR, else .sluice)"
    )
    g.add_argument("--zookeeper", default=None, help="ZooKeeper connect string")
    g.add_argument("--cluster-id", default=None, help="cluster id in ZooKeeper (with --zookeeper)")
    g.add_argument(
        "--zk-auth-file",
        default=None,
        metavar="PATH",
        help="the cluster's ZooKeeper credentials user:password (with --zookeeper; "
        "default $SLUICE_HIGH_AVAILABILITY_ZOOKEEPER_AUTH_FILE)",
    )
    g.add_argument("--jobmanager", default=None, help="host:port[,host:port...] of JobManagers")
    t = p.add_argument_group(
        "TLS (default: cluster.json's `tls`, else $SLUICE_SECURITY_SSL_CA, ..._CERT, ..._KEY; docs/security.md)"
    )
    t.add_argument("--tls-ca", default=None, metavar="FILE", help="the cluster's CA certificate (PEM)")
    t.add_argument("--tls-cert", default=None, metavar="FILE", help="a client certificate of the cluster (PEM)")
    t.add_argument("--tls-key", default=None, metavar="FILE", help="its private key (PEM)")
    t.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="a bearer token instead of a client certificate (with --tls-ca and --jobmanager HOST:TOKEN_PORT)",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"give up when no JobManager answers within SECONDS (default {CONNECT_TIMEOUT:g}); "
        "a failover once connected is followed longer",
    )


def _context(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "cluster_dir": args.cluster_dir or cluster_dir_default(),
        "zookeeper": args.zookeeper,
        "cluster_id": args.cluster_id,
        "zk_auth_file": args.zk_auth_file,
        "jobmanager": args.jobmanager,
        "timeout": args.timeout,
        "tls_ca": args.tls_ca,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "token_file": args.token_file,
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sluice", description="Sluice: Flink-style streaming with PySpark task bodies")
    sub = ap.add_subparsers(dest="command", required=True)

    cl = sub.add_parser("cluster", help="start, stop or inspect a local cluster")
    csub = cl.add_subparsers(dest="action", required=True)
    s = csub.add_parser("start", help="start ZooKeeper, JobManagers and TaskManagers in the background")
    s.add_argument("--dir", default=cluster_dir_default(), help="default $SLUICE_CLUSTER_DIR, else .sluice")
    s.add_argument("--jobmanagers", type=int, default=1)
    s.add_argument("--taskmanagers", type=int, default=2)
    s.add_argument("--slots", type=int, default=config.TASKMANAGER_SLOTS.default, help="slots per TaskManager")
    s.add_argument("--zookeeper", default=None, help="use this ensemble instead of an embedded ZooKeeper")
    s.add_argument("--cluster-id", default=None)
    s.add_argument(
        "--heartbeat-timeout",
        type=config.arg_type(config.HEARTBEAT_TIMEOUT),
        default=config.HEARTBEAT_TIMEOUT.default,
        help="seconds (or 500ms, 2min) without heartbeat before a TaskManager is declared lost",
    )
    s.add_argument(
        "--zk-session-timeout",
        type=config.arg_type(config.ZOOKEEPER_SESSION_TIMEOUT),
        default=config.ZOOKEEPER_SESSION_TIMEOUT.default,
        help="ZooKeeper session timeout of every process: sets JobManager failover time",
    )
    s.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the cluster to be ready")
    s.add_argument(
        "-D",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a process option (docs/configuration.md) for every process it applies to, "
        "e.g. -D task.cancellation.timeout=10s; repeatable",
    )
    s.add_argument(
        "--spark",
        choices=("local", "standalone", "connect"),
        default="local",
        help="where TaskManagers run task bodies: their own local[slots] Spark (default), a Spark standalone "
        "master and worker started beside the cluster, or a Spark Connect server started beside it "
        "(docs/external-spark.md)",
    )
    s.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext gRPC without authentication: anyone reaching a port may run code on the cluster "
        "(default: mutual TLS with a CA and certificates generated in DIR/tls, recorded in cluster.json)",
    )
    for name in ("stop", "status"):
        c = csub.add_parser(name, help=f"{name} the cluster in --dir")
        c.add_argument("--dir", default=cluster_dir_default(), help="default $SLUICE_CLUSTER_DIR, else .sluice")
        if name == "status":
            c.add_argument("--json", action="store_true")

    r = sub.add_parser("run", help="run a job file (its env.execute() submits the job)")
    r.add_argument("jobfile")
    r.add_argument("--detach", "-d", action="store_true", help="print the job id on the last line and return")
    r.add_argument("--parallelism", "-p", type=int, default=None, help="default parallelism of the job's operators")
    r.add_argument(
        "--from-savepoint",
        "-s",
        default="",
        metavar="PATH",
        help="start the job from this savepoint, or retained checkpoint (<checkpoint dir>/<job id>/chk-<n>)",
    )
    r.add_argument(
        "-D",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a job option (docs/configuration.md), e.g. -D execution.checkpointing.interval=5s; "
        "repeatable; wins over the job's own env.set_config, as --parallelism does",
    )
    r.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="with --from-savepoint: drop savepoint state no operator of the job claims, instead of failing",
    )
    r.add_argument("job_args", nargs="*", help="arguments for the job, after --")
    _client_options(r)

    spt = sub.add_parser("savepoint", help="take a savepoint of a running job; prints its path on the last line")
    spt.add_argument("job_id")
    spt.add_argument("--dir", default="", help="target directory (default: the job's state.savepoints.dir)")
    _client_options(spt)

    so = sub.add_parser(
        "stop",
        help="stop a job with a savepoint: sources stop, sinks commit, the job ends FINISHED; prints the path",
    )
    so.add_argument("job_id")
    so.add_argument("--savepoint-dir", default="", help="target directory (default: the job's state.savepoints.dir)")
    _client_options(so)

    rs = sub.add_parser(
        "rescale",
        help="stop a job with a savepoint and start it again from it at another parallelism; prints the new job id",
    )
    rs.add_argument("job_id")
    rs.add_argument("--parallelism", "-p", type=int, required=True, help="the new parallelism")
    rs.add_argument("--operator", default=None, metavar="UID", help="rescale only this operator (default: all)")
    rs.add_argument("--savepoint-dir", default="", help="where the savepoint goes (default: state.savepoints.dir)")
    _client_options(rs)

    rc = sub.add_parser(
        "reconfigure",
        help="change a running job in place at one checkpoint barrier: an operator's parallelism or function",
        description="Live reconfiguration (docs/reconfiguration.md): only the operator's task and those "
        "downstream of it pause; the tasks feeding it switch their outputs at the barrier and keep running.",
    )
    rc.add_argument("job_id")
    rc.add_argument("--operator", required=True, metavar="UID", help="the operator's uid (DataStream.uid)")
    what = rc.add_mutually_exclusive_group(required=True)
    what.add_argument("--parallelism", "-p", type=int, help="its new parallelism (with the operators chained to it)")
    what.add_argument("--jobfile", help="a job file whose operator of the same uid has the new function")
    what.add_argument(
        "--rebalance-keys",
        action="store_true",
        help="move key groups of the operator's task from its busiest subtask to its idlest (skew)",
    )
    rc.add_argument("job_args", nargs="*", help="arguments for --jobfile, after --")
    _client_options(rc)

    ls = sub.add_parser("list", help="list jobs")
    ls.add_argument("--json", action="store_true")
    _client_options(ls)

    st = sub.add_parser("status", help="show a job")
    st.add_argument("job_id")
    st.add_argument("--json", action="store_true")
    _client_options(st)

    ca = sub.add_parser("cancel", help="cancel a job")
    ca.add_argument("job_id")
    _client_options(ca)

    out = sub.add_parser(
        "output",
        help="print a file sink's committed output: the update stream, or the last value per key",
        description="Print the committed rows of a file sink's output directory in commit order "
        "(file-name order; names starting with '.' or '_' are skipped), or with --final the last "
        "row of each key. Parts of any format (csv, .jsonl, .parquet, .txt; docs/file-formats.md). "
        "CSV has no header: --columns names the fields; for JSON and Parquet it picks columns by name.",
    )
    out.add_argument("path", help="the file sink's directory (or a pyarrow.fs URI)")
    out.add_argument("--final", action="store_true", help="only the last line of each key (its final value)")
    out.add_argument("--key", default=None, help="key column(s), comma-separated (default: the first column)")
    out.add_argument("--columns", default=None, help="names of the fields, comma-separated (default: _c0,_c1,...)")
    out.add_argument(
        "--format",
        choices=("csv", "json"),
        default="csv",
        help="csv: lines as written, without header; json: one object per line, typed values",
    )
    out.set_defaults(handler=cmd_output)
    from sluice.cli.sql import add_sql_command  # `sluice sql` (docs/declarative-jobs.md)

    add_sql_command(sub, _client_options, _context)
    add_logs_command(sub, cluster_dir_default())  # `sluice logs` (sluice/cli/logs.py)
    add_process_commands(sub)  # jobmanager, taskmanager, health
    add_certs_command(sub)  # certs create|issue (sluice/security/tls.py)
    return ap


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    job_args: list[str] = []
    if argv[:1] in (["run"], ["reconfigure"]) and "--" in argv:  # everything after `--` belongs to the job
        cut = argv.index("--")
        argv, job_args = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    if args.command in ("run", "reconfigure"):
        args.job_args = args.job_args + job_args
    try:
        handler = (
            getattr(args, "handler", None)
            or {
                "cluster": cmd_cluster,
                "run": cmd_run,
                "list": cmd_list,
                "status": cmd_status,
                "cancel": cmd_cancel,
                "savepoint": cmd_savepoint,
                "stop": cmd_stop,
                "rescale": cmd_rescale,
                "reconfigure": cmd_reconfigure,
            }[args.command]
        )
        code = handler(args)
    except SluiceError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code or 0)


# -- cluster ---------------------------------------------------------------------------
def cmd_cluster(args: argparse.Namespace) -> int:
    from sluice.cli import cluster

    try:
        if args.action == "start":
            with err.status("starting the cluster (ZooKeeper, JobManagers, TaskManagers with Spark)..."):
                info = cluster.start(
                    args.dir,
                    args.jobmanagers,
                    args.taskmanagers,
                    args.slots,
                    args.zookeeper,
                    args.cluster_id,
                    args.timeout,
                    args.heartbeat_timeout,
                    args.zk_session_timeout,
                    insecure=args.insecure,
                    options=cluster.start_options(args.options, os.environ),
                    spark=args.spark,
                )
            _print_processes([p.to_json() for p in info.processes])
            console.print(f"cluster {info.cluster_id} ready; wrote {info.path(info.dir or args.dir)}")
        elif args.action == "stop":
            procs = cluster.stop(args.dir)
            console.print(f"stopped {len(procs)} processes")
        else:
            out = cluster.status(args.dir)
            if args.json:
                print(json.dumps(out, indent=2))
            else:
                _print_processes(out["processes"], show_alive=True)
                console.print(
                    f"leader: {out['leader'] or out.get('error')}; TaskManagers registered: "
                    f"{out['taskmanagers_registered']}; slots free: {out['free_slots']}/{out['total_slots']}"
                )
                spark = out.get("spark") or {}
                console.print(f"spark: {spark.get('mode', 'local')}{' ' + spark['url'] if spark.get('url') else ''}")
    except cluster.ClusterError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1
    return 0


def _print_processes(procs: list[dict[str, Any]], show_alive: bool = False) -> None:
    t = Table("role", "pid", "address", "log", *(["alive"] if show_alive else []))
    for p in procs:
        t.add_row(
            p["role"],
            str(p["pid"]),
            p["address"],
            p.get("log", ""),
            *([("yes" if p["alive"] else "[red]no[/red]")] if show_alive else []),
        )
    console.print(t)


# -- jobs ----------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from sluice.api.environment import set_execution_context

    if not os.path.isfile(args.jobfile):
        raise SluiceError(f"job file {args.jobfile!r} not found")
    if args.parallelism is not None and args.parallelism < 1:
        raise SluiceError(f"--parallelism must be at least 1, got {args.parallelism}")
    job_args = args.job_args
    if args.allow_non_restored_state and not args.from_savepoint:
        raise SluiceError("--allow-non-restored-state goes with --from-savepoint PATH")
    from sluice.cli.job_file import parse_options

    set_execution_context(
        **_context(args),
        options=parse_options(args.options),
        parallelism=args.parallelism,
        detach=args.detach,
        progress=True,
        from_savepoint=args.from_savepoint,
        allow_non_restored_state=args.allow_non_restored_state,
    )
    sys.argv = [args.jobfile, *job_args]
    from sluice.cli.job_file import NothingSubmitted, explain, run_job_file
    from sluice.cli.progress import Detached, attached
    from sluice.graph import JobValidationError

    try:
        # attached: env.execute() waits through sluice/cli/progress.py (live panel or plain lines)
        with contextlib.nullcontext() if args.detach else attached():
            run_job_file(args.jobfile)  # sluice/cli/job_file.py: helpers, DDL types, execute() called
    except Detached as exc:  # Ctrl-C, then "detach": the job keeps running
        print(exc.job_id, flush=True)
        return 0
    except NothingSubmitted as exc:
        err.print(Text.assemble(("error:", "red"), f" {exc}"), highlight=False)
        return 2
    except JobValidationError as exc:
        err.print(f"[red]invalid job:[/red] {exc}", highlight=False)
        return 2
    except Exception as exc:
        message = explain(exc)
        if message is None:
            raise
        err.print(Text.assemble(("error:", "red"), f" {_job_file_line(exc, args.jobfile)}{message}"), highlight=False)
        return 2
    return 0


def _job_file_line(exc: BaseException, jobfile: str) -> str:
    """`job.py:12: ` for the job file's last line in `exc`'s traceback, or ""."""
    import traceback

    path = os.path.abspath(jobfile)
    lines = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == path]
    return f"{jobfile}:{lines[-1].lineno}: " if lines else ""


def cmd_list(args: argparse.Namespace) -> int:
    with JobManagerClient.from_context(_context(args)) as c:
        jobs = c.list()
    if args.json:
        print(json.dumps([{k: v for k, v in _job_dict(j).items() if k not in NOT_LISTED} for j in jobs], indent=2))
        return 0
    t = Table("job id", "name", "state", "submitted", "restarts")
    t.columns[0].no_wrap = True
    t.columns[0].min_width = 32
    for j in jobs:
        t.add_row(j.job_id, j.name, styled(from_proto(JobStatus, j.state)), iso(j.submitted_ms), str(j.restarts))
    console.print(t)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with JobManagerClient.from_context(_context(args)) as c:
        info = c.get(args.job_id)
        job: common_pb2.JobGraph | None = None
        if not args.json and any(progress.maybe_source(t) for t in info.tasks):
            try:  # which tasks are sources, whose rows read are their records in
                job = c.job_graph(info.job_id)
            except SluiceError:
                job = None
    print_status(console, info, job, args.json)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with JobManagerClient.from_context(_context(args)) as c:
        state = c.cancel(args.job_id)
    console.print(f"cancel requested for {args.job_id} (state {state})")
    return 0


# -- savepoints (docs/savepoints.md) --------------------------------------------------------------
RUNNING_WAIT = 120.0  # seconds the commands below wait for a job just submitted to run


def _wait_running(c: JobManagerClient, job_id: str) -> None:
    """Until the job and every task of it run: a job submitted a moment ago is still deploying.
    An ended job (or one that does not get there in time) is an error saying so."""
    deadline = time.monotonic() + RUNNING_WAIT
    while True:
        info = c.get(job_id)
        state = from_proto(JobStatus, info.state)
        if state.terminal:
            raise SluiceError(f"job {job_id} already ended {state}")
        running = state == JobStatus.RUNNING and all(
            from_proto(ExecutionState, t.state) == ExecutionState.RUNNING for t in info.tasks
        )
        if running:
            return
        if time.monotonic() > deadline:
            raise SluiceError(f"job {job_id} is {state} and not every task runs after {RUNNING_WAIT:g}s")
        time.sleep(0.2)


SAVEPOINT_WAIT = 600.0  # seconds the savepoint commands wait for the savepoint (and a stop for the job)


def cmd_savepoint(args: argparse.Namespace) -> int:
    with JobManagerClient.from_context(_context(args)) as c:
        _wait_running(c, args.job_id)
        request = c.trigger_savepoint(args.job_id, args.dir)
        err.print(f"savepoint {request} of job {args.job_id} triggered; waiting", highlight=False)
        path = c.wait_savepoint(args.job_id, request, timeout=SAVEPOINT_WAIT)
    print(path, flush=True)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    with JobManagerClient.from_context(_context(args)) as c:
        _wait_running(c, args.job_id)
        request = c.trigger_savepoint(args.job_id, args.savepoint_dir, stop=True)
        err.print(f"stopping job {args.job_id} with savepoint {request}", highlight=False)
        path = c.wait_savepoint(args.job_id, request, timeout=SAVEPOINT_WAIT)
    err.print(f"job {args.job_id} FINISHED", highlight=False)
    print(path, flush=True)
    return 0


def cmd_rescale(args: argparse.Namespace) -> int:
    """Stop with a savepoint, then submit the same job graph at the new parallelism from it."""
    from sluice.graph import rescaled

    with JobManagerClient.from_context(_context(args)) as c:
        job = c.job_graph(args.job_id)
        try:
            new_job = rescaled(job, args.parallelism, args.operator)
        except ValueError as exc:  # before anything stops
            raise SluiceError(str(exc)) from None
        _wait_running(c, args.job_id)
        request = c.trigger_savepoint(args.job_id, args.savepoint_dir, stop=True)
        err.print(f"stopping job {args.job_id} with savepoint {request}", highlight=False)
        path = c.wait_savepoint(args.job_id, request, timeout=SAVEPOINT_WAIT)
        err.print(f"savepoint {path}; starting the job at parallelism {args.parallelism}", highlight=False)
        job_id = c.submit(new_job, restore_path=path)
    print(job_id, flush=True)
    return 0


def cmd_reconfigure(args: argparse.Namespace) -> int:
    """Start a live reconfiguration and wait for its outcome; exit 1 unless it COMPLETED."""
    if args.parallelism is not None and args.parallelism < 1:
        raise SluiceError(f"--parallelism must be at least 1, got {args.parallelism}")
    new_job = _captured_job(args.jobfile, args.job_args) if args.jobfile else None
    with JobManagerClient.from_context(_context(args)) as c:
        _wait_running(c, args.job_id)
        rid = c.reconfigure(args.job_id, args.operator, args.parallelism or 0, new_job, args.rebalance_keys)
        err.print(f"reconfiguration {rid} of job {args.job_id} started; waiting", highlight=False)
        r = c.wait_reconfiguration(args.job_id, rid, timeout=SAVEPOINT_WAIT)
    status = from_proto(ReconfigurationStatus, r.status)
    if status != ReconfigurationStatus.COMPLETED:
        raise SluiceError(f"reconfiguration {rid} {status}: {r.failure}")
    err.print(
        f"redeployed {', '.join(r.redeployed)} at checkpoint {r.checkpoint_id} (paused {r.pause_ms} ms); "
        f"switched {', '.join(r.switched) or 'nothing'}",
        highlight=False,
    )
    if r.moved_key_groups:
        err.print(
            f"moved {len(r.moved_key_groups)} key groups from subtask {r.from_subtask} to subtask {r.to_subtask}",
            highlight=False,
        )
    print(f"{rid} {status}", flush=True)
    return 0


def _captured_job(jobfile: str, job_args: list[str]) -> common_pb2.JobGraph:
    """The job graph `jobfile` builds, without submitting it (its env.execute() hands it back)."""
    from sluice.api import environment
    from sluice.cli.job_file import run_job_file

    if not os.path.isfile(jobfile):
        raise SluiceError(f"job file {jobfile!r} not found")
    environment.set_execution_context(capture=None)
    argv = sys.argv
    sys.argv = [jobfile, *job_args]
    try:
        run_job_file(jobfile)
    finally:
        sys.argv = argv
    job = environment._context.get("capture")
    if not isinstance(job, common_pb2.JobGraph):
        raise SluiceError(f"{jobfile} built no job")
    return job


# -- output ----------------------------------------------------------------------------------
def cmd_output(args: argparse.Namespace) -> int:
    """`sluice output`: what sluice.output.read_output reads, as csv or JSON lines on stdout."""
    from sluice.output import read_output

    def names(value: str | None) -> list[str] | None:
        return [n.strip() for n in value.split(",")] if value is not None else None

    try:
        frame = read_output(
            args.path,
            final=args.final,
            key=names(args.key),
            columns=names(args.columns),
            dtype=str if args.format == "csv" else None,  # csv: every value's text as written
        )
    except (OSError, ValueError) as exc:
        raise SluiceError(str(exc)) from None
    try:
        if args.format == "csv":
            sys.stdout.write(frame.to_csv(header=False, index=False, lineterminator="\n"))
        else:
            for record in frame.to_dict(orient="records"):
                sys.stdout.write(json.dumps(record, default=_json_value) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `sluice output ... | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _json_value(value: Any) -> Any:
    """numpy scalars and pandas' NA as JSON values."""
    import pandas as pd

    if hasattr(value, "item"):
        return value.item()
    return None if pd.isna(value) else str(value)
