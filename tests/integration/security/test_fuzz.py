"""Structured fuzzing of the servers a client can reach (docs/protocols.md, "Bounds"):
hypothesis builds request protos from their descriptors — random sizes, ids, nesting,
enum values in and out of range, the real leader session id and real ids mixed in — for
SubmitJob and the other JobManager calls, every ResourceManager call against the live
JobManager, and every TaskExecutor call against a live TaskManager. A bounded number of
examples per call (`EXAMPLES`); for each: only the status codes a client may see, and
afterwards every process is alive and the JobManager's and TaskManager's memory stayed
bounded.

On a secured cluster each service is called with a certificate of the role it admits
(a client's for JobManager, a new TaskManager's for ResourceManager, a new JobManager's
for TaskExecutor), so the requests reach the code behind the role check."""

from __future__ import annotations

import os

import grpc
import psutil
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from harness import running_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice import rpc
from sluice.security.identity import Role
from sluice.v1 import jobmanager_pb2, jobmanager_pb2_grpc, taskmanager_pb2, taskmanager_pb2_grpc
from sluice.zk.leader_retrieval import read_leader
from sluice.zk.paths import ZkPaths

pytestmark = pytest.mark.integration

EXAMPLES = 40  # per RPC: ~20 RPCs, the whole module in about a minute
MAX_DEPTH = 3  # nesting of generated messages
EXPECTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAVAILABLE,  # a standby JobManager
}
RSS_GROWTH_LIMIT = 300 * 1024 * 1024  # bytes a server may grow by over the whole run


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Its own cluster, not the shared one: fuzzed registrations and task states with real
    credentials may leave the leader holding garbage that later tests would trip over."""
    with running_cluster(tmp_path_factory.mktemp("fuzz") / "cluster", taskmanagers=1, slots=2) as c:
        yield c


def _credentials(cluster, role: Role):
    if "tls" not in cluster.info:
        return None
    from sluice.security.tls import TlsFiles, issue_from

    if role == Role.CLIENT:
        return TlsFiles(cluster.info["tls"]["ca"], cluster.info["tls"]["cert"], cluster.info["tls"]["key"])
    return issue_from(os.path.dirname(cluster.info["tls"]["ca"]), role, f"fuzz-{role}")


@pytest.fixture(scope="module")
def target(cluster):
    """Stubs of the three services, the ids worth mixing into requests, and the servers' RSS at the start."""
    zk = cluster.zk_client()
    try:
        leader = read_leader(zk, ZkPaths(cluster.info["cluster_id"]))
        assert leader is not None, "no leader published"
        address, session = leader
    finally:
        zk.stop()
        zk.close()
    tm = next(p for p in cluster.info["processes"] if p["role"] == "taskmanager")
    with cluster.client() as client:
        resource_ids = [t.resource_id for t in client.cluster().taskmanagers]
    servers = {"jobmanager": psutil.Process(cluster.pid_of("jobmanager")), "taskmanager": psutil.Process(tm["pid"])}
    stubs = {
        "JobManager": jobmanager_pb2_grpc.JobManagerStub(rpc.channel(address, _credentials(cluster, Role.CLIENT))),
        "ResourceManager": jobmanager_pb2_grpc.ResourceManagerStub(
            rpc.channel(address, _credentials(cluster, Role.TASKMANAGER))
        ),
        "TaskExecutor": taskmanager_pb2_grpc.TaskExecutorStub(
            rpc.channel(tm["address"], _credentials(cluster, Role.JOBMANAGER))
        ),
    }
    known = [session, *resource_ids, address, tm["address"], "", "x" * 5000]
    yield stubs, known, servers, {name: p.memory_info().rss for name, p in servers.items()}


# -- strategies from descriptors ------------------------------------------------------------------
_INTS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _text(known: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=24),
        st.sampled_from(known),
        st.text(alphabet="ab/:.-0123456789", min_size=200, max_size=3000),
    )


