"""What the job-graph tests (tests/unit/test_job_graph_*.py) share: a fixture that keeps `sluice run`'s
settings out of them, the bodies their jobs run, readers of a graph's edges and chains, and the
field a JobValidationError names."""

import pytest

from sluice import graph
from sluice.api import environment as env_module
from sluice.graph import JobValidationError


@pytest.fixture(autouse=True)
def no_run_context():
    """`sluice run` settings live in a module global; keep the tests independent of it."""
    saved = dict(env_module._context)
    env_module._context.clear()
    yield
    env_module._context.clear()
    env_module._context.update(saved)


def upper(df):
    return df


def gen(df):
    return df


def chains_of(job):
    return [(c.operator_ids, c.parallelism) for c in graph.build_chains(job)]


def edges_of(job):
    return [(e.source, e.target, graph.partitioning_of(e), ",".join(e.keys)) for e in job.edges]


def field_of(job, **kwargs) -> str:
    with pytest.raises(JobValidationError) as info:
        graph.validate(job, **kwargs)
    assert str(info.value).startswith(info.value.field + ": ")
    return info.value.field
