"""ZooKeeper credentials and small writes, without a server: the auth file, the
ACL mode, the size check and the compacted job result (sluice/zk/auth.py,
sluice/zk/limits.py, jobmanager/ha/zookeeper.py)."""

from __future__ import annotations

import os

import pytest

from jobmanager.ha.zookeeper import FAILURE_LIMIT, JOB_RESULT_BUDGET, compact_job_result
from sluice.states import ExecutionState, to_proto
from sluice.v1 import common_pb2
from sluice.zk.auth import AclMode, ZkAuth, ZooKeeperAuthError, parse_credentials, write_auth_file
from sluice.zk.limits import MAX_WRITE_BYTES, ZNodeTooLargeError, check_size, truncate


def test_auth_file_is_written_private_and_kept(tmp_path):
    path = str(tmp_path / "zookeeper-auth")
    write_auth_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    first = open(path).read()
    write_auth_file(path)  # a restarted cluster keeps its credentials
    assert open(path).read() == first
    auth = ZkAuth.resolve(path, None)
    assert auth.acl_mode is AclMode.CREATOR and auth.user == "sluice"
    assert auth.auth_data == [("digest", first.strip())]
    assert auth.password is not None and auth.password not in repr(auth)
    assert [a.id.scheme for a in auth.acl] == ["digest"] and auth.acl[0].perms == 31


@pytest.mark.parametrize("text", ["", "# only a comment\n", "nopassword", "user:", ":pw", "us er:pw"])
def test_malformed_credentials_say_what_is_expected(text):
    with pytest.raises(ZooKeeperAuthError, match="user:password"):
        parse_credentials(text, "auth")


def test_acl_mode():
    assert ZkAuth.resolve(None, None).acl_mode is AclMode.OPEN
    assert ZkAuth.resolve(None, None).auth_data == []
    with pytest.raises(ZooKeeperAuthError, match="high-availability.zookeeper.auth-file"):
        ZkAuth.resolve(None, "creator")
    with pytest.raises(ZooKeeperAuthError, match="cannot read"):
        ZkAuth.resolve("/nonexistent/auth", None)


def test_open_mode_with_credentials_still_authenticates(tmp_path):
    path = write_auth_file(str(tmp_path / "auth"))
    auth = ZkAuth.resolve(path, "open")
    assert auth.auth_data and auth.acl[0].id.scheme == "world"


def test_size_check_and_truncation():
    check_size("x", MAX_WRITE_BYTES)
    with pytest.raises(ZNodeTooLargeError, match="nothing was written"):
        check_size("the value of node /a", MAX_WRITE_BYTES + 1)
    assert truncate("short", 10) == "short"
    cut = truncate("a" * 100, 10, "/store/f.txt")
    assert cut.startswith("a" * 10) and cut.endswith("(90 more characters; full text in /store/f.txt)")


def test_a_job_result_is_compacted_below_its_budget():
    """A 700 KB failure and 32768 tasks with long errors: what ZooKeeper keeps is small,
    and the failure's head names where its full text is."""
    huge = "ValueError: " + "x" * 700_000
    info = common_pb2.JobInfo(job_id="j", name="wide", failure=huge, message="m")
    for i in range(32768):
        info.tasks.add(operator="source -> map", subtask=i, state=to_proto(ExecutionState.CANCELED), error="e" * 2000)
    for _ in range(32):
        info.exceptions.add(cause="ValueError: x", traceback="t" * 8192, restarted=True)
    assert info.ByteSize() > 60 * 1024 * 1024
    compact = compact_job_result(info, "/store/jobresults/j.failure.txt")
    assert compact.ByteSize() <= JOB_RESULT_BUDGET
    assert compact.failure.startswith(huge[:FAILURE_LIMIT])
    assert compact.failure.endswith("full text in /store/jobresults/j.failure.txt)")
    assert not compact.tasks and "32768 tasks entries not kept" in compact.message
    assert info.failure == huge and len(info.tasks) == 32768  # the input is left as it was


def test_a_small_job_result_is_kept_whole():
    info = common_pb2.JobInfo(job_id="j", name="n", failure="boom")
    info.tasks.add(operator="source", subtask=0, error="boom")
    assert compact_job_result(info, None) == info
