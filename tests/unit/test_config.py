"""sluice.config: defaults < file < environment < flags, and clear errors."""

from __future__ import annotations

import argparse
import json

import pytest

from sluice import config
from sluice.cli import processes
from sluice.config import ConfigError, env_name, load, read_env, read_file, resolve

ZK = {"zookeeper.quorum": "zk:2181"}


def write(tmp_path, text: str, name: str = "sluice.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- names ---------------------------------------------------------------------------------
def test_env_names_follow_the_rule():
    assert env_name("zookeeper.quorum") == "SLUICE_ZOOKEEPER_QUORUM"
    assert env_name("rpc.advertised-host") == "SLUICE_RPC_ADVERTISED_HOST"
    assert env_name("state.checkpoints.dir") == "SLUICE_STATE_CHECKPOINTS_DIR"
    assert env_name("zookeeper.session-timeout") == "SLUICE_ZOOKEEPER_SESSION_TIMEOUT"
    names = [o.env for o in config.OPTIONS]
    assert len(set(names)) == len(names)
    assert not set(names) & config.NON_CONFIG_ENV


def test_every_key_of_the_brief_exists():
    for key in (
        "zookeeper.quorum",
        "cluster.id",
        "rpc.host",
        "rpc.port",
        "rpc.advertised-host",
        "taskmanager.slots",
        "heartbeat.timeout",
        "zookeeper.session-timeout",
        "state.checkpoints.dir",
        "spark.master",
        "spark.remote",
        "log.file",
    ):
        assert key in config.BY_KEY


# -- precedence ----------------------------------------------------------------------------
def test_defaults_match_the_process_mains():
    s = resolve("jobmanager", ZK)
    assert s["cluster.id"] == "default" and s["rpc.host"] == "127.0.0.1" and s["rpc.port"] == 0
    assert s["heartbeat.timeout"] == 6.0 and s["zookeeper.session-timeout"] == 6.0
    assert s.sources["rpc.port"] == "default"
    t = resolve("taskmanager", ZK)
    assert t["taskmanager.slots"] == 2 and t["heartbeat.interval"] == 1.0


def test_file_then_env_then_flags(tmp_path):
    path = write(tmp_path, "zookeeper.quorum: file:2181\nrpc.port: 1111\ncluster.id: from-file\nheartbeat.timeout: 9\n")
    env = {"SLUICE_RPC_PORT": "2222", "SLUICE_CLUSTER_ID": "from-env", "HOME": "/x", "PATH": "/bin"}
    s = load("jobmanager", config_path=path, environ=env, flags={"rpc.port": "3333"})
    assert s["zookeeper.quorum"] == "file:2181" and s.sources["zookeeper.quorum"] == f"file {path}"
    assert s["heartbeat.timeout"] == 9.0
    assert s["cluster.id"] == "from-env" and s.sources["cluster.id"] == "env SLUICE_CLUSTER_ID"
    assert s["rpc.port"] == 3333 and s.sources["rpc.port"] == "flag --port"


def test_config_path_from_environment(tmp_path):
    path = write(tmp_path, "zookeeper.quorum: a:1\n")
    s = load("taskmanager", environ={"SLUICE_CONFIG": path})
    assert s["zookeeper.quorum"] == "a:1" and s.config_file == path
    # --config wins over SLUICE_CONFIG
    other = write(tmp_path, "zookeeper.quorum: b:2\n", "other.yaml")
    assert load("taskmanager", config_path=other, environ={"SLUICE_CONFIG": path})["zookeeper.quorum"] == "b:2"


def test_nested_yaml_is_flattened(tmp_path):
    path = write(tmp_path, "zookeeper:\n  quorum: zk:2181\n  session-timeout: 12\nrpc:\n  port: 6123\n")
    s = load("jobmanager", config_path=path, environ={})
    assert s["zookeeper.session-timeout"] == 12.0 and s["rpc.port"] == 6123


def test_empty_env_variable_counts_as_unset(tmp_path):
    path = write(tmp_path, "zookeeper.quorum: zk:2181\nspark.master: spark://m:7077\n")
    s = load("taskmanager", config_path=path, environ={"SLUICE_SPARK_MASTER": ""})
    assert s["spark.master"] == "spark://m:7077"


def test_keys_of_the_other_role_are_accepted_in_file_and_env_and_dropped(tmp_path):
    path = write(tmp_path, "zookeeper.quorum: zk:2181\ntaskmanager.slots: 4\nspark.master: local[4]\n")
    s = load("jobmanager", config_path=path, environ={"SLUICE_HEARTBEAT_INTERVAL": "0.5"})
    assert "taskmanager.slots" not in s.values and "spark.master" not in s.values
    assert "--slots" not in s.argv()


def test_non_config_sluice_variables_are_ignored():
    assert read_env({"SLUICE_CONFIG": "x", "SLUICE_CLUSTER_DIR": "d", "SLUICE_ZOOKEEPER_CLASSPATH": "c"}) == {}


# -- argv for the process mains ---------------------------------------------------------------
# every JobManager's argv ends with these defaults: the file mode mask, the REST host, client-call
# and REST limits
JOBMANAGER_ARGV_TAIL = [
    "--umask",
    "077",
    "--rest-host",
    "127.0.0.1",
    "--client-calls-max-concurrent",
    "16",
    "--client-calls-max-concurrent-per-client",
    "8",
    "--client-calls-rate-per-client",
    "200",
    "--rest-max-connections",
    "64",
    "--rest-max-connections-per-client",
    "16",
    "--rest-request-timeout",
    "10",
]


def test_argv_for_jobmanager():
    s = resolve(
        "jobmanager",
        ZK,
        {"rpc.host": "0.0.0.0", "rpc.advertised-host": "jm-0"},
        {"rpc.port": "6123", "state.checkpoints.dir": "/ckpt"},
    )
    assert s.argv() == [
        "--zookeeper",
        "zk:2181",
        "--cluster-id",
        "default",
        "--host",
        "0.0.0.0",
        "--port",
        "6123",
        "--advertised-host",
        "jm-0",
        "--max-slots-per-taskmanager",
        "256",
        "--heartbeat-timeout",
        "6",
        "--heartbeat-interval",
        "1",
        "--zk-session-timeout",
        "6",
        "--checkpoint-dir",
        "/ckpt",
        "--max-taskmanager-losses-per-job",
        "2",
        *JOBMANAGER_ARGV_TAIL,
    ]


def test_argv_for_taskmanager_leaves_unset_options_out():
    s = resolve("taskmanager", ZK, flag_values={"taskmanager.slots": "3", "heartbeat.interval": "0.5"})
    argv = s.argv()
    assert argv[argv.index("--slots") + 1] == "3"
    assert argv[argv.index("--heartbeat-interval") + 1] == "0.5"
    for absent in (
        "--advertised-host",
        "--spark-master",
        "--spark-remote",
        "--resource-id",
        "--log-file",
        "--checkpoint-dir",
        "--heartbeat-timeout",
    ):
        assert absent not in argv


def test_advertised_host_auto_resolves_when_the_process_starts():
    s = resolve(
        "taskmanager", ZK, {"rpc.host": "0.0.0.0", "rpc.advertised-host": "AUTO"}, resolve_host=lambda: "172.18.0.5"
    )
    assert s["rpc.advertised-host"] == "auto"
    argv = s.argv()
    assert argv[argv.index("--advertised-host") + 1] == "172.18.0.5"
    assert any("172.18.0.5" in n for n in s.notes)


def test_advertised_host_auto_that_does_not_resolve():
    def fail():
        raise OSError("Name or service not known")

    s = resolve("taskmanager", ZK, {"rpc.host": "0.0.0.0", "rpc.advertised-host": "auto"}, resolve_host=fail)
    assert any("would fail" in n for n in s.notes)  # --check still passes: it may run elsewhere
    assert s.as_dict()["argv"][s.as_dict()["argv"].index("--advertised-host") + 1] == "auto"
    with pytest.raises(ConfigError, match="rpc.advertised-host: cannot resolve 'auto'"):
        s.argv()  # starting the process does not


def test_bare_ipv6_addresses_get_brackets():
    s = resolve("jobmanager", ZK, {"rpc.host": "[::]", "rpc.advertised-host": "fd00::7"})
    assert s["rpc.advertised-host"] == "[fd00::7]"


# -- errors name the key -----------------------------------------------------------------------
def test_unknown_key_in_file(tmp_path):
    path = write(tmp_path, "zookeeper.quorum: zk:2181\nrpc.prot: 6123\n")
    with pytest.raises(ConfigError, match=r"rpc\.prot.*did you mean 'rpc\.port'") as e:
        read_file(path)
    assert e.value.key == "rpc.prot"


def test_unknown_nested_key_in_file(tmp_path):
    path = write(tmp_path, "zookeeper:\n  qourum: zk:2181\n")
    with pytest.raises(ConfigError, match=r"zookeeper\.qourum"):
        read_file(path)


def test_unknown_environment_variable():
    with pytest.raises(ConfigError, match="SLUICE_ZOOKEEPER_QORUM.*SLUICE_ZOOKEEPER_QUORUM") as e:
        read_env({"SLUICE_ZOOKEEPER_QORUM": "zk:2181"})
    assert e.value.key == "SLUICE_ZOOKEEPER_QORUM"


@pytest.mark.parametrize("raw", ["abc", "6123.5", "70000", "-1", True, ""])
def test_bad_port(raw):
    with pytest.raises(ConfigError, match=r"^rpc\.port: .*\(from env SLUICE_RPC_PORT\)$") as e:
        resolve("jobmanager", ZK, {"rpc.port": raw})
    assert e.value.key == "rpc.port"


def test_bad_port_in_file_names_the_file(tmp_path):
    path = write(tmp_path, "zookeeper.quorum: zk:2181\nrpc.port: sixty\n")
    with pytest.raises(
        ConfigError, match=rf"rpc\.port: expected an integer port 0-65535, got 'sixty' \(from file {path}\)"
    ):
        load("jobmanager", config_path=path, environ={})


def test_bad_value_is_an_error_even_when_overridden():
    with pytest.raises(ConfigError, match="rpc.port"):
        resolve("jobmanager", ZK, {"rpc.port": "x"}, {"rpc.port": "6123"})


@pytest.mark.parametrize(
    "key,raw,words",
    [
        ("taskmanager.slots", "0", "at least 1"),
        ("taskmanager.slots", "two", "integer"),
        ("heartbeat.timeout", "-3", "positive"),
        ("heartbeat.timeout", "6 days", "duration in seconds, or with a unit ms, s, min or h"),
        ("heartbeat.timeout", "0ms", "positive"),
        ("zookeeper.session-timeout", "nan", "positive"),
        ("zookeeper.quorum", "zk:99999", "bad port"),
        ("zookeeper.quorum", "a b:2181", "host:port"),
        ("rpc.host", "host:6123", "without a port"),
        ("rpc.host", "http://x", "host name"),
        ("cluster.id", "  ", "non-empty"),
    ],
)
def test_bad_values(key, raw, words):
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: .*{words}") as e:
        resolve("taskmanager", {**ZK, key: raw})
    assert e.value.key == key


def test_quorum_is_required():
    with pytest.raises(ConfigError, match="zookeeper.quorum is required.*SLUICE_ZOOKEEPER_QUORUM.*--zookeeper"):
        resolve("jobmanager")


def test_wildcard_bind_needs_an_advertised_host():
    with pytest.raises(ConfigError, match="rpc.advertised-host is required when rpc.host") as e:
        resolve("taskmanager", ZK, {"rpc.host": "0.0.0.0"})
    assert e.value.key == "rpc.advertised-host"
    with pytest.raises(ConfigError, match="rpc.advertised-host must be an address"):
        resolve("taskmanager", ZK, {"rpc.host": "0.0.0.0", "rpc.advertised-host": "0.0.0.0"})


def test_spark_master_and_remote_exclude_each_other():
    with pytest.raises(ConfigError, match="spark.master.*spark.remote"):
        resolve("taskmanager", {**ZK, "spark.master": "local[2]", "spark.remote": "sc://x:15002"})
    with pytest.raises(ConfigError, match="sc://"):
        resolve("taskmanager", {**ZK, "spark.remote": "http://x"})


@pytest.mark.parametrize(
    "raw,seconds", [(9, 9.0), ("9", 9.0), ("9s", 9.0), ("500ms", 0.5), ("2min", 120.0), ("1 h", 3600.0), (2.5, 2.5)]
)
def test_durations_take_units_and_bare_numbers_are_seconds(raw, seconds):
    s = resolve(
        "jobmanager", {**ZK, "heartbeat.timeout": raw, "zookeeper.session-timeout": raw, "heartbeat.interval": "100ms"}
    )
    assert s.get(config.HEARTBEAT_TIMEOUT) == seconds and s.get(config.ZOOKEEPER_SESSION_TIMEOUT) == seconds


def test_heartbeat_interval_below_timeout():
    with pytest.raises(ConfigError, match="heartbeat.interval .* shorter than heartbeat.timeout"):
        resolve("taskmanager", {**ZK, "heartbeat.interval": 6})


def test_flag_of_the_other_role_is_rejected():
    with pytest.raises(ConfigError, match="taskmanager.slots does not apply to a jobmanager"):
        resolve("jobmanager", ZK, flag_values={"taskmanager.slots": "3"})


@pytest.mark.parametrize(
    "text,msg",
    [
        ("", "not valid YAML|mapping"),
        ("- a\n- b\n", "must be a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_malformed_files(tmp_path, text, msg):
    path = write(tmp_path, text or "[]")
    with pytest.raises(ConfigError, match=msg):
        read_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load("jobmanager", config_path=str(tmp_path / "nope.yaml"), environ={})


def test_empty_file_is_no_settings(tmp_path):
    assert read_file(write(tmp_path, "# nothing yet\n")) == {}


def test_null_value_in_file_means_unset(tmp_path):
    path = write(tmp_path, "zookeeper.quorum: zk:2181\nstate.checkpoints.dir:\n")
    assert load("jobmanager", config_path=path, environ={})["state.checkpoints.dir"] is None


def test_reference_table_lists_every_key():
    table = config.reference()
    for o in config.OPTIONS:
        assert f"`{o.key}`" in table and f"`{o.env}`" in table
    assert "| (required) |" in table and "| 6s |" in table


# -- one home for each default: the OPTIONS table -------------------------------------------------
def test_typed_get_returns_the_parsed_value():
    s = resolve("jobmanager", ZK, flag_values={"rpc.port": "6123", "heartbeat.timeout": "1500ms"})
    port: int = s.get(config.RPC_PORT)
    assert port == 6123 and s.get(config.HEARTBEAT_TIMEOUT) == 1.5
    assert s.get(config.CHECKPOINTS_DIR) is None and s.get(config.CLUSTER_ID) == config.CLUSTER_ID.default
    with pytest.raises(KeyError, match="taskmanager.slots is not a jobmanager setting"):
        s.get(config.TASKMANAGER_SLOTS)


def test_every_option_is_a_named_constant_in_the_table():
    named = {v.key for k, v in vars(config).items() if k.isupper() and isinstance(v, config.Option)}
    assert named == set(config.BY_KEY) and len(config.OPTIONS) == len(config.BY_KEY)


def test_the_mains_and_the_cli_take_their_defaults_from_the_table():
    """The heartbeat and session timeouts and the slot count are written once, in OPTIONS."""
    import inspect

    from jobmanager.dispatcher import Dispatcher
    from sluice.cli import cluster
    from sluice.cli.main import build_parser

    params = inspect.signature(cluster.start).parameters
    assert params["heartbeat_timeout"].default is config.HEARTBEAT_TIMEOUT.default
    assert params["zk_session_timeout"].default is config.ZOOKEEPER_SESSION_TIMEOUT.default
    assert params["slots"].default is config.TASKMANAGER_SLOTS.default
    for name in ("heartbeat_timeout", "heartbeat_interval"):  # required: the process passes its settings
        assert inspect.signature(Dispatcher).parameters[name].default is inspect.Parameter.empty
    args = build_parser().parse_args(["cluster", "start"])
    assert (args.heartbeat_timeout, args.zk_session_timeout, args.slots) == (6.0, 6.0, 2)
    assert build_parser().parse_args(["cluster", "start", "--heartbeat-timeout", "1500ms"]).heartbeat_timeout == 1.5


def test_cluster_start_rejects_a_bad_duration_naming_the_flag(capsys):
    from sluice.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["cluster", "start", "--zk-session-timeout", "soon"])
    assert "--zk-session-timeout: expected a positive duration" in capsys.readouterr().err


def test_cluster_start_passes_the_file_and_environment_on_below_its_own_options(tmp_path, capsys):
    """`SLUICE_SPARK_WARM_UP=false sluice cluster start` reaches the TaskManagers it starts, as
    `sluice taskmanager` would read it; -D wins over both; a per-process key is left out, named."""
    from sluice.cli import cluster

    path = write(tmp_path, "task:\n  cancellation:\n    timeout: 10s\nspark.warm-up: true\nrpc.port: 6123\n")
    environ = {"SLUICE_CONFIG": str(path), "SLUICE_SPARK_WARM_UP": "false", "SLUICE_REST_PORT": "8081"}
    got = cluster.start_options(["task.cancellation.timeout=20s"], environ)
    assert got == {"spark.warm-up": "false", "task.cancellation.timeout": "20s"}
    assert "ignoring rest.port, rpc.port from the environment" in capsys.readouterr().err
    assert cluster.start_options([], {"SLUICE_CONFIG": str(path)})["spark.warm-up"] == "true"  # YAML's bool
    assert cluster.start_options(["a=b"], {}) == {"a": "b"}  # nothing inherited: the pairs alone
    with pytest.raises(cluster.ClusterError, match="SLUICE_SPARK_WARMUP.*did you mean"):
        cluster.start_options([], {"SLUICE_SPARK_WARMUP": "false"})  # a typo is an error, not ignored


# -- python -m jobmanager: the same flags, the same Settings ------------------------------------
def test_jobmanager_main_builds_settings_from_the_table_flags(monkeypatch):
    import jobmanager.server

    seen = []
    monkeypatch.setattr(
        jobmanager.server, "run", lambda settings, address_file=None: seen.append((settings, address_file))
    )
    monkeypatch.setenv("SLUICE_CLUSTER_ID", "ignored")  # `python -m jobmanager` reads its flags alone
    jobmanager.server.main(
        [
            "--zookeeper",
            "H:1",
            "--cluster-id",
            "C",
            "--port",
            "0",
            "--heartbeat-timeout",
            "6",
            "--checkpoint-dir",
            "/d",
            "--log-file",
            "/l",
            "--address-file",
            "/a",
        ]
    )
    ((settings, address_file),) = seen
    assert address_file == "/a" and settings.role == "jobmanager"
    assert settings.values == {
        **resolve("jobmanager", {"zookeeper.quorum": "H:1"}).values,
        "cluster.id": "C",
        "state.checkpoints.dir": "/d",
        "log.file": "/l",
    }
    assert settings.sources["heartbeat.timeout"] == "flag --heartbeat-timeout"


def test_jobmanager_main_accepts_the_argv_of_settings(monkeypatch):
    import jobmanager.server

    seen = []
    monkeypatch.setattr(jobmanager.server, "run", lambda settings, _address_file=None: seen.append(settings))
    s = resolve(
        "jobmanager",
        ZK,
        {"rpc.host": "0.0.0.0", "rpc.advertised-host": "jm-0", "heartbeat.timeout": "1500ms"},
        {"rpc.port": "6123", "state.checkpoints.dir": "/ckpt"},
    )
    jobmanager.server.main(s.argv())
    assert seen[0].values == s.values


@pytest.mark.parametrize(
    "argv,words",
    [
        ([], "the following arguments are required: --zookeeper"),
        (["--zookeeper", "zk:1", "--port", "http"], "rpc.port: expected an integer port"),
        (["--zookeeper", "zk:1", "--heartbeat-timeout", "soon"], "heartbeat.timeout: expected a positive duration"),
        (["--zookeeper", "zk:1", "--slots", "2"], "unrecognized arguments: --slots"),
    ],
)
def test_jobmanager_main_errors_exit_2_naming_the_key(argv, words, capsys):
    import jobmanager.server

    with pytest.raises(SystemExit) as e:
        jobmanager.server.main(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


# -- the CLI commands (in-process) ------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sluice")
    processes.add_process_commands(ap.add_subparsers(dest="command", required=True))
    return ap


def run(argv, monkeypatch, env=None) -> int:
    for name in [n for n in __import__("os").environ if n.startswith("SLUICE_")]:
        monkeypatch.delenv(name)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    args = parser().parse_args(argv)
    return args.handler(args)


def test_check_prints_merged_json(monkeypatch, capsys, tmp_path):
    path = write(tmp_path, "zookeeper.quorum: zk:2181\nrpc.port: 1\n")
    code = run(
        ["taskmanager", "--config", path, "--slots", "4", "-D", "rpc.port=7", "--check"],
        monkeypatch,
        {"SLUICE_CLUSTER_ID": "c1"},
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["role"] == "taskmanager" and out["config_file"] == path
    assert out["settings"]["taskmanager.slots"] == 4 and out["settings"]["rpc.port"] == 7
    assert out["settings"]["cluster.id"] == "c1"
    assert out["sources"]["rpc.port"] == "flag -D rpc.port=7"
    assert out["argv"][:2] == ["--zookeeper", "zk:2181"]


def test_named_flag_wins_over_D(monkeypatch, capsys):
    assert run(["jobmanager", "--zookeeper", "zk:1", "-D", "rpc.port=7", "--port", "8", "--check"], monkeypatch) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["rpc.port"] == 8


def test_check_fails_with_exit_2_naming_the_key(monkeypatch, capsys):
    assert run(["jobmanager", "--zookeeper", "zk:1", "--port", "http", "--check"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "rpc.port" in err and "--port" in err
    assert run(["jobmanager", "--check"], monkeypatch, {"SLUICE_ZOOKEEPER_QUORUM": "zk:1", "SLUICE_RPC_PROT": "1"}) == 2
    assert "SLUICE_RPC_PROT" in capsys.readouterr().err
    assert run(["jobmanager", "--zookeeper", "zk:1", "-D", "bogus.key=1", "--check"], monkeypatch) == 2
    assert "bogus.key" in capsys.readouterr().err


def test_without_check_the_jobmanager_runs_with_the_settings(monkeypatch):
    import jobmanager.server

    seen = []
    monkeypatch.setattr(jobmanager.server, "run", lambda settings: seen.append(settings))
    monkeypatch.setattr(jobmanager.server, "main", lambda _argv: pytest.fail("no argv round trip for the JobManager"))
    assert run(["jobmanager", "--zookeeper", "zk:1", "--port", "6123"], monkeypatch) == 0
    (settings,) = seen
    assert settings.argv() == [
        "--zookeeper",
        "zk:1",
        "--cluster-id",
        "default",
        "--host",
        "127.0.0.1",
        "--port",
        "6123",
        "--max-slots-per-taskmanager",
        "256",
        "--heartbeat-timeout",
        "6",
        "--heartbeat-interval",
        "1",
        "--zk-session-timeout",
        "6",
        "--max-taskmanager-losses-per-job",
        "2",
        *JOBMANAGER_ARGV_TAIL,
    ]
    assert settings.sources["rpc.port"] == "flag --port"


def test_without_check_the_taskmanager_runs_with_the_settings(monkeypatch):
    import taskmanager.server

    seen = []
    monkeypatch.setattr(taskmanager.server, "run", lambda settings: seen.append(settings))
    monkeypatch.setattr(taskmanager.server, "main", lambda _argv: pytest.fail("no argv round trip for the TaskManager"))
    assert run(["taskmanager", "--zookeeper", "zk:1", "--slots", "3"], monkeypatch) == 0
    (settings,) = seen
    assert settings["taskmanager.slots"] == 3 and settings.sources["taskmanager.slots"] == "flag --slots"


def test_without_check_auto_that_does_not_resolve_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(config, "_own_address", lambda: (_ for _ in ()).throw(OSError("no name")))
    assert (
        run(["jobmanager", "--zookeeper", "zk:1", "--host", "0.0.0.0", "--advertised-host", "auto"], monkeypatch) == 2
    )
    assert "cannot resolve 'auto'" in capsys.readouterr().err


def test_docs_show_the_current_reference_table():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/configuration.md"):
        assert config.reference() in (root / doc).read_text(), (
            f"the process options table in {doc} is stale: run `make docs-config` "
            "(python -m sluice.reference_docs README.md docs/configuration.md)"
        )
