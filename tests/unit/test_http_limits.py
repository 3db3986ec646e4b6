"""Per-client limits of the HTTP servers (sluice/http_limits.py): the pure counts, and a real
uvicorn server on the loopback under idle and greedy clients."""

import socket
import time
import urllib.request

import pytest
from helpers import wait_until

from sluice.http_limits import WARN_EVERY, ClientLimits
from sluice.http_server import HttpServer


def test_a_client_gets_its_limit_and_others_are_untouched():
    now = [0.0]
    limits = ClientLimits(2, lambda: now[0])
    assert limits.admit("a") and limits.admit("a")
    assert not limits.admit("a")
    assert limits.admit("b")
    limits.release("a")
    assert limits.admit("a")
    limits.release("b")
    assert "b" not in limits.open
    assert limits.should_warn("a") and not limits.should_warn("a")
    now[0] += WARN_EVERY
    assert limits.should_warn("a")
    with pytest.raises(ValueError):
        ClientLimits(0, time.monotonic)


async def _hello(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_idle_and_greedy_clients_cannot_lock_others_out():
    server = HttpServer(_hello, "127.0.0.1", 0, name="test", max_connections=64, per_client=4, request_timeout=0.5)
    server.start()
    socks = []
    try:
        socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(10)]
        # beyond its 4 the client's new connections are closed at once, before any request
        wait_until(lambda: sum(_closed_by_server(s) for s in socks) >= 6, timeout=5, message="6 refused")
        # the 4 admitted ones sent nothing: closed when the request deadline passed
        wait_until(lambda: all(_closed_by_server(s) for s in socks), timeout=5, message="idle ones closed")
        with urllib.request.urlopen(f"http://{server.address}/", timeout=5) as r:
            assert r.read() == b"hello"
        # a client trickling a request's head is closed at the deadline too
        slow = socket.create_connection(("127.0.0.1", server.port))
        socks.append(slow)
        t0 = time.monotonic()
        for part in (b"GET / HTTP/1.1\r\n", b"Host: x\r\n"):
            slow.sendall(part)
            time.sleep(0.2)
        wait_until(lambda: _closed_by_server(slow), timeout=5, message="the trickling client closed")
        assert time.monotonic() - t0 < 3
        # and a whole request on a kept-alive connection still works after one response
        with urllib.request.urlopen(f"http://{server.address}/", timeout=5) as r:
            assert r.status == 200
    finally:
        for s in socks:
            s.close()
        server.stop()
