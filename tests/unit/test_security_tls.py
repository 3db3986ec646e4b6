"""Certificates (sluice/security/tls.py), the role table (sluice/security/auth.py) and
secured servers and channels (sluice/rpc.py) over loopback in this process."""

from __future__ import annotations

import os
import stat

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sluice import config, rpc
from sluice.security import auth
from sluice.security.identity import Identity, Role
from sluice.security.tls import SERVER_NAME, TlsError, TlsFiles, create_cluster, issue_from
from sluice.v1 import jobmanager_pb2, jobmanager_pb2_grpc

ZK = {"zookeeper.quorum": "zk:2181"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_cluster(str(tmp_path_factory.mktemp("tls")), jobmanagers=1, taskmanagers=1)


def load(path: str) -> x509.Certificate:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


# -- certificates ------------------------------------------------------------------------------
def test_cluster_certificates_name_their_holder_and_keys_are_private(certs):
    assert sorted(certs.parties) == ["client", "jobmanager-0", "taskmanager-0"]
    for stem, files in certs.parties.items():
        cn = load(str(files.cert)).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        assert Identity.parse(str(cn)) is not None and str(cn).endswith("/" + stem)
        assert stat.S_IMODE(os.stat(str(files.key)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(certs.directory, "ca.key")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(certs.directory).st_mode) == 0o700


def test_server_certificates_carry_the_cluster_name_and_loopback_and_clients_none(certs):
    server = load(str(certs.parties["taskmanager-0"].cert))
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {SERVER_NAME, "localhost"} <= set(san.get_values_for_type(x509.DNSName))
    assert "127.0.0.1" in {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    client = load(str(certs.client.cert))
    with pytest.raises(x509.ExtensionNotFound):
        client.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]  # a client certificate cannot serve


def test_issue_from_an_existing_ca(certs, tmp_path):
    files = issue_from(certs.directory, Role.TASKMANAGER, "taskmanager-extra")
    assert files.ca == certs.ca
    assert "taskmanager/taskmanager-extra" in load(str(files.cert)).subject.rfc4514_string()


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(TlsError, match=r"CA certificate file .*nope.pem does not exist"):
        TlsFiles(str(tmp_path / "nope.pem")).read()
    (tmp_path / "junk.pem").write_text("hello")
    with pytest.raises(TlsError, match="is not PEM"):
        TlsFiles(str(tmp_path / "junk.pem")).read()
    with pytest.raises(TlsError, match="give both or neither"):
        TlsFiles("ca.pem", "cert.pem", None)


def test_certs_command_refuses_to_replace_a_ca(certs, capsys):
    from sluice.cli.main import build_parser

    args = build_parser().parse_args(["certs", "create", certs.directory])
    assert args.handler(args) == 2
    assert "--force" in capsys.readouterr().err


# -- the role table ----------------------------------------------------------------------------
def ident(role: Role) -> Identity:
    return Identity(role, "x")


@pytest.mark.parametrize(
    ("method", "allowed"),
    [
        ("/sluice.v1.JobManager/SubmitJob", {Role.CLIENT, Role.JOBMANAGER}),
        ("/sluice.v1.JobManager/ListJobs", {Role.CLIENT, Role.JOBMANAGER}),
        ("/sluice.v1.ResourceManager/RegisterTaskManager", {Role.TASKMANAGER}),
        ("/sluice.v1.ResourceManager/AcknowledgeCheckpoint", {Role.TASKMANAGER}),
        ("/sluice.v1.TaskExecutor/SubmitTask", {Role.JOBMANAGER}),
        ("/sluice.v1.DataExchange/Subscribe", {Role.TASKMANAGER}),
        ("/grpc.health.v1.Health/Check", set(Role)),
    ],
)
def test_each_role_may_call_only_its_methods(method, allowed):
    for role in Role:
        denied = auth.decide(method, ident(role), None, None)
        if role in allowed:
            assert denied is None, (method, role)
        else:
            assert denied is not None and denied.code == grpc.StatusCode.PERMISSION_DENIED
            assert all(str(r) in denied.message for r in allowed)  # names the role it needs


def test_every_cluster_method_has_a_rule_and_others_are_denied():
    from sluice.v1 import dataexchange_pb2, taskmanager_pb2

    for module in (jobmanager_pb2, taskmanager_pb2, dataexchange_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                assert f"/{service.full_name}/{m.name}" in auth.RULES
    denied = auth.decide("/sluice.v1.Nope/Call", ident(Role.JOBMANAGER), None, None)
    assert denied is not None and denied.code == grpc.StatusCode.PERMISSION_DENIED


def test_bearer_token_rules():
    secret = b"s3cret-token-0123456789"
    submit = "/sluice.v1.JobManager/SubmitJob"
    assert auth.decide(submit, None, secret.decode(), secret) is None
    missing = auth.decide(submit, None, None, secret)
    assert missing is not None and missing.code == grpc.StatusCode.UNAUTHENTICATED
    wrong = auth.decide(submit, None, "guess", secret)
    assert wrong is not None and wrong.code == grpc.StatusCode.UNAUTHENTICATED and "guess" not in wrong.message
    internal = auth.decide("/sluice.v1.ResourceManager/Heartbeat", None, secret.decode(), secret)
    assert internal is not None and internal.code == grpc.StatusCode.PERMISSION_DENIED
    assert auth.bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert auth.bearer_token([("authorization", "Basic abc")]) is None


# -- configuration -------------------------------------------------------------------------------
def test_a_server_needs_tls_or_an_explicit_insecure():
    with pytest.raises(config.ConfigError, match=r"--tls-ca, --tls-cert and --tls-key .* or --insecure"):
        config.check_security(config.resolve("jobmanager", ZK))
    with pytest.raises(config.ConfigError, match="security.ssl.key missing"):
        config.check_security(
            config.resolve("taskmanager", ZK, flag_values={"security.ssl.ca": "a", "security.ssl.cert": "b"})
        )
    with pytest.raises(config.ConfigError, match="exclude each other"):
        config.check_security(
            config.resolve("jobmanager", ZK, flag_values={"security.insecure": "true", "security.ssl.ca": "a"})
        )
    config.check_security(config.resolve("jobmanager", ZK, flag_values={"security.insecure": "true"}))


def test_insecure_is_a_switch_on_the_command_line():
    settings, _ = config.parse_process_argv("jobmanager", ["--zookeeper", "zk:1", "--insecure"])
    assert settings.get(config.SECURITY_INSECURE) is True
    assert "--insecure" in settings.argv()
    settings, _ = config.parse_process_argv("jobmanager", ["--zookeeper", "zk:1"])
    assert settings.get(config.SECURITY_INSECURE) is False and "--insecure" not in settings.argv()


# -- a secured server over loopback ----------------------------------------------------------------
@pytest.fixture(scope="module")
def server(certs):
    s = rpc.Server(
        "127.0.0.1",
        0,
        ["sluice.v1.JobManager", "sluice.v1.ResourceManager"],
        security=rpc.Security(certs.parties["jobmanager-0"]),
        health_port=0,
    )
    # the generated base servicers answer UNIMPLEMENTED: reaching them means authorized
    jobmanager_pb2_grpc.add_JobManagerServicer_to_server(jobmanager_pb2_grpc.JobManagerServicer(), s.server)
    jobmanager_pb2_grpc.add_ResourceManagerServicer_to_server(jobmanager_pb2_grpc.ResourceManagerServicer(), s.server)
    s.start()
    s.set_serving(True)
    yield s
    s.stop(grace=0)


def code_of(call) -> grpc.StatusCode:
    try:
        call()
        return grpc.StatusCode.OK
    except grpc.RpcError as err:
        return err.code()


def test_roles_are_enforced_on_a_live_server(server, certs):
    with rpc.channel(server.address, certs.client) as ch:
        listing = jobmanager_pb2_grpc.JobManagerStub(ch).ListJobs
        assert code_of(lambda: listing(jobmanager_pb2.ListJobsRequest(), timeout=5)) == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as err:
            jobmanager_pb2_grpc.ResourceManagerStub(ch).RegisterTaskManager(
                jobmanager_pb2.RegisterTaskManagerRequest(resource_id="rogue", address="x:1", slots=1), timeout=5
            )
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "taskmanager certificate" in err.value.details()
    with rpc.channel(server.address, certs.parties["taskmanager-0"]) as ch:
        register = jobmanager_pb2_grpc.ResourceManagerStub(ch).RegisterTaskManager
        assert code_of(lambda: register(jobmanager_pb2.RegisterTaskManagerRequest(), timeout=5)) == (
            grpc.StatusCode.UNIMPLEMENTED
        )
    assert rpc.is_serving(server.address, tls=certs.client)
    assert not rpc.is_serving(server.address, tls=None)  # plaintext does not get through the handshake


def test_the_health_port_is_plaintext_and_serves_health_only(server):
    address = f"127.0.0.1:{server.health_port}"
    with grpc.insecure_channel(address) as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        listing = jobmanager_pb2_grpc.JobManagerStub(ch).ListJobs
        assert code_of(lambda: listing(jobmanager_pb2.ListJobsRequest(), timeout=5)) == grpc.StatusCode.UNIMPLEMENTED
