"""Scripted event sequences against the pure CheckpointCoordinator; exact actions asserted."""

from __future__ import annotations

import pytest
from coordinator_scripts import ALL, SINK, SRC, ack, ack_all, handles, make, run_checkpoint, state

from jobmanager.checkpoint.coordinator import (
    Acknowledge,
    AckResult,
    CheckpointConfig,
    CheckpointCoordinator,
    CheckpointPersisted,
    CheckpointStats,
    CompletedCheckpoint,
    Decline,
    DiscardCheckpoint,
    FailJob,
    FinalCheckpointRequested,
    NotifyAborted,
    NotifyComplete,
    PersistCheckpoint,
    PersistFailed,
    Resume,
    Suspend,
    TasksLost,
    Tick,
    TriggerCheckpoint,
    full_size,
)
from jobmanager.checkpoint.id_counter import InMemoryCheckpointIDCounter
from sluice.states import AckOutcome, CheckpointStatus


def latest(c: CheckpointCoordinator) -> CompletedCheckpoint:
    """The latest completed checkpoint, which the test expects."""
    completed = c.latest_completed()
    assert completed is not None
    return completed


# -- triggering -------------------------------------------------------------------
def test_periodic_trigger_after_interval_to_sources_only():
    c = make(interval=10)
    assert c.handle(Tick(9.9)) == []
    assert c.handle(Tick(10.0)) == [TriggerCheckpoint(1, 10.0, SRC, False)]
    assert c.pending_id == 1
    assert c.handle(Tick(25.0)) == []  # one at a time
    ack_all(c, 1, 26.0)
    assert c.handle(CheckpointPersisted(1, 27.0)) == [NotifyComplete(1, ALL, False)]
    assert c.pending_id is None
    assert c.handle(Tick(27.0)) == [TriggerCheckpoint(2, 27.0, SRC, False)]  # 17s since the last trigger


def test_min_pause_counts_from_the_end_of_the_last_checkpoint():
    c = make(interval=10, min_pause=8, tolerable_failures=1)
    assert c.handle(Tick(10)) == [TriggerCheckpoint(1, 10, SRC, False)]
    ack_all(c, 1, 14)
    c.handle(CheckpointPersisted(1, 15))
    assert c.handle(Tick(20)) == []  # interval elapsed, pause not
    assert c.handle(Tick(22.9)) == []
    assert c.handle(Tick(23)) == [TriggerCheckpoint(2, 23, SRC, False)]
    c.handle(Decline(SRC[0], 2, "busy", 24))  # an abort ends a checkpoint too
    assert c.handle(Tick(31.9)) == []
    assert c.handle(Tick(33)) == [TriggerCheckpoint(3, 33, SRC, False)]


@pytest.mark.parametrize("interval", [None, 0, -5.0])
def test_disabled_interval_never_triggers_periodically(interval):
    c = make(interval=interval)
    assert [c.handle(Tick(t)) for t in (0, 10, 1e6)] == [[], [], []]
    assert c.handle(FinalCheckpointRequested(1e6 + 1)) == [TriggerCheckpoint(1, 1e6 + 1, ALL, True)]


# -- completion and acks --------------------------------------------------------------
def test_normal_completion_persists_before_announcing():
    c = make()
    c.handle(Tick(10))
    assert ack(c, SRC[0], 1, 11, size=5) == [AckResult(SRC[0], 1, AckOutcome.SUCCESS)]
    assert ack(c, SRC[1], 1, 11, size=6) == [AckResult(SRC[1], 1, AckOutcome.SUCCESS)]
    assert c.history() == [CheckpointStats(1, CheckpointStatus.IN_PROGRESS, 10, None, 11, 2, 3, "", 11)]
    assert ack(c, SINK[0], 1, 12, size=7) == [
        AckResult(SINK[0], 1, AckOutcome.SUCCESS),
        PersistCheckpoint(1, handles(1), False),
    ]
    assert c.history() == [CheckpointStats(1, CheckpointStatus.PERSISTING, 10, None, 18, 3, 3, "", 18)]
    assert c.latest_completed() is None
    assert c.handle(Tick(500)) == []  # PERSISTING never times out; nothing new is triggered
    assert c.handle(CheckpointPersisted(1, 501)) == [NotifyComplete(1, ALL, False)]
    done = CompletedCheckpoint(1, handles(1), 10, 501, 18, False)
    assert c.latest_completed() == done and c.completed() == [done]
    assert c.history() == [CheckpointStats(1, CheckpointStatus.COMPLETED, 10, 501, 18, 3, 3, "", 18)]


