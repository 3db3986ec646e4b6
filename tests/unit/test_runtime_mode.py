"""BATCH mode at submit: the option, the API, and the refusal of unbounded sources."""

from __future__ import annotations

import pytest

from sluice import graph, job_options
from sluice.api import StreamExecutionEnvironment


def env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment()


def test_set_runtime_mode_writes_the_option_and_refuses_other_modes():
    e = env().set_runtime_mode("batch")
    assert e._config["execution.runtime-mode"] == "BATCH"
    with pytest.raises(ValueError, match='"STREAMING" or "BATCH"'):
        env().set_runtime_mode("micro-batch")


def test_execution_options_read_typed():
    x = job_options.execution({"execution.runtime-mode": "BATCH", "execution.batch.speculative.enabled": "true"})
    assert (x.batch, x.region_failover, x.speculative, x.multiplier, x.min_finished) == (True, True, True, 1.5, 0.75)
    assert not job_options.execution({"jobmanager.execution.failover-strategy": "full"}).region_failover


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("execution.runtime-mode", "streamy", "streaming, batch"),
        ("jobmanager.execution.failover-strategy", "partial", "region, full"),
        ("execution.batch.speculative.multiplier", "0.5", ">= 1.0"),
        ("jobmanager.execution.failover-stratgy", "region", "did you mean 'jobmanager.execution.failover-strategy'"),
    ],
)
def test_bad_execution_options_name_the_key(key, value, message):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")) as err:
        env().set_config(key, value)
    assert message in str(err.value)


def test_batch_refuses_an_unbounded_source_naming_it():
    e = env().set_runtime_mode("BATCH")
    e.from_generator(lambda ids: ids, name="ticks").print()
    with pytest.raises(graph.JobValidationError, match="source 'ticks' is unbounded .*generator without count="):
        graph.validate(e.get_job_graph("j"), check_paths=False)


def test_batch_refuses_a_monitored_directory(tmp_path):
    e = env().set_runtime_mode("BATCH")
    e.from_files(str(tmp_path), format="text", monitor_interval_ms=1000, name="tail").print()
    with pytest.raises(graph.JobValidationError, match="monitors its directory"):
        graph.validate(e.get_job_graph("j"), check_paths=False)


def test_batch_accepts_bounded_sources(tmp_path):
    e = env().set_runtime_mode("BATCH")
    e.from_generator(lambda ids: ids, count=10, name="ten").print()
    e.from_collection([{"a": 1}]).print()
    job = e.get_job_graph("j")
    graph.validate(job, check_paths=False)
    assert graph.is_batch(job)
