"""The REST API and the web dashboard on a real cluster (docs/monitoring.md).

One TLS cluster for the module (2 JobManagers, 2 TaskManagers x 2 slots), its JobManagers
started with a bearer token file, as a secured production cluster runs: the REST API is HTTPS
with the JobManager's certificate (httpx checks it against the cluster's CA; headless Chromium
is told to ignore certificate errors, as it cannot be given a CA without a system store), and
changing a job needs the token. An `--insecure` cluster would test less: the token rule only
exists on a secured one.

Two jobs: endless_counts (a slowed generator keyed count, checkpointing every 500 ms) keeps
running; failing_body fails with a traceback. The browser checks what a person sees; httpx
checks the JSON, the errors, the bearer token, a savepoint, the standby's redirect, and, last
(it kills the leading JobManager), a failover: the other JobManager's REST port serves the job.
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import uuid

import httpx
import pytest
from harness import JOBS, REPO, running_cluster, sluice
from helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOKEN = "rest-token-" + uuid.uuid4().hex
SCREENSHOT = os.path.join(REPO, "docs", "images", "dashboard.png")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    """Its own cluster: two JobManagers (the dashboard follows a failover) and a REST token file."""
    directory = tmp_path_factory.mktemp("cluster")
    token_file = directory / "rest.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with running_cluster(
        directory / "c",
        jobmanagers=2,
        taskmanagers=2,
        slots=2,
        zk_session_timeout=4.0,
        zookeeper=zookeeper.connect_string,
        cluster_id=f"dashboard-{uuid.uuid4().hex[:8]}",
        options={"security.token.file": str(token_file)},
    ) as c:
        yield c


class Jobs:
    def __init__(self, running: str, failed: str) -> None:
        self.running, self.failed = running, failed


@pytest.fixture(scope="module")
def jobs(cluster, tmp_path_factory) -> Jobs:
    out = tmp_path_factory.mktemp("endless")
    running = cluster.run(os.path.join(JOBS, "endless_counts.py"), str(out / "out"), "500", parallelism=2)
    proc = sluice("run", os.path.join(JOBS, "failing_body.py"), "--cluster-dir", cluster.dir, check=False)
    assert proc.returncode == 1, proc.stderr
    with cluster.client() as client:
        failed = max((j for j in client.list() if j.name == "failing_body"), key=lambda j: j.submitted_ms).job_id
    return Jobs(running, failed)


def rest_of(cluster, grpc_address: str) -> str:
    return next(p["rest"] for p in cluster.info["processes"] if p["address"] == grpc_address)


def leader_rest(cluster) -> str:
    with cluster.client() as client:
        return rest_of(cluster, client.cluster().leader)


def http(cluster) -> httpx.Client:
    context = ssl.create_default_context(cafile=cluster.info["tls"]["ca"])
    return httpx.Client(verify=context, timeout=15)


@pytest.fixture(scope="module")
def api(cluster, jobs):
    """An httpx client and the leader's REST base URL, once the running job has a checkpoint."""
    base = f"https://{leader_rest(cluster)}"
    with http(cluster) as client:

        def checkpointed():
            body = client.get(f"{base}/jobs/{jobs.running}/checkpoints").json()
            return body["counts"]["completed"] >= 1

        wait_until(checkpointed, timeout=120, interval=0.5, message="a completed checkpoint of endless_counts")
        yield client, base


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


# -- the dashboard in a browser --------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("Chromium and chromedriver are missing: `make system-deps` installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--ignore-certificate-errors",  # the JobManager's certificate is from the cluster's own CA
        "--window-size=1440,1200",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout=60, message=""):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page refreshes every 2 s: an element may be replaced between finding and reading it
    return WebDriverWait(
        driver, timeout, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException]
    ).until(condition, message)


