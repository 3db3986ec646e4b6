"""Local cluster launcher: `sluice cluster start|stop|status`.

Starts ZooKeeper (embedded, unless an ensemble is given), JobManagers and
TaskManagers as background processes that log to DIR/log/ and never hold
the caller's stdout/stderr, writes DIR/cluster.json (sluice/cluster_file.py),
and returns once a leader serves and every TaskManager registered with it.
Then it starts the supervisor (sluice/cli/supervisor.py), which restarts a
JobManager, TaskManager or embedded ZooKeeper that died; `cluster stop` ends
the supervisor first.
Process defaults (slots, heartbeat and session timeouts) come from
sluice/process_options.py's OPTIONS. With `--spark standalone|connect` a Spark
standalone master and worker, or a Spark Connect server, start first
(sluice/cli/spark_cluster.py) and every TaskManager gets `--spark-master` or
`--spark-remote` pointing at it; `cluster stop` ends them after the
TaskManagers.
"""

from __future__ import annotations

import difflib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from typing import Any

import psutil

from sluice import config
from sluice.cli import spark_cluster, spark_plan
from sluice.cli.supervisor import COMMAND, DATA_DIR
from sluice.cli.supervisor import LOG_NAME as SUPERVISOR_LOG
from sluice.client import JobManagerClient, SluiceError, read_cluster_json
from sluice.cluster_file import ClusterFile, ProcessEntry, read_address_file
from sluice.logs import spawn_logged, tail
from sluice.zk.auth import AUTH_FILE_NAME, write_auth_file


class ClusterError(Exception):
    pass


def _alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def running_cluster(cluster_dir: str) -> ClusterFile | None:
    try:
        info = read_cluster_json(cluster_dir)
    except SluiceError:
        return None
    return info if any(_alive(p.pid) for p in info.processes) else None


def crashed_cluster(cluster_dir: str) -> ClusterFile | None:
    """The cluster.json of a cluster in DIR whose JobManagers, TaskManagers and supervisor are all
    gone without `cluster stop` (killed, or the machine restarted); its ZooKeeper may still run.
    None if there is none, or if any of those processes still runs."""
    try:
        info = read_cluster_json(cluster_dir)
    except SluiceError:
        return None
    if any(_alive(p.pid) for p in info.processes if p.role != "zookeeper"):
        return None
    return info