def test_handles_are_in_execution_order_whatever_the_ack_order():
    c = make()
    c.handle(Tick(10))
    ack(c, SINK[0], 1, 11)
    ack(c, SRC[1], 1, 11)
    [_, persist] = ack(c, SRC[0], 1, 11)
    assert list(persist.handles) == list(ALL)


def test_duplicate_acks_keep_the_first_handle():
    c = make()
    c.handle(Tick(10))
    assert ack(c, SRC[0], 1, 11, size=5) == [AckResult(SRC[0], 1, AckOutcome.SUCCESS)]
    before = state(c)
    assert c.handle(Acknowledge(SRC[0], 1, "other", 9, 12)) == [AckResult(SRC[0], 1, AckOutcome.DUPLICATE)]
    assert state(c) == before
    ack(c, SRC[1], 1, 12)
    [_, persist] = ack(c, SINK[0], 1, 12)
    assert persist.handles[SRC[0]] == f"h1:{SRC[0]}"
    # while PERSISTING and once completed (still retained) a repeat is a duplicate: its handle is live
    assert ack(c, SINK[0], 1, 13) == [AckResult(SINK[0], 1, AckOutcome.DUPLICATE)]
    c.handle(CheckpointPersisted(1, 14))
    assert ack(c, SRC[1], 1, 15) == [AckResult(SRC[1], 1, AckOutcome.DUPLICATE)]


def test_unknown_acks():
    c = make()
    assert ack(c, SRC[0], 1, 1) == [AckResult(SRC[0], 1, AckOutcome.UNKNOWN)]  # nothing triggered yet
    c.handle(Tick(10))
    assert ack(c, "j/1/src/0", 1, 11) == [AckResult("j/1/src/0", 1, AckOutcome.UNKNOWN)]  # other attempt
    assert ack(c, SRC[0], 2, 11) == [AckResult(SRC[0], 2, AckOutcome.UNKNOWN)]  # never triggered
    assert c.history()[0].acks == 0


def test_late_acks_for_aborted_and_subsumed_checkpoints_are_discarded():
    c = make(tolerable_failures=5, retained=1)
    c.handle(Tick(10))
    ack(c, SRC[0], 1, 11)
    c.handle(Decline(SRC[1], 1, "no", 12))
    assert ack(c, SINK[0], 1, 13) == [AckResult(SINK[0], 1, AckOutcome.DISCARDED)]
    assert ack(c, SRC[0], 1, 13) == [AckResult(SRC[0], 1, AckOutcome.DISCARDED)]
    run_checkpoint(c, 20)  # 2
    assert run_checkpoint(c, 30) == [NotifyComplete(3, ALL, False), DiscardCheckpoint(2)]
    assert ack(c, SRC[0], 2, 40) == [AckResult(SRC[0], 2, AckOutcome.DISCARDED)]
    assert ack(c, SRC[0], 3, 40) == [AckResult(SRC[0], 3, AckOutcome.DUPLICATE)]


def test_ids_skipped_by_a_shared_counter_are_unknown_and_never_reused():
    counter = InMemoryCheckpointIDCounter()
    c = make(counter=counter, tolerable_failures=9)
    assert c.handle(Tick(10)) == [TriggerCheckpoint(1, 10, SRC, False)]
    c.handle(Decline(SRC[0], 1, "x", 11))
    counter.get_and_increment()  # id 2 taken elsewhere
    assert c.handle(Tick(20)) == [TriggerCheckpoint(3, 20, SRC, False)]
    assert ack(c, SRC[0], 2, 21) == [AckResult(SRC[0], 2, AckOutcome.UNKNOWN)]
    assert ack(c, SRC[0], 1, 21) == [AckResult(SRC[0], 1, AckOutcome.DISCARDED)]


