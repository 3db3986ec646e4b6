"""The JobManager's split assignment for connector sources (jobmanager/connectors/coordinator.py)
and the built-in enumerators (sluice/connectors/enumerators.py), driven by scripted requests,
checkpoint triggers and lookups: no I/O, no clock."""

from __future__ import annotations

import pytest

from jobmanager.connectors import lookups
from jobmanager.connectors.coordinator import SourceCoordinator, SourceCoordinators, SplitRequestError
from sluice.connectors import ConnectorConfigError, DirectorySplitEnumerator, SourceSplit, StaticSplitEnumerator
from sluice.connectors.enumerators import RedisStreamEnumerator, spec_of


def static(n: int, assignment: str = "balanced") -> dict:
    return spec_of(StaticSplitEnumerator([SourceSplit(f"s{i}", {"n": i}) for i in range(n)], assignment))


def ids(assignment) -> list[str]:
    return [s["id"] for s in assignment.splits]


def test_balanced_gives_one_split_per_idle_request_and_says_when_no_more_come():
    c = SourceCoordinator.create("src", 2, static(3))
    a = c.request(0, received=0, last_checkpoint=0, idle=True)
    assert (a.first, ids(a), a.no_more_splits) == (0, ["s0"], False)
    assert ids(c.request(0, 1, 0, idle=False)) == []  # busy: nothing more yet
    assert ids(c.request(1, 0, 0, idle=True)) == ["s1"]
    last = c.request(0, 1, 0, idle=True)
    assert ids(last) == ["s2"] and last.no_more_splits  # the list is exhausted and this is the end of its log
    assert c.request(1, 1, 0, idle=True).no_more_splits


def test_an_answer_lost_on_the_way_is_sent_again():
    c = SourceCoordinator.create("src", 1, static(2))
    assert ids(c.request(0, 0, 0, True)) == ["s0"]
    again = c.request(0, 0, 0, True)  # the reader never got it: it still holds 0
    assert (again.first, ids(again)) == (0, ["s0"])


def test_hash_assigns_every_split_to_its_owner_at_once():
    c = SourceCoordinator.create("src", 2, static(6, "hash"))
    got = [set(ids(c.request(s, 0, 0, idle=False))) for s in (0, 1)]
    assert got[0] | got[1] == {f"s{i}" for i in range(6)} and not got[0] & got[1]
    again = SourceCoordinator.create("src", 2, static(6, "hash"))
    assert set(ids(again.request(0, 0, 0, False))) == got[0]  # stable: crc32 of the id


def test_the_valve_holds_new_assignments_until_the_reader_snapshotted_the_triggered_checkpoint():
    c = SourceCoordinator.create("src", 1, static(3))
    assert ids(c.request(0, 0, 0, True)) == ["s0"]
    c.checkpoint_triggered(5)
    assert ids(c.request(0, 1, last_checkpoint=4, idle=True)) == []  # not past barrier 5 yet
    assert ids(c.request(0, 1, last_checkpoint=5, idle=True)) == ["s1"]
    state = c.state_of(5)
    assert state is not None and [[s["id"] for s in log] for log in state["assigned"]] == [["s0"]]


def test_a_restore_from_a_checkpoint_sends_again_what_was_assigned_after_it():
    spec = static(3)
    c = SourceCoordinator.create("src", 1, spec)
    assert ids(c.request(0, 0, 0, True)) == ["s0"]
    c.checkpoint_triggered(1)
    assert ids(c.request(0, 1, 1, True)) == ["s1"]  # assigned after checkpoint 1
    restored = SourceCoordinators.build({"src": (1, spec)}, {"src": c.state_of(1)}, 1).by_operator["src"]
    # the reader restored from checkpoint 1 holds one assignment; s1 is pending again in the enumerator
    assert ids(restored.request(0, 1, 1, True)) == ["s1"]
    assert ids(restored.request(0, 2, 1, True)) == ["s2"]
    assert restored.request(0, 3, 1, True).no_more_splits


def test_a_reader_claiming_more_than_was_assigned_or_another_parallelism_is_refused():
    c = SourceCoordinator.create("src", 1, static(1))
    with pytest.raises(SplitRequestError, match="holds 3 assignments"):
        c.request(0, 3, 0, True)
    with pytest.raises(SplitRequestError, match="outside"):
        c.request(1, 0, 0, True)
    c.request(0, 0, 0, True)
    c.checkpoint_triggered(2)
    with pytest.raises(SplitRequestError, match="parallelism 1 in checkpoint 2, now at 2"):
        SourceCoordinators.build({"src": (2, static(1))}, {"src": c.state_of(2)}, 2)


