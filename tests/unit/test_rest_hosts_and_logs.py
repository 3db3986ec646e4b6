"""Who may reach the REST API beyond its bearer token (jobmanager/rest/security.py): the Host
headers it answers to, so that a page whose DNS name was rebound to this machine cannot read or
change jobs through a visitor's browser, and TaskManager logs (what jobs print) only with the
token on a secured cluster unless rest.logs.public says otherwise."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from rest_fakes import JOB, TOKEN, FakeDispatcher, client_for

from jobmanager.rest.app import create_app
from sluice import option_types

LOG = "/taskmanagers/tm-0/log?lines=3"
BEARER = {"Authorization": "Bearer " + TOKEN.decode()}


def at(dispatcher: FakeDispatcher, base_url: str, **kwargs) -> TestClient:
    app = create_app(dispatcher, is_leader=lambda: True, leader_rest=lambda: None, **kwargs)  # type: ignore[arg-type]  # a duck-typed fake
    return TestClient(app, base_url=base_url, raise_server_exceptions=False)


def test_a_rebound_dns_name_reaches_nothing_on_a_loopback_api():
    dispatcher = FakeDispatcher()
    evil = at(dispatcher, "http://attacker.example:8081")  # the page's own origin: Origin and Host agree
    same_origin = {"Origin": "http://attacker.example:8081"}
    read = evil.get("/overview", headers=same_origin)
    assert read.status_code == 421 and "rest.allowed-hosts" in read.json()["errors"][0]
    assert evil.patch(f"/jobs/{JOB}?mode=cancel", headers=same_origin).status_code == 421
    assert dispatcher.cancelled == []


@pytest.mark.parametrize("base_url", ["http://localhost:8081", "http://127.0.0.1:8081", "http://[::1]:8081"])
def test_loopback_names_and_addresses_are_answered(base_url):
    assert at(FakeDispatcher(), base_url).get("/overview").status_code == 200


def test_allowed_hosts_add_names_and_a_wildcard_bind_answers_any_host():
    dispatcher = FakeDispatcher()
    allowed = option_types.host_names("Sluice.Example")
    assert at(dispatcher, "http://sluice.example:8081", allowed_hosts=allowed).get("/overview").status_code == 200
    assert at(dispatcher, "http://localhost:8081", allowed_hosts=allowed).get("/overview").status_code == 200
    assert at(dispatcher, "http://other.example", allowed_hosts=allowed).get("/overview").status_code == 421
    anywhere = at(dispatcher, "http://jobmanager:8081", bind_address="0.0.0.0")
    assert anywhere.get("/overview").status_code == 200
    assert at(dispatcher, "http://x.example", allowed_hosts="*").get("/overview").status_code == 200


def test_a_secured_cluster_serves_taskmanager_logs_only_with_the_token():
    dispatcher = FakeDispatcher()
    secured = client_for(dispatcher, token=TOKEN, scheme="https")
    refused = secured.get(LOG)
    assert refused.status_code == 401 and "read TaskManager logs" in refused.json()["errors"][0]
    assert secured.get(LOG, headers={"Authorization": "Bearer wrong"}).status_code == 401
    allowed = secured.get(LOG, headers=BEARER)
    assert allowed.status_code == 200 and allowed.text.splitlines() == ["line 7", "line 8", "line 9"]


def test_without_a_token_file_logs_stay_off_rest_unless_made_public():
    dispatcher = FakeDispatcher()
    no_token = client_for(dispatcher, scheme="https").get(LOG)
    assert no_token.status_code == 403 and "log.file" in no_token.json()["errors"][0]
    public = client_for(dispatcher, scheme="https", logs_public=True).get(LOG)
    assert public.status_code == 200
    assert client_for(dispatcher).get(LOG).status_code == 200  # --insecure: open, as its gRPC port is
