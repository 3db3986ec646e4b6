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
    for key in ("zookeeper.quorum", "cluster.id", "rpc.host", "rpc.port", "rpc.advertised-host",
                "taskmanager.slots", "heartbeat.timeout", "zookeeper.session-timeout", "state.checkpoints.dir",
                "spark.master", "spark.remote", "log.file"):
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
    path = write(tmp_path, "zookeeper.quorum: file:2181\nrpc.port: 1111\ncluster.id: from-file\n"
                           "heartbeat.timeout: 9\n")
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
def test_argv_for_jobmanager():
    s = resolve("jobmanager", ZK, {"rpc.host": "0.0.0.0", "rpc.advertised-host": "jm-0"},
                {"rpc.port": "6123", "state.checkpoints.dir": "/ckpt"})
    assert s.argv() == ["--zookeeper", "zk:2181", "--cluster-id", "default", "--host", "0.0.0.0", "--port", "6123",
                        "--advertised-host", "jm-0", "--heartbeat-timeout", "6", "--zk-session-timeout", "6",
                        "--checkpoint-dir", "/ckpt"]


def test_argv_for_taskmanager_leaves_unset_options_out():
    s = resolve("taskmanager", ZK, flag_values={"taskmanager.slots": "3", "heartbeat.interval": "0.5"})
    argv = s.argv()
    assert argv[argv.index("--slots") + 1] == "3"
    assert argv[argv.index("--heartbeat-interval") + 1] == "0.5"
    for absent in ("--advertised-host", "--spark-master", "--spark-remote", "--resource-id", "--log-file",
                   "--checkpoint-dir", "--heartbeat-timeout"):
        assert absent not in argv


def test_advertised_host_auto_resolves_when_the_process_starts():
    s = resolve("taskmanager", ZK, {"rpc.host": "0.0.0.0", "rpc.advertised-host": "AUTO"},
                resolve_host=lambda: "172.18.0.5")
    assert s["rpc.advertised-host"] == "auto"
    argv = s.argv()
    assert argv[argv.index("--advertised-host") + 1] == "172.18.0.5"
    assert any("172.18.0.5" in n for n in s.notes)


def test_advertised_host_auto_that_does_not_resolve():
    def fail():
        raise OSError("Name or service not known")
    s = resolve("taskmanager", ZK, {"rpc.host": "0.0.0.0", "rpc.advertised-host": "auto"}, resolve_host=fail)
    assert any("would fail" in n for n in s.notes)             # --check still passes: it may run elsewhere
    assert s.as_dict()["argv"][s.as_dict()["argv"].index("--advertised-host") + 1] == "auto"
    with pytest.raises(ConfigError, match="rpc.advertised-host: cannot resolve 'auto'"):
        s.argv()                                               # starting the process does not


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
    with pytest.raises(ConfigError, match=rf"rpc\.port: expected an integer port 0-65535, got 'sixty' \(from file {path}\)"):
        load("jobmanager", config_path=path, environ={})


def test_bad_value_is_an_error_even_when_overridden():
    with pytest.raises(ConfigError, match="rpc.port"):
        resolve("jobmanager", ZK, {"rpc.port": "x"}, {"rpc.port": "6123"})


@pytest.mark.parametrize("key,raw,words", [
    ("taskmanager.slots", "0", "at least 1"),
    ("taskmanager.slots", "two", "integer"),
    ("heartbeat.timeout", "-3", "positive"),
    ("heartbeat.timeout", "6s", "number of seconds"),
    ("zookeeper.session-timeout", "nan", "positive"),
    ("zookeeper.quorum", "zk:99999", "bad port"),
    ("zookeeper.quorum", "a b:2181", "host:port"),
    ("rpc.host", "host:6123", "without a port"),
    ("rpc.host", "http://x", "host name"),
    ("cluster.id", "  ", "non-empty"),
])
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


def test_heartbeat_interval_below_timeout():
    with pytest.raises(ConfigError, match="heartbeat.interval .* shorter than heartbeat.timeout"):
        resolve("taskmanager", {**ZK, "heartbeat.interval": 6})


def test_flag_of_the_other_role_is_rejected():
    with pytest.raises(ConfigError, match="taskmanager.slots does not apply to a jobmanager"):
        resolve("jobmanager", ZK, flag_values={"taskmanager.slots": "3"})


@pytest.mark.parametrize("text,msg", [
    ("", "not valid YAML|mapping"),
    ("- a\n- b\n", "must be a mapping"),
    ("a: [\n", "not valid YAML"),
])
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
    code = run(["taskmanager", "--config", path, "--slots", "4", "-D", "rpc.port=7", "--check"], monkeypatch,
               {"SLUICE_CLUSTER_ID": "c1"})
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
    assert run(["jobmanager", "--check"], monkeypatch, {"SLUICE_ZOOKEEPER_QUORUM": "zk:1",
                                                         "SLUICE_RPC_PROT": "1"}) == 2
    assert "SLUICE_RPC_PROT" in capsys.readouterr().err
    assert run(["jobmanager", "--zookeeper", "zk:1", "-D", "bogus.key=1", "--check"], monkeypatch) == 2
    assert "bogus.key" in capsys.readouterr().err


def test_without_check_the_process_main_gets_the_argv(monkeypatch):
    import jobmanager.server
    seen = []
    monkeypatch.setattr(jobmanager.server, "main", lambda argv: seen.append(argv))
    assert run(["jobmanager", "--zookeeper", "zk:1", "--port", "6123"], monkeypatch) == 0
    assert seen == [["--zookeeper", "zk:1", "--cluster-id", "default", "--host", "127.0.0.1", "--port", "6123",
                     "--heartbeat-timeout", "6", "--zk-session-timeout", "6"]]


def test_docs_show_the_current_reference_table():
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deployment.md").read_text()
    assert config.reference() in doc, "regenerate the table in docs/deployment.md from sluice.config.reference()"