# -- aborts -----------------------------------------------------------------------------
def test_decline_aborts_and_counts():
    c = make(tolerable_failures=1)
    c.handle(Tick(10))
    assert c.handle(Decline(SRC[0], 2, "wrong id", 11)) == []
    assert c.handle(Decline("j/9/x/0", 1, "foreign", 11)) == []
    assert c.handle(Decline(SINK[0], 1, "not ready", 12)) == [
        NotifyAborted(1, ALL, f"checkpoint 1 declined by {SINK[0]}: not ready"),
        DiscardCheckpoint(1),
    ]
    assert c.consecutive_failures == 1 and c.pending_id is None and c.latest_completed() is None
    assert c.history() == [
        CheckpointStats(1, CheckpointStatus.FAILED, 10, 12, 0, 0, 3, f"checkpoint 1 declined by {SINK[0]}: not ready")
    ]
    assert c.handle(Decline(SINK[0], 1, "again", 13)) == []


def test_timeout_aborts_and_the_next_tick_triggers():
    c = make(interval=10, timeout=30, tolerable_failures=1)
    c.handle(Tick(10))
    ack(c, SRC[0], 1, 11, size=4)
    assert c.handle(Tick(39.9)) == []
    reason = "checkpoint 1 expired after 30s (1/3 acks)"
    assert c.handle(Tick(40)) == [NotifyAborted(1, ALL, reason), DiscardCheckpoint(1)]
    assert c.history() == [CheckpointStats(1, CheckpointStatus.FAILED, 10, 40, 4, 1, 3, reason, 4)]
    assert c.handle(Tick(40.5)) == [TriggerCheckpoint(2, 40.5, SRC, False)]


def test_persist_failure_aborts():
    c = make(tolerable_failures=1)
    c.handle(Tick(10))
    ack_all(c, 1, 11)
    reason = "checkpoint 1 could not be persisted: disk full"
    assert c.handle(PersistFailed(1, "disk full", 12)) == [NotifyAborted(1, ALL, reason), DiscardCheckpoint(1)]
    assert c.consecutive_failures == 1 and c.latest_completed() is None
    assert c.history()[-1].status == CheckpointStatus.FAILED
    assert ack(c, SRC[0], 1, 13) == [AckResult(SRC[0], 1, AckOutcome.DISCARDED)]
    with pytest.raises(ValueError, match="not|nothing"):
        c.handle(CheckpointPersisted(1, 14))


def test_task_loss_aborts_uncounted_and_suspends():
    c = make(tolerable_failures=0)
    c.handle(Tick(10))
    ack(c, SRC[0], 1, 11)
    assert c.handle(TasksLost("TaskManager tm-1 lost", 12)) == [
        NotifyAborted(1, ALL, "checkpoint 1 aborted, tasks lost: TaskManager tm-1 lost"),
        DiscardCheckpoint(1),
    ]
    assert c.consecutive_failures == 0
    assert c.handle(Tick(100)) == []
    assert c.handle(TasksLost("again", 100)) == []
    assert c.handle(Resume(100)) == []
    assert c.handle(Tick(109)) == []
    assert c.handle(Tick(110)) == [TriggerCheckpoint(2, 110, SRC, False)]


def test_task_loss_lets_a_persisting_checkpoint_complete():
    c = make()
    c.handle(Tick(10))
    ack_all(c, 1, 11)
    assert c.handle(TasksLost("gone", 12)) == []
    assert c.handle(CheckpointPersisted(1, 13)) == [NotifyComplete(1, ALL, False)]
    assert latest(c).checkpoint_id == 1


