"""Fixtures of the cluster tiers (every test under tests/integration/, security/ included).

- ``shared_cluster``: ONE secured cluster per pytest session (1 JobManager, 2 TaskManagers x 3
  slots, real Spark, on the session's ZooKeeper from tests/conftest.py), started once for every
  module that does not need a cluster of another shape.
- ``cluster``: the shared cluster for one test. Before the test it is healed
  (``LocalCluster.heal``: processes a test killed are restarted by the cluster's supervisor
  and waited for, extra ones a test started are stopped, every slot is free again); after the
  test every job it left running is cancelled (the no-job-left guard), so the next test finds
  the cluster as it started.
- ``ha_shared_cluster`` / ``ha_cluster``: the same for the chaos tier's leader kills: ONE cluster
  of two JobManagers, 2 TaskManagers x 2 slots, on its own embedded ZooKeeper (killed by a test)
  with 4 s ZooKeeper sessions; the supervisor restarts the JobManagers and the ZooKeeper a test
  killed, and heal() waits for them before the next test.

A module that needs another shape (two JobManagers, options, an --insecure cluster, its own
ZooKeeper) starts its own with ``running_cluster`` and says why. Each start counts against its
tier's budget (``CLUSTER_START_BUDGET``): the session fails when a tier starts more clusters
than its budget, so a new module joins the shared cluster instead of paying ~20 s per start.
The helpers every module uses (waits, job submission, output reading, TaskManager kills) live in
harness.py and page_view_jobs.py; no test module imports another.
"""

from __future__ import annotations

import uuid

import harness
import pytest
from harness import HA_SESSION_TIMEOUT, LocalCluster, running_cluster

SHARED_TASKMANAGERS, SHARED_SLOTS = 2, 3

# Cluster starts per tier (a `pytest -m <tier>` session); `pytest` of everything: their sum.
# cluster: the shared one, the fuzz target, the plaintext fencing and TLS clusters. chaos: the
# shared one, the shared HA one, test_cluster_restart 3 (its cluster, resumed twice),
# test_external_spark 2, and one each for the dashboard, orphans and poison, slots.
CLUSTER_START_BUDGET = {"cluster": 4, "chaos": 10}


def _session_cluster(directory, **kwargs):
    """The body of a session-scoped shared cluster fixture (keyword arguments as LocalCluster's)."""
    with running_cluster(directory, **kwargs) as c:
        yield c
        c.heal()  # the supervisor's restarts recorded, for `cluster stop` to end them


def _for_one_test(c: LocalCluster):
    """The body of a per-test fixture on a shared cluster: healed before, no job left after."""
    c.heal()
    yield c
    c.cancel_running()


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory, zookeeper):
    yield from _session_cluster(
        tmp_path_factory.mktemp("shared") / "cluster",
        taskmanagers=SHARED_TASKMANAGERS,
        slots=SHARED_SLOTS,
        zookeeper=zookeeper.connect_string,
        cluster_id=f"shared-{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture
def cluster(shared_cluster: LocalCluster):
    yield from _for_one_test(shared_cluster)


@pytest.fixture(scope="session")
def ha_shared_cluster(tmp_path_factory):
    yield from _session_cluster(
        tmp_path_factory.mktemp("ha") / "cluster",
        taskmanagers=2,
        slots=2,
        jobmanagers=2,
        zk_session_timeout=HA_SESSION_TIMEOUT,
    )


@pytest.fixture
def ha_cluster(ha_shared_cluster: LocalCluster):
    yield from _for_one_test(ha_shared_cluster)


def _tier(config: pytest.Config) -> str | None:
    expression = (config.getoption("markexpr") or "").strip()
    return expression if expression in CLUSTER_START_BUDGET else None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    tier = _tier(session.config)
    budget = CLUSTER_START_BUDGET[tier] if tier else sum(CLUSTER_START_BUDGET.values())
    starts = harness.CLUSTER_STARTS
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and starts:
        reporter.write_line(f"cluster starts this session: {len(starts)} (budget {budget})")
    if len(starts) > budget:
        where = "\n  ".join(starts)
        message = (
            f"{len(starts)} cluster starts, over the budget of {budget} for "
            f"{'tier ' + tier if tier else 'the whole suite'} (tests/integration/conftest.py "
            f"CLUSTER_START_BUDGET): use the shared `cluster` fixture, or raise the budget saying why.\n  {where}"
        )
        if reporter is not None:
            reporter.write_line(message, red=True)
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