def start(
    cluster_dir: str,
    jobmanagers: int = 1,
    taskmanagers: int = 2,
    slots: int = config.TASKMANAGER_SLOTS.default,
    zookeeper: str | None = None,
    cluster_id: str | None = None,
    timeout: float = 120.0,
    heartbeat_timeout: float = config.HEARTBEAT_TIMEOUT.default,
    zk_session_timeout: float = config.ZOOKEEPER_SESSION_TIMEOUT.default,
    insecure: bool = False,
    options: dict[str, str] | None = None,
    spark: str = "local",
) -> ClusterFile:
    """Start the cluster in `cluster_dir`. Secured unless `insecure`: a new CA and certificates
    in DIR/tls/ (sluice/security/tls.py), one per process (`jobmanager/jobmanager-<i>`,
    `taskmanager/taskmanager-<i>`) and a client's, recorded as cluster.json's `tls`."""
    if jobmanagers < 1 or taskmanagers < 0 or slots < 1:
        raise ClusterError("need --jobmanagers >= 1, --taskmanagers >= 0 and --slots >= 1")
    option_flags = _option_flags(options or {})
    try:
        spark_plan.check_mode(spark)
    except spark_plan.SparkPlanError as exc:
        raise ClusterError(str(exc)) from None
    if spark != "local" and {config.SPARK_MASTER.key, config.SPARK_REMOTE.key} & set(options or {}):
        raise ClusterError(
            f"--spark {spark} starts its own Spark and points the TaskManagers at it: drop "
            f"-D {config.SPARK_MASTER.key} / -D {config.SPARK_REMOTE.key}, or use --spark local to set them yourself"
        )
    cluster_dir = os.path.abspath(cluster_dir)
    crashed = crashed_cluster(cluster_dir)
    if crashed is None and running_cluster(cluster_dir):
        raise ClusterError(
            f"a cluster is already running in {cluster_dir}; stop it with `sluice cluster stop --dir {cluster_dir}`"
        )
    log_dir, run_dir = os.path.join(cluster_dir, "log"), os.path.join(cluster_dir, "run")
    for d in (cluster_dir, log_dir, run_dir):  # its user's alone: logs hold what jobs print
        os.makedirs(d, mode=0o700, exist_ok=True)
    procs: list[ProcessEntry] = []
    kept_zookeeper: ProcessEntry | None = None
    if crashed is not None:
        # Resume (docs/deployment.md, "Restarting after a crash"): the same cluster id, so the
        # new leader finds the jobs in ZooKeeper and restores them from their latest completed
        # checkpoints; the same ZooKeeper if it still runs, else the embedded one started again
        # on its data; the same CA, so clients that trust it keep working.
        cluster_id = cluster_id or crashed.cluster_id
        kept_zookeeper = next((z for z in crashed.of_role("zookeeper") if _alive(z.pid)), None)
        if zookeeper is None and kept_zookeeper is not None:
            zookeeper = crashed.zookeeper
            procs.append(kept_zookeeper)
        elif zookeeper is None and not crashed.of_role("zookeeper"):
            zookeeper = crashed.zookeeper  # an outside ZooKeeper, as given when the cluster started
        print(
            f"resuming cluster {cluster_id} in {cluster_dir} after a crash: its jobs recover from their "
            f"latest completed checkpoints (ZooKeeper {'still running' if kept_zookeeper else 'started again'})",
            file=sys.stderr,
        )
    cluster_id = cluster_id or f"cluster-{uuid.uuid4().hex[:8]}"
    started: list[subprocess.Popen[bytes]] = []
    spark_procs: list[ProcessEntry] = []
    try:
        if zookeeper is None:
            from sluice.zk.server import EmbeddedZooKeeper

            zk = EmbeddedZooKeeper(os.path.join(cluster_dir, "zookeeper"))
            zk.start(timeout=60)
            zk.detach()  # outlives this command; `cluster stop` ends it
            zookeeper = zk.connect_string
            if zk.pid is None:
                raise ClusterError(f"the embedded ZooKeeper has no process after starting; see {zk.log_path}")
            # its data directory: the supervisor starts it again there, on the same port, if it dies
            procs.append(ProcessEntry("zookeeper", zk.pid, zookeeper, str(zk.log_path), {DATA_DIR: str(zk.data_dir)}))
        # ZooKeeper digest credentials (0600, kept across restarts in the same directory): every
        # process and client authenticates with them, and the cluster's nodes are theirs alone
        # (sluice/zk/auth.py, docs/security.md)
        zk_auth_file = write_auth_file(os.path.join(cluster_dir, AUTH_FILE_NAME))
        # the named flags of `python -m jobmanager|taskmanager` (sluice/process_options.py OPTIONS)
        common = [
            config.ZOOKEEPER_AUTH_FILE.flag,
            zk_auth_file,
            config.ZOOKEEPER_QUORUM.flag,
            zookeeper,
            config.CLUSTER_ID.flag,
            cluster_id,
            config.ZOOKEEPER_SESSION_TIMEOUT.flag,
            str(zk_session_timeout),
            config.METRICS_PORT.flag,  # a free port each; cluster.json lists it as `metrics`
            "0",
        ]
        tls_dir = os.path.join(cluster_dir, "tls")
        certs = None
        if insecure:
            print(
                "warning: starting a PLAINTEXT cluster without authentication (--insecure): anyone who can "
                "reach its ports can run code on it",
                file=sys.stderr,
            )
        else:
            from sluice.security.tls import CA_FILE, create_cluster, reissue_cluster

            resume_ca = crashed is not None and os.path.exists(os.path.join(tls_dir, CA_FILE))
            certs = (reissue_cluster if resume_ca else create_cluster)(tls_dir, jobmanagers, taskmanagers)

        def security(stem: str) -> list[str]:
            if certs is None:
                return [config.SECURITY_INSECURE.flag]
            files = certs.parties[stem]
            return [
                config.SECURITY_SSL_CA.flag,
                files.ca,
                config.SECURITY_SSL_CERT.flag,
                str(files.cert),
                config.SECURITY_SSL_KEY.flag,
                str(files.key),
            ]

        # the Spark the TaskManagers run their bodies on, if not their own local[slots] one
        try:
            engine = spark_cluster.start(spark, cluster_dir, log_dir, taskmanagers * slots, taskmanagers, timeout)
        except spark_cluster.SparkStartError as exc:
            raise ClusterError(str(exc)) from None
        spark_procs = engine.processes
        spark_flags: list[str] = []
        if engine.url is not None:
            flag = config.SPARK_MASTER.flag if spark == "standalone" else config.SPARK_REMOTE.flag
            spark_flags = [flag, engine.url]
        procs += spark_cluster.public(spark_procs)
        roles = [
            (
                "jobmanager",
                i,
                [
                    config.HEARTBEAT_TIMEOUT.flag,
                    str(heartbeat_timeout),
                    config.CHECKPOINTS_DIR.flag,
                    os.path.join(cluster_dir, "checkpoints"),
                    config.REST_PORT.flag,  # the REST API and dashboard; cluster.json lists it as `rest`
                    "0",
                ],
            )
            for i in range(jobmanagers)
        ]
        roles += [
            (
                "taskmanager",
                i,
                [
                    config.TASKMANAGER_SLOTS.flag,
                    str(slots),
                    config.TASKMANAGER_RESOURCE_ID.flag,
                    f"taskmanager-{i}-{cluster_id[-8:]}",
                    *spark_flags,
                ],
            )
            for i in range(taskmanagers)
        ]
        pending = []
        commands: dict[int, list[str]] = {}
        for role, i, extra in roles:
            name = f"{role}-{i}"
            addr_file, log = os.path.join(run_dir, f"{name}.addr"), os.path.join(log_dir, f"{name}.log")
            _remove(addr_file)
            argv = [sys.executable, "-m", role, *common, *extra, *security(name), *option_flags[role]]
            command = [*argv, config.LOG_FILE.flag, log, "--address-file", addr_file]
            p = spawn_logged(command, log)
            commands[p.pid] = command  # the supervisor starts a process that died again with it
            started.append(p)
            pending.append((role, p, addr_file, log))
        deadline = time.monotonic() + timeout
        for role, p, addr_file, log in pending:
            while not os.path.exists(addr_file):
                if p.poll() is not None:
                    raise ClusterError(
                        f"{role} (pid {p.pid}) exited with {p.returncode}; its log {log} ends:\n{tail(log)}"
                    )
                if time.monotonic() > deadline:
                    raise ClusterError(f"{role} (pid {p.pid}) did not start within {timeout}s; log {log}")
                time.sleep(0.1)
            address, endpoints = read_address_file(addr_file)  # endpoints: rest, metrics
            procs.append(ProcessEntry(role, p.pid, address, log, {**endpoints, COMMAND: commands[p.pid]}))
        info = ClusterFile(
            cluster_id,
            zookeeper,
            procs,
            dir=cluster_dir,
            zookeeper_auth_file=zk_auth_file,
            tls=certs.client if certs is not None else None,
        )
        if engine.url is not None:
            info.extra["spark"] = {"mode": spark, "url": engine.url}
        info.write(cluster_dir)
        _wait_ready(info, taskmanagers, slots, deadline)
        # restarts a JobManager, TaskManager or the embedded ZooKeeper that died (sluice/cli/supervisor.py)
        supervisor_log = os.path.join(log_dir, SUPERVISOR_LOG)
        p = spawn_logged([sys.executable, "-m", "sluice.cli.supervisor", "--dir", cluster_dir], supervisor_log)
        started.append(p)
        info.processes.append(ProcessEntry("supervisor", p.pid, "", supervisor_log))
        info.write(cluster_dir)
        return info
    except BaseException:
        for p in started:
            _terminate([p.pid])
        spark_cluster.stop(spark_procs)
        if kept_zookeeper is None:  # a ZooKeeper this command started; a crashed cluster's own stays
            _terminate([z.pid for z in procs if z.role == "zookeeper"])
            _remove(ClusterFile.path(cluster_dir))
        raise