def test_more_than_tolerable_consecutive_failures_fail_the_job():
    c = make(interval=10, tolerable_failures=2)
    c.handle(Tick(10))
    c.handle(Decline(SRC[0], 1, "a", 11))
    run_checkpoint(c, 20)  # 2 completes: the count restarts
    assert c.consecutive_failures == 0
    for cid, t in ((3, 40), (4, 50)):
        assert c.handle(Tick(t)) == [TriggerCheckpoint(cid, t, SRC, False)]
        assert c.handle(Decline(SRC[0], cid, "b", t + 1)) == [
            NotifyAborted(cid, ALL, f"checkpoint {cid} declined by {SRC[0]}: b"),
            DiscardCheckpoint(cid),
        ]
    c.handle(Tick(60))
    actions = c.handle(Decline(SRC[1], 5, "c", 61))
    assert actions[:2] == [NotifyAborted(5, ALL, f"checkpoint 5 declined by {SRC[1]}: c"), DiscardCheckpoint(5)]
    assert actions[2] == FailJob(
        f"job j: 3 consecutive failed checkpoints exceed tolerable_failures=2; "
        f"last: checkpoint 5 declined by {SRC[1]}: c"
    )
    assert len(actions) == 3
    assert c.handle(Tick(1000)) == []
    assert c.handle(Resume(1000)) == []
    assert c.handle(Tick(2000)) == []
    assert c.handle(FinalCheckpointRequested(2000)) == []


def test_zero_tolerable_failures_fail_on_the_first():
    c = make(timeout=5)
    c.handle(Tick(10))
    assert c.handle(Tick(15)) == [
        NotifyAborted(1, ALL, "checkpoint 1 expired after 5s (0/3 acks)"),
        DiscardCheckpoint(1),
        FailJob(
            "job j: 1 consecutive failed checkpoints exceed tolerable_failures=0; "
            "last: checkpoint 1 expired after 5s (0/3 acks)"
        ),
    ]


# -- retention ------------------------------------------------------------------------
def test_retention_discards_subsumed_checkpoints_oldest_first():
    c = make(interval=10, retained=2)
    assert run_checkpoint(c, 10) == [NotifyComplete(1, ALL, False)]
    assert run_checkpoint(c, 20) == [NotifyComplete(2, ALL, False)]
    assert run_checkpoint(c, 30) == [NotifyComplete(3, ALL, False), DiscardCheckpoint(1)]
    assert run_checkpoint(c, 40) == [NotifyComplete(4, ALL, False), DiscardCheckpoint(2)]
    assert [x.checkpoint_id for x in c.completed()] == [3, 4]
    assert latest(c).checkpoint_id == 4


def test_restored_checkpoint_counts_as_latest_and_is_retained():
    restored = CompletedCheckpoint(4, {"j/old/src/0": "h4"}, 1.0, 2.0, 10, False)
    c = make(counter=InMemoryCheckpointIDCounter(start=7), restored=restored, retained=2)
    assert c.latest_completed() == restored and c.completed() == [restored]
    assert c.history() == []
    assert ack(c, SRC[0], 4, 5) == [AckResult(SRC[0], 4, AckOutcome.DUPLICATE)]  # never delete restored state
    assert run_checkpoint(c, 10) == [NotifyComplete(7, ALL, False)]
    assert run_checkpoint(c, 20) == [NotifyComplete(8, ALL, False), DiscardCheckpoint(4)]
    assert [x.checkpoint_id for x in c.completed()] == [7, 8]


def test_restored_checkpoint_requires_a_counter_beyond_it():
    restored = CompletedCheckpoint(4, {}, 1.0, 2.0, 0)
    with pytest.raises(ValueError, match="reuse"):
        make(counter=InMemoryCheckpointIDCounter(start=4), restored=restored)


# -- final checkpoint ---------------------------------------------------------------------
def test_final_checkpoint_without_pending_goes_to_all_executions_at_once():
    c = make(interval=10, min_pause=100)
    run_checkpoint(c, 10)
    assert c.handle(FinalCheckpointRequested(12)) == [TriggerCheckpoint(2, 12, ALL, True)]
    assert c.handle(FinalCheckpointRequested(12.5)) == []  # already taking it
    assert ack_all(c, 2, 13)[-1] == PersistCheckpoint(2, handles(2), True)
    assert c.handle(CheckpointPersisted(2, 14)) == [NotifyComplete(2, ALL, True)]
    assert latest(c).final is True
    assert c.handle(Tick(1000)) == []
    assert c.handle(FinalCheckpointRequested(1000)) == []


