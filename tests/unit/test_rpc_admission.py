"""Admission of client calls (sluice/rpc_admission.py): the pure core, with time as an input."""

import pytest

from sluice.rpc_admission import Admission, Limits, client_of


def test_the_server_wide_limit_leaves_threads_to_the_control_plane():
    a = Admission(Limits(max_concurrent=3, per_client=3, rate=1000, burst=1000))
    assert [a.admit(c, 0.0) for c in ("x", "y", "z")] == [None, None, None]
    assert a.admit("w", 0.0) == "the JobManager runs 3 client calls, its limit"
    a.release("y")
    assert a.admit("w", 0.0) is None


def test_one_client_cannot_take_every_slot():
    a = Admission(Limits(max_concurrent=10, per_client=2, rate=1000, burst=1000))
    assert a.admit("x", 0.0) is None and a.admit("x", 0.0) is None
    assert a.admit("x", 0.0) == "client x has 2 calls running, its limit"
    assert a.admit("y", 0.0) is None  # others unaffected
    a.release("x")
    assert a.admit("x", 0.0) is None


def test_the_rate_refills_with_time():
    a = Admission(Limits(max_concurrent=100, per_client=100, rate=10, burst=5))
    for _ in range(5):
        assert a.admit("x", 0.0) is None
        a.release("x")
    assert a.admit("x", 0.0) == "client x exceeds 10 calls per second"
    assert a.admit("x", 0.05) == "client x exceeds 10 calls per second"  # half a token
    assert a.admit("x", 0.1) is None  # one token back after 1/rate seconds
    a.release("x")
    assert a.admit("x", 100.0) is None  # never more than the burst saved up
    a.release("x")
    admitted = 0
    for _ in range(10):
        if a.admit("x", 100.0) is None:
            a.release("x")
            admitted += 1
    assert admitted == 4


def test_refused_calls_do_not_count_and_limits_must_be_positive():
    a = Admission(Limits(max_concurrent=1, per_client=1, rate=1000, burst=1000))
    assert a.admit("x", 0.0) is None
    assert a.admit("x", 0.0) is not None
    a.release("x")
    assert a.running == 0
    with pytest.raises(ValueError):
        Admission(Limits(max_concurrent=0))


def test_the_client_is_the_peers_address():
    assert client_of("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert client_of("ipv6:[::1]:5000") == "::1"
    assert client_of("unix:/tmp/s") == "unix:/tmp/s"