def _scalar(field: FieldDescriptor, known: list[str], depth: int) -> st.SearchStrategy:
    t = field.type
    if t in _INTS:
        lo, hi = _INTS[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([0, 1, -1 if lo < 0 else 2, hi, lo]))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32 if t == FieldDescriptor.TYPE_FLOAT else 64)
    if t == FieldDescriptor.TYPE_STRING:
        return _text(known)
    if t == FieldDescriptor.TYPE_BYTES:
        return st.one_of(
            st.binary(max_size=64), _text(known).map(str.encode), st.binary(min_size=1000, max_size=20_000)
        )
    if t == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        values = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(values), st.integers(-5, 1000))
    return messages(field.message_type, known, depth + 1)


def _field(field: FieldDescriptor, known: list[str], depth: int) -> st.SearchStrategy:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return st.dictionaries(_scalar(key, known, depth), _scalar(value, known, depth), max_size=4)
    element = _scalar(field, known, depth)
    if field.is_repeated:
        return st.one_of(st.lists(element, max_size=4), st.lists(element, min_size=50, max_size=200 if depth else 600))
    return element


def messages(descriptor, known: list[str], depth: int = 0) -> st.SearchStrategy:
    """Messages of `descriptor` with any subset of their fields set; nested messages stop at MAX_DEPTH."""
    cls = message_factory.GetMessageClass(descriptor)
    if depth >= MAX_DEPTH:
        return st.just(cls())
    optional = {f.name: _field(f, known, depth) for f in descriptor.fields}
    return st.fixed_dictionaries({}, optional=optional).map(lambda kwargs: cls(**kwargs))


# -- the calls ------------------------------------------------------------------------------------
def _methods(service_pb2, service: str) -> list[tuple[str, str, object]]:
    descriptor = service_pb2.DESCRIPTOR.services_by_name[service]
    return [(service, m.name, m.input_type) for m in descriptor.methods]


CALLS = [
    *_methods(jobmanager_pb2, "JobManager"),
    *_methods(jobmanager_pb2, "ResourceManager"),
    *_methods(taskmanager_pb2, "TaskExecutor"),
]


@pytest.mark.parametrize("service,method,request_type", CALLS, ids=[f"{s}.{m}" for s, m, _ in CALLS])
def test_fuzzed_requests_get_only_expected_codes(target, service, method, request_type):
    stubs, known, servers, _ = target
    call = getattr(stubs[service], method)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(request=messages(request_type, known))
    def fuzz(request):
        try:
            call(request, timeout=20)
        except grpc.RpcError as err:
            assert err.code() in EXPECTED, f"{service}.{method} answered {err.code().name}: {err.details()}"

    fuzz()
    for name, process in servers.items():
        assert process.is_running() and process.status() != psutil.STATUS_ZOMBIE, f"the {name} died"


def test_a_fenced_deployment_without_a_parallelism_is_refused_as_invalid(target):
    """A descriptor with the leader's session id but nothing else (parallelism 0) is an invalid
    argument that names the fields, not an exception inside the TaskManager."""
    stubs, known, _, _ = target
    with pytest.raises(grpc.RpcError) as err:
        stubs["TaskExecutor"].SubmitTask(
            taskmanager_pb2.TaskDeploymentDescriptor(leader_session_id=known[0]), timeout=20
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert "parallelism 0" in err.value.details()


def test_every_process_lives_and_memory_stayed_bounded(cluster, target):
    _, _, servers, rss_before = target
    for p in cluster.info["processes"]:
        assert psutil.pid_exists(p["pid"]), f"{p['role']} (pid {p['pid']}) died"
    for name, process in servers.items():
        grown = process.memory_info().rss - rss_before[name]
        print(f"{name}: RSS {rss_before[name] / 2**20:.0f} MiB before, grew {grown / 2**20:.0f} MiB")  # with -s
        assert grown < RSS_GROWTH_LIMIT, f"the {name} grew by {grown / 2**20:.0f} MiB"
    with cluster.client() as client:  # and the cluster still answers
        assert client.cluster().total_slots >= 2