def test_final_checkpoint_aborts_an_in_progress_one_uncounted():
    c = make(interval=10, tolerable_failures=0)
    c.handle(Tick(10))
    ack(c, SRC[0], 1, 11)
    assert c.handle(FinalCheckpointRequested(12)) == [
        NotifyAborted(1, ALL, "checkpoint 1 superseded by the final checkpoint", superseded=True),
        DiscardCheckpoint(1),
        TriggerCheckpoint(2, 12, ALL, True),
    ]
    assert c.consecutive_failures == 0
    assert ack(c, SRC[0], 1, 13) == [AckResult(SRC[0], 1, AckOutcome.DISCARDED)]
    assert [(s.checkpoint_id, s.status) for s in c.history()] == [
        (1, CheckpointStatus.FAILED),
        (2, CheckpointStatus.IN_PROGRESS),
    ]


def test_final_checkpoint_waits_for_a_persisting_one():
    c = make(interval=10)
    c.handle(Tick(10))
    ack_all(c, 1, 11)
    assert c.handle(FinalCheckpointRequested(12)) == []
    assert c.handle(Tick(12.5)) == []
    assert c.handle(CheckpointPersisted(1, 13)) == [NotifyComplete(1, ALL, False)]
    assert c.handle(Tick(13.1)) == [TriggerCheckpoint(2, 13.1, ALL, True)]


def test_failed_final_checkpoint_is_retried_as_final():
    c = make(interval=None, tolerable_failures=1)
    c.handle(FinalCheckpointRequested(5))
    c.handle(Decline(SINK[0], 1, "busy", 6))
    assert c.handle(Tick(6.1)) == [TriggerCheckpoint(2, 6.1, ALL, True)]


def test_task_loss_forgets_the_final_request():
    c = make(interval=None)
    c.handle(FinalCheckpointRequested(5))
    c.handle(TasksLost("gone", 6))
    c.handle(Resume(7))
    assert c.handle(Tick(100)) == []


def test_final_request_while_suspended_waits_for_resume():
    c = make(interval=None)
    c.handle(Suspend(1))
    assert c.handle(FinalCheckpointRequested(2)) == []
    assert c.handle(Tick(3)) == []
    c.handle(Resume(4))
    assert c.handle(Tick(4)) == [TriggerCheckpoint(1, 4, ALL, True)]


# -- suspend / resume -----------------------------------------------------------------
def test_suspend_stops_triggering_and_resume_restarts_the_interval_clock():
    c = make(interval=10, timeout=60, tolerable_failures=5)
    assert c.handle(Suspend(5)) == []
    assert c.handle(Tick(20)) == []
    assert c.handle(Resume(20)) == []
    assert c.handle(Resume(25)) == []  # not suspended: the clock is not reset again
    assert c.handle(Tick(29)) == []
    assert c.handle(Tick(30)) == [TriggerCheckpoint(1, 30, SRC, False)]
    c.handle(Suspend(31))  # a pending checkpoint still completes or times out
    assert c.handle(Tick(90)) == [
        NotifyAborted(1, ALL, "checkpoint 1 expired after 60s (0/3 acks)"),
        DiscardCheckpoint(1),
    ]
    assert c.handle(Tick(200)) == []


# -- history -----------------------------------------------------------------------------
def test_history_records_every_checkpoint_newest_last():
    c = make(interval=10, tolerable_failures=5)
    run_checkpoint(c, 10)
    c.handle(Tick(20))
    c.handle(Decline(SRC[0], 2, "nope", 21))
    c.handle(Tick(30))
    ack(c, SRC[1], 3, 31, size=3)
    assert c.history() == [
        CheckpointStats(1, CheckpointStatus.COMPLETED, 10, 11, 3, 3, 3, "", 3),
        CheckpointStats(2, CheckpointStatus.FAILED, 20, 21, 0, 0, 3, f"checkpoint 2 declined by {SRC[0]}: nope", 0),
        CheckpointStats(3, CheckpointStatus.IN_PROGRESS, 30, None, 3, 1, 3, "", 3),
    ]


