"""Pipelined regions and failover-region selection on several graph shapes (a pure core)."""

from __future__ import annotations

import pytest

from jobmanager.scheduler.pipelined_regions import (
    RegionEdge,
    pipelined_regions,
    pointwise_targets,
    regions_to_restart,
)


def subtasks(chain: str, *indexes: int) -> set[tuple[str, int]]:
    return {(chain, i) for i in indexes}


def test_an_embarrassingly_parallel_job_has_one_region_per_subtask_index():
    parallelism = {"source": 3, "map": 3, "sink": 3}
    edges = [RegionEdge("source", "map", True, False), RegionEdge("map", "sink", True, False)]
    regions = pipelined_regions(parallelism, edges)
    assert [set(r) for r in regions] == [
        subtasks("source", 0) | subtasks("map", 0) | subtasks("sink", 0),
        subtasks("source", 1) | subtasks("map", 1) | subtasks("sink", 1),
        subtasks("source", 2) | subtasks("map", 2) | subtasks("sink", 2),
    ]
    # a failure restarts only its own pipeline: a quarter or less of the tasks for 4 pipelines
    [only] = regions_to_restart(parallelism, edges, ("map", 1))
    assert only == regions[1]


def test_an_all_to_all_exchange_joins_everything_it_connects():
    parallelism = {"source": 2, "counts": 3}
    regions = pipelined_regions(parallelism, [RegionEdge("source", "counts", False, False)])
    assert len(regions) == 1 and len(regions[0]) == 5
    assert regions_to_restart(parallelism, [RegionEdge("source", "counts", False, False)], ("source", 0)) == regions


def test_independent_pipelines_stay_apart():
    parallelism = {"a": 1, "a-sink": 1, "b": 2, "b-sink": 1}
    edges = [RegionEdge("a", "a-sink", False, False), RegionEdge("b", "b-sink", False, False)]
    regions = pipelined_regions(parallelism, edges)
    assert [set(r) for r in regions] == [
        subtasks("a", 0) | subtasks("a-sink", 0),
        subtasks("b", 0, 1) | subtasks("b-sink", 0),
    ]
    assert regions_to_restart(parallelism, edges, ("b-sink", 0)) == [regions[1]]


def test_pointwise_edges_between_different_parallelisms():
    assert [list(pointwise_targets(2, 4, i)) for i in range(2)] == [[0, 1], [2, 3]]
    assert [list(pointwise_targets(4, 2, i)) for i in range(4)] == [[0], [0], [1], [1]]
    assert [list(pointwise_targets(3, 2, i)) for i in range(3)] == [[0], [0], [1]]
    regions = pipelined_regions({"p": 4, "c": 2}, [RegionEdge("p", "c", True, False)])
    assert [set(r) for r in regions] == [subtasks("p", 0, 1) | subtasks("c", 0), subtasks("p", 2, 3) | subtasks("c", 1)]


def test_a_blocking_exchange_cuts_regions_and_a_restart_flows_downstream():
    # batch: read -> (blocking hash) -> count -> (blocking) -> top
    parallelism = {"read": 2, "count": 2, "top": 1}
    edges = [RegionEdge("read", "count", False, True), RegionEdge("count", "top", False, True)]
    regions = pipelined_regions(parallelism, edges)
    assert len(regions) == 5  # every subtask alone: nothing is pipelined
    # a failed reader is re-run, and everything that read its result runs again after it
    restart = regions_to_restart(parallelism, edges, ("read", 1))
    assert [set(r) for r in restart] == [
        subtasks("read", 1),
        subtasks("count", 0),
        subtasks("count", 1),
        subtasks("top", 0),
    ]
    # a failed top re-runs alone: its inputs are still on disk
    assert [set(r) for r in regions_to_restart(parallelism, edges, ("top", 0))] == [subtasks("top", 0)]


def test_backtracking_reruns_a_producer_whose_result_was_lost():
    parallelism = {"read": 2, "count": 2, "top": 1}
    edges = [RegionEdge("read", "count", True, True), RegionEdge("count", "top", False, True)]
    # count 0 failed, and the TaskManager that held read 0's result died with it
    restart = regions_to_restart(parallelism, edges, ("count", 0), unavailable=[("read", 0)])
    assert [set(r) for r in restart] == [subtasks("read", 0), subtasks("count", 0), subtasks("top", 0)]
    # read 1's result is still there: neither it nor count 1 runs again
    assert all(("read", 1) not in r and ("count", 1) not in r for r in restart)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown chain 'ghost'"):
        pipelined_regions({"a": 1}, [RegionEdge("a", "ghost", True, False)])
    with pytest.raises(ValueError, match="parallelism must be >= 1"):
        pipelined_regions({"a": 0}, [])
    with pytest.raises(ValueError, match="in no region"):
        regions_to_restart({"a": 1}, [], ("a", 5))