def parse_options(pairs: list[str], example: str = "task.cancellation.timeout=10s") -> dict[str, str]:
    """`-D key=value` pairs of `cluster start`, or of `sluice run` (ClusterError naming a
    malformed one; `example`: a well-formed pair for its message)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ClusterError(f"-D {pair!r}: expected KEY=VALUE, e.g. -D {example}")
        out[key.strip()] = value.strip()
    return out


# Process options `cluster start` sets itself, per process or from its own flags: a value from the
# environment or the configuration file would give every process the same port, id or file, or
# hide the command's flag, so start_options leaves it out and says so.
MANAGED_OPTIONS = frozenset(
    o.key
    for o in (
        config.ZOOKEEPER_AUTH_FILE,
        config.ZOOKEEPER_QUORUM,
        config.CLUSTER_ID,
        config.ZOOKEEPER_SESSION_TIMEOUT,
        config.HEARTBEAT_TIMEOUT,
        config.TASKMANAGER_SLOTS,
        config.TASKMANAGER_RESOURCE_ID,
        config.CHECKPOINTS_DIR,
        config.RPC_PORT,
        config.RPC_HEALTH_PORT,
        config.REST_PORT,
        config.METRICS_PORT,
        config.SECURITY_TOKEN_PORT,
        config.SECURITY_SSL_CA,
        config.SECURITY_SSL_CERT,
        config.SECURITY_SSL_KEY,
        config.SECURITY_INSECURE,
        config.LOG_FILE,
    )
)


def start_options(pairs: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The process options `cluster start` gives its processes: its `-D` pairs over the
    configuration file ($SLUICE_CONFIG) and SLUICE_* variables, read as `sluice jobmanager` and
    `sluice taskmanager` read them (docs/configuration.md); a key in MANAGED_OPTIONS from those is
    left out, with a note naming it on stderr."""
    path = environ.get(config.CONFIG_ENV) or None
    try:
        inherited = {**(config.read_file(path) if path else {}), **config.read_env(environ)}
    except config.ConfigError as exc:
        raise ClusterError(str(exc)) from None
    ignored = sorted(k for k in inherited if k in MANAGED_OPTIONS)
    if ignored:
        print(
            f"note: ignoring {', '.join(ignored)} from the environment or {config.CONFIG_ENV}: "
            "`sluice cluster start` sets these for each process itself (see its flags)",
            file=sys.stderr,
        )
    kept = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in inherited.items() if k not in ignored}
    return {**kept, **parse_options(pairs)}