def texts(driver, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def test_dashboard_shows_jobs_graph_checkpoints_exceptions_and_taskmanagers(
    cluster, jobs, api, browser, tmp_path_factory
):
    from selenium.webdriver.common.by import By

    client, base = api
    shots = tmp_path_factory.mktemp("screenshots")
    browser.get(f"{base}/")

    # the overview: the running and the failed job, the TaskManagers
    row = f'#jobs tr[data-job-id="{jobs.running}"]'
    wait(browser, lambda d: "endless_counts" in d.find_element(By.CSS_SELECTOR, row).text, message="the job list")
    assert browser.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "RUNNING"
    failed_row = browser.find_element(By.CSS_SELECTOR, f'#jobs tr[data-job-id="{jobs.failed}"]')
    assert "failing_body" in failed_row.text and "FAILED" in failed_row.text
    tm_ids = sorted(t["id"] for t in client.get(f"{base}/taskmanagers").json()["taskmanagers"])
    wait(
        browser,
        lambda d: (
            sorted(
                e.get_attribute("data-taskmanager-id")
                for e in d.find_elements(By.CSS_SELECTOR, "#taskmanagers tr[data-taskmanager-id]")
            )
            == tm_ids
        ),
        message="both TaskManagers listed",
    )
    assert browser.find_element(By.CSS_SELECTOR, '#overview [data-field="taskmanagers"] .card-value').text == "2"
    browser.save_screenshot(str(shots / "overview.png"))

    # the running job: one node per chain with its name, a completed checkpoint, its subtasks
    vertices = client.get(f"{base}/jobs/{jobs.running}").json()["vertices"]
    browser.find_element(By.CSS_SELECTOR, f"{row} a.job-link").click()
    wait(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".graph-node[data-chain-id]")) == len(vertices),
        message="one graph node per chain",
    )
    for v in vertices:
        node = browser.find_element(By.CSS_SELECTOR, f'.graph-node[data-chain-id="{v["id"]}"]')
        assert node.find_element(By.CSS_SELECTOR, ".node-name").text == v["name"]
        assert f"parallelism {v['parallelism']}" in node.find_element(By.CSS_SELECTOR, ".node-info").text
        assert node.get_attribute("data-backpressure") in ("ok", "low", "high")
    assert "HASH" in texts(browser, ".graph-edge .edge-label")[0]
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, '#checkpoints tr[data-checkpoint-id][data-status="COMPLETED"]'),
        message="a completed checkpoint row",
    )
    wait(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, '#subtasks tr[data-subtask][data-state="RUNNING"]')) == 4,
        message="4 running subtasks",
    )
    subtask_rows = texts(browser, "#subtasks tr[data-subtask]")
    assert any(tm in text for text in subtask_rows for tm in tm_ids), subtask_rows
    browser.save_screenshot(str(shots / "job.png"))
    if not os.path.exists(SCREENSHOT):  # the README's picture, taken once
        os.makedirs(os.path.dirname(SCREENSHOT), exist_ok=True)
        shutil.copy(shots / "job.png", SCREENSHOT)

    # the failed job's traceback
    browser.get(f"{base}/#/jobs/{jobs.failed}")
    wait(
        browser,
        lambda d: "bad record in explode()" in d.find_element(By.CSS_SELECTOR, "#exceptions .traceback").text,
        message="the failed job's traceback",
    )
    assert "Traceback" in browser.find_element(By.CSS_SELECTOR, "#exceptions .traceback").text
    browser.save_screenshot(str(shots / "failed.png"))

    # a TaskManager's log: on a secured cluster only with the bearer token, which the page does not hold
    browser.get(f"{base}/#/taskmanagers")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#taskmanagers a.taskmanager-link"), message="TM list")
    browser.find_element(By.CSS_SELECTOR, "#taskmanagers a.taskmanager-link").click()
    wait(
        browser,
        lambda d: "read TaskManager logs" in d.find_element(By.CSS_SELECTOR, "#taskmanager-log-error").text,
        message="the log view's explanation that the token is needed",
    )
    browser.save_screenshot(str(shots / "log.png"))
    print(f"screenshots in {shots}")