def test_an_incremental_handle_counts_its_earlier_files_in_the_full_size():
    incremental = {"keyed": {"agg": {"chain": ["a", "b"], "size": 100, "full_size": 5000}, "map": {"size": 7}}}
    assert full_size(incremental, 120) == 5020  # the task wrote 120 bytes; the state it holds is 5,020
    assert full_size({"keyed": {"agg": {"size": 100}}}, 120) == 120  # written whole
    assert full_size("not a handle", 9) == 9
    assert full_size({"keyed": {"agg": {"size": "x", "full_size": 10**6}}}, 9) == 9  # a malformed one adds nothing


def test_history_is_bounded_to_the_last_fifty():
    c = make(interval=1, retained=1)
    for i in range(55):
        run_checkpoint(c, 10 + 2 * i)
    ids = [s.checkpoint_id for s in c.history()]
    assert ids == list(range(6, 56))
    # older than the history remembers, triggered here
    assert ack(c, SRC[0], 2, 500) == [AckResult(SRC[0], 2, AckOutcome.DISCARDED)]


# -- illegal input ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(interval="10"),
        dict(interval=10, timeout=0),
        dict(interval=10, timeout=-1),
        dict(interval=10, min_pause=-0.1),
        dict(interval=10, max_concurrent=2),
        dict(interval=10, max_concurrent=0),
        dict(interval=10, tolerable_failures=-1),
        dict(interval=10, tolerable_failures=1.5),
        dict(interval=10, retained=0),
        dict(interval=10, retained=True),
    ],
)
def test_bad_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        CheckpointConfig(**kwargs)


@pytest.mark.parametrize(
    "sources,executions", [((), ALL), (("x",), ALL), (SRC, ()), (SRC, ALL + (SRC[0],)), (SRC + SRC[:1], ALL)]
)
def test_bad_executions_are_rejected(sources, executions):
    with pytest.raises(ValueError):
        CheckpointCoordinator("j", CheckpointConfig(10), InMemoryCheckpointIDCounter(), sources, executions, 0)


def test_unknown_event_is_a_type_error():
    c = make()
    with pytest.raises(TypeError):
        c.handle(object())  # type: ignore[arg-type]  # not an event: the point of the test


def test_illegal_input_leaves_state_unchanged():
    c = make()
    c.handle(Tick(10))
    ack(c, SRC[0], 1, 11)
    before = state(c)
    with pytest.raises(ValueError):
        c.handle(CheckpointPersisted(1, 12))  # not PERSISTING yet
    with pytest.raises(ValueError):
        c.handle(PersistFailed(2, "x", 12))
    with pytest.raises(ValueError):
        c.handle(Acknowledge(SRC[1], 1, "h", -1, 12))
    assert state(c) == before


def test_a_failing_counter_changes_nothing():
    class Broken(InMemoryCheckpointIDCounter):
        fail = False

        def get_and_increment(self):
            if self.fail:
                raise ConnectionError("zookeeper down")
            return super().get_and_increment()

    counter = Broken()
    c = make(counter=counter)
    c.handle(Tick(10))
    ack(c, SRC[0], 1, 11)
    counter.fail = True
    before = state(c)
    with pytest.raises(ConnectionError):
        c.handle(FinalCheckpointRequested(12))  # would abort 1 first: it must not have
    assert state(c) == before and c.pending_id == 1


def test_a_failing_counter_on_tick_changes_nothing():
    class Broken(InMemoryCheckpointIDCounter):
        def get_and_increment(self):
            raise ConnectionError("zookeeper down")

    c = make(counter=Broken())
    before = state(c)
    with pytest.raises(ConnectionError):
        c.handle(Tick(10))
    assert state(c) == before and c.history() == []