def _option_flags(options: dict[str, str]) -> dict[str, list[str]]:
    """Each role's named flags for `options` (keys of sluice/process_options.py's OPTIONS), checked here:
    a key no process knows or a bad value is a ClusterError before anything starts."""
    flags: dict[str, list[str]] = {role: [] for role in config.ROLES}
    for key, value in options.items():
        option = config.BY_KEY.get(key)
        if option is None:
            close = difflib.get_close_matches(key, list(config.BY_KEY), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ClusterError(f"-D {key}: not a process option (docs/configuration.md){hint}")
        try:
            option.parse(value)
        except ValueError as exc:
            raise ClusterError(f"-D {key}={value}: {exc}") from None
        for role in option.roles:
            flags[role] += [option.flag, value]
    return flags


def _wait_ready(info: ClusterFile, taskmanagers: int, slots: int, deadline: float) -> None:
    """Until a leader serves and sees every TaskManager with all its slots: a wait on a
    condition with a deadline (each poll also checks that no process died), not a retry."""
    client = JobManagerClient(
        zookeeper=info.zookeeper,
        cluster_id=info.cluster_id,
        timeout=5,
        zookeeper_auth_file=info.zookeeper_auth_file,
        tls=info.tls,
    )
    last = "no leader yet"
    try:
        while time.monotonic() < deadline:
            for p in info.processes:
                if not _alive(p.pid):
                    raise ClusterError(
                        f"{p.role} (pid {p.pid}) died during start; its log {p.log} ends:\n{tail(p.log or '')}"
                    )
            try:
                overview = client.cluster()
                if len(overview.taskmanagers) >= taskmanagers and overview.total_slots >= taskmanagers * slots:
                    return
                last = f"{len(overview.taskmanagers)}/{taskmanagers} TaskManagers registered"
            except SluiceError as exc:
                last = str(exc)
            time.sleep(0.3)
    finally:
        client.close()
    raise ClusterError(f"cluster not ready in time: {last}")


def stop(cluster_dir: str, timeout: float = 15.0) -> list[ProcessEntry]:
    """SIGTERM TaskManagers, then Spark's processes, JobManagers and ZooKeeper; SIGKILL what remains."""
    info = read_cluster_json(cluster_dir)
    # The supervisor first, so that it restarts nothing; then cluster.json again: it may have
    # restarted a TaskManager meanwhile.
    _terminate([p.pid for p in info.of_role("supervisor")], timeout)
    info = read_cluster_json(cluster_dir)
    _terminate([p.pid for p in info.of_role("taskmanager")], timeout)
    spark_cluster.stop([p for p in info.processes if p.role in spark_cluster.ROLES], timeout)
    for role in ("jobmanager", "zookeeper"):
        _terminate([p.pid for p in info.of_role(role)], timeout)
    path = ClusterFile.path(cluster_dir)
    os.replace(path, path + ".stopped")
    return info.processes


def _terminate(pids: list[int], timeout: float = 15.0) -> None:
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.send_signal(signal.SIGTERM)
            procs.append(p)
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            for child in p.children(recursive=True):
                child.kill()
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def status(cluster_dir: str) -> dict[str, Any]:
    """The `cluster status --json` object: cluster.json's processes, each with `alive`, and the leader's view."""
    info = read_cluster_json(cluster_dir)
    rows = [{**p.to_json(), "alive": _alive(p.pid)} for p in info.processes]
    out: dict[str, Any] = {
        "cluster_id": info.cluster_id,
        "zookeeper": info.zookeeper,
        "processes": rows,
        "leader": None,
        "taskmanagers_registered": 0,
        "total_slots": 0,
        "free_slots": 0,
        "spark": info.extra.get("spark", {"mode": "local"}),
    }
    try:
        with JobManagerClient(
            zookeeper=info.zookeeper,
            cluster_id=info.cluster_id,
            timeout=5,
            zookeeper_auth_file=info.zookeeper_auth_file,
            tls=info.tls,
        ) as c:
            ov = c.cluster()
            out.update(
                leader=ov.leader,
                taskmanagers_registered=len(ov.taskmanagers),
                total_slots=ov.total_slots,
                free_slots=ov.free_slots,
            )
    except SluiceError as exc:
        out["error"] = str(exc)
    return out


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