# -- the REST API ------------------------------------------------------------------------------------
def test_rest_api_reads_the_running_and_the_failed_job(cluster, jobs, api):
    client, base = api
    overview = client.get(f"{base}/overview").json()
    assert overview["taskmanagers"] == 2 and overview["slots-total"] == 4
    assert overview["jobs-running"] >= 1 and overview["jobs-failed"] >= 1 and overview["sluice-version"]

    listed = {j["jid"]: j for j in client.get(f"{base}/jobs/overview").json()["jobs"]}
    assert listed[jobs.running]["state"] == "RUNNING" and listed[jobs.running]["tasks"]["running"] == 4
    assert listed[jobs.failed]["state"] == "FAILED" and listed[jobs.failed]["end-time"] > 0

    job = client.get(f"{base}/jobs/{jobs.running}").json()
    assert job["name"] == "endless_counts" and job["state"] == "RUNNING"
    assert [v["parallelism"] for v in job["vertices"]] == [2, 2]
    [edge] = job["plan"]["edges"]
    assert edge["partitioning"] == "HASH" and edge["keys"] == ["k"]
    assert (edge["source"], edge["target"]) == (job["vertices"][0]["id"], job["vertices"][1]["id"])

    checkpoints = client.get(f"{base}/jobs/{jobs.running}/checkpoints").json()
    latest = checkpoints["latest"]["completed"]
    assert latest["status"] == "COMPLETED" and latest["num_acknowledged_subtasks"] == latest["num_subtasks"] == 4
    assert latest["state_size"] > 0 and latest["end_to_end_duration"] >= 0
    # incremental keyed state: the whole state a checkpoint holds, at least what it wrote itself
    assert latest["state_size"] >= latest["checkpointed_size"] > 0

    tm_ids = {t["id"] for t in client.get(f"{base}/taskmanagers").json()["taskmanagers"]}
    source = job["vertices"][0]["id"]

    def counted():
        vertex = client.get(f"{base}/jobs/{jobs.running}/vertices/{source}").json()
        return vertex if all(s["metrics"]["write-records"] > 0 for s in vertex["subtasks"]) else None

    vertex = wait_until(counted, timeout=60, interval=0.5, message="records out of both source subtasks")
    assert [s["subtask"] for s in vertex["subtasks"]] == [0, 1]
    assert all(s["status"] == "RUNNING" and s["taskmanager-id"] in tm_ids for s in vertex["subtasks"])
    pressure = client.get(f"{base}/jobs/{jobs.running}/vertices/{source}/backpressure").json()
    assert pressure["status"] == "ok" and pressure["backpressureLevel"] in ("ok", "low", "high")
    assert [s["subtask"] for s in pressure["subtasks"]] == [0, 1]
    assert all(0 <= s["ratio"] <= 1 and 0 <= s["busyRatio"] <= 1 for s in pressure["subtasks"])

    failed = client.get(f"{base}/jobs/{jobs.failed}/exceptions").json()
    assert "bad record in explode()" in failed["root-exception"] and "Traceback" in failed["root-exception"]
    assert failed["exceptionHistory"]["entries"][0]["exceptionName"].endswith("ValueError")

    taskmanagers = client.get(f"{base}/taskmanagers").json()["taskmanagers"]
    assert all(t["slotsNumber"] == 2 and t["timeSinceLastHeartbeat"] < 10_000 for t in taskmanagers)
    log_path = f"{base}/taskmanagers/{taskmanagers[0]['id']}/log"
    assert client.get(log_path).status_code == 401  # what jobs print: only with the token here
    log = client.get(log_path, params={"lines": 20}, headers=auth())
    assert log.status_code == 200 and 0 < len(log.text.splitlines()) <= 20
    assert log.headers["x-sluice-log-file"].startswith("taskmanager-")