def test_a_directory_is_listed_off_the_core_and_later_files_are_assigned():
    spec = spec_of(DirectorySplitEnumerator("/in", ".jsonl", interval_s=1.0))
    sources = SourceCoordinators.build({"src": (1, spec)}, {}, 0)
    (lookup,) = sources.lookups(now=0.0)
    assert lookup.what == {"list": "/in", "suffix": ".jsonl"}
    assert sources.lookups(now=0.5) == []  # one listing at a time
    sources.on_discovered(lookup, ["/in/a.jsonl", "/in/.b.jsonl"], now=0.5)
    c = sources.by_operator["src"]
    a = c.request(0, 0, 0, True)
    assert a.splits == [{"id": "a.jsonl", "data": {"path": "/in/a.jsonl"}}] and not a.no_more_splits
    assert sources.lookups(now=1.0) == []  # the interval runs from the last listing
    (lookup,) = sources.lookups(now=1.6)
    sources.on_discovered(lookup, ["/in/a.jsonl", "/in/b.jsonl"], now=1.6)
    assert ids(c.request(0, 1, 0, True)) == ["b.jsonl"]
    (lookup,) = sources.lookups(now=3.0)
    sources.on_discovered(lookup, None, now=3.0)  # a failed listing is asked again
    assert len(sources.lookups(now=3.1)) == 1


def test_a_directory_without_interval_is_listed_once_and_bounded():
    spec = spec_of(DirectorySplitEnumerator("/in"))
    sources = SourceCoordinators.build({"src": (1, spec)}, {}, 0)
    c = sources.by_operator["src"]
    assert not c.request(0, 0, 0, True).no_more_splits  # not listed yet
    (lookup,) = sources.lookups(now=0.0)
    sources.on_discovered(lookup, ["/in/a"], now=0.0)
    assert sources.lookups(now=100.0) == []
    a = c.request(0, 0, 0, True)
    assert ids(a) == ["a"] and a.no_more_splits


def test_only_built_in_enumerators_with_valid_settings_travel():
    class Mine(StaticSplitEnumerator):
        pass

    with pytest.raises(TypeError, match="only the built-in enumerators"):
        spec_of(Mine([]))
    with pytest.raises(ConnectorConfigError, match="unique"):
        StaticSplitEnumerator([SourceSplit("a"), SourceSplit("a")])
    with pytest.raises(ConnectorConfigError, match="assignment"):
        spec_of(StaticSplitEnumerator([], assignment="random"))
    with pytest.raises(ConnectorConfigError, match="interval_s"):
        spec_of(DirectorySplitEnumerator("/in", interval_s=0.0))


def test_redis_streams_are_found_by_pattern_and_keep_their_reader():
    spec = spec_of(RedisStreamEnumerator("redis://127.0.0.1:1/0", "clicks:*", interval_s=2.0, start_id="5-0"))
    sources = SourceCoordinators.build({"src": (2, spec)}, {}, 0)
    (lookup,) = sources.lookups(now=0.0)
    assert lookup.what == {"redis_streams": "redis://127.0.0.1:1/0", "pattern": "clicks:*"}
    sources.on_discovered(lookup, ["clicks:a", "clicks:b", "clicks:c"], now=0.0)
    c = sources.by_operator["src"]
    first = [c.request(s, 0, 0, idle=False).splits for s in (0, 1)]
    assert sorted(s["id"] for got in first for s in got) == ["clicks:a", "clicks:b", "clicks:c"]
    assert all(s["data"] == {"stream": s["id"], "after": "5-0"} for got in first for s in got)
    (lookup,) = sources.lookups(now=2.5)
    sources.on_discovered(lookup, ["clicks:a", "clicks:d"], now=2.5)  # a stream created while the job runs
    later = [c.request(s, len(first[s]), 0, idle=False).splits for s in (0, 1)]
    assert [s["id"] for got in later for s in got] == ["clicks:d"]
    with pytest.raises(ConnectorConfigError, match="url"):
        spec_of(RedisStreamEnumerator("http://x", "a*"))


def test_the_lookups_list_a_directory_and_refuse_what_they_do_not_know(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / ".b.txt").write_text("x")
    (tmp_path / "c.csv").write_text("x")
    assert lookups.run({"list": str(tmp_path), "suffix": ".txt"}) == [str(tmp_path / "a.txt")]
    with pytest.raises(ValueError, match="unknown lookup"):
        lookups.run({"http": "http://example.com"})