def test_rest_api_errors(cluster, jobs, api):
    client, base = api
    unknown = "0" * 32
    cases = [
        (client.get(f"{base}/jobs/{unknown}"), 404, f"job '{unknown}' not found"),
        (client.get(f"{base}/jobs/{jobs.running}/vertices/nope"), 404, "vertex 'nope' not found"),
        (client.get(f"{base}/taskmanagers/tm-none/log", headers=auth()), 404, "taskmanager 'tm-none' not found"),
        (client.get(f"{base}/jobs/bad$id"), 400, "job id"),
        (client.get(f"{base}/jobs/{'a' * 100}"), 400, "job id"),
        (client.get(f"{base}/no/such/thing"), 404, "not found"),
        (
            client.post(f"{base}/jobs/{jobs.running}/savepoints", content=b"x" * (65 * 1024), headers=auth()),
            413,
            "limit",
        ),
        (
            client.post(f"{base}/jobs/{jobs.running}/savepoints", json={"target-directory": 5}, headers=auth()),
            400,
            "target-directory",
        ),
        (client.patch(f"{base}/jobs/{jobs.running}", params={"mode": "cancel"}), 401, "Authorization: Bearer"),
        (
            client.patch(
                f"{base}/jobs/{jobs.running}", params={"mode": "cancel"}, headers={"Authorization": "Bearer wrong"}
            ),
            401,
            "invalid bearer token",
        ),
        (client.patch(f"{base}/jobs/{jobs.failed}", params={"mode": "cancel"}, headers=auth()), 409, "ended"),
    ]
    for response, status, names in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert names in response.json()["errors"][0], response.text
    assert client.get(f"{base}/jobs/{jobs.running}").json()["state"] == "RUNNING"  # refused changes changed nothing
    assert client.get(f"{base}/docs").status_code == 404
    assert "/jobs/{job_id}/checkpoints" in client.get(f"{base}/openapi.json").json()["paths"]


def test_rest_savepoint_with_the_token(cluster, jobs, api, tmp_path):
    client, base = api
    response = client.post(
        f"{base}/jobs/{jobs.running}/savepoints", json={"target-directory": str(tmp_path / "sp")}, headers=auth()
    )
    assert response.status_code == 202, response.text
    request_id = response.json()["request-id"]

    def done():
        body = client.get(f"{base}/jobs/{jobs.running}/savepoints/{request_id}").json()
        return body if body["status"]["id"] == "COMPLETED" else None

    body = wait_until(done, timeout=90, interval=0.5, message="the savepoint to complete")
    assert body["savepoint-status"] == "COMPLETED", body
    assert os.path.isfile(os.path.join(body["operation"]["location"], "_metadata"))
    assert client.get(f"{base}/jobs/{jobs.running}").json()["state"] == "RUNNING"


def test_standby_redirects_and_takes_over_after_the_leader_is_killed(cluster, jobs, api):
    client, base = api
    with cluster.client() as grpc_client:
        leader = grpc_client.cluster().leader
    standby = next(p for p in cluster.info["processes"] if p["role"] == "jobmanager" and p["address"] != leader)
    redirect = client.get(f"https://{standby['rest']}/jobs/overview?x=1", follow_redirects=False)
    assert redirect.status_code == 307
    assert redirect.headers["location"] == f"{base}/jobs/overview?x=1"
    followed = client.get(f"https://{standby['rest']}/jobs/overview", follow_redirects=True)
    assert jobs.running in {j["jid"] for j in followed.json()["jobs"]}

    os.kill(next(p["pid"] for p in cluster.info["processes"] if p["address"] == leader), signal.SIGKILL)
    new_base = f"https://{standby['rest']}"

    def served():
        try:
            response = client.get(f"{new_base}/jobs/overview", follow_redirects=False)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        return {j["jid"]: j["state"] for j in response.json()["jobs"]}

    states = wait_until(served, timeout=90, interval=0.5, message="the standby's REST to serve the jobs as leader")
    assert jobs.running in states and jobs.failed in states
    cancel = client.patch(f"{new_base}/jobs/{jobs.running}", params={"mode": "cancel"}, headers=auth())
    assert cancel.status_code == 202, cancel.text
    wait_until(
        lambda: client.get(f"{new_base}/jobs/{jobs.running}").json()["state"] == "CANCELED",
        timeout=60,
        interval=0.5,
        message="the job CANCELED through the new leader's REST API",
    )
