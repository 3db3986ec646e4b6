"""Scripted event sequences against the pure SlotPool; exact actions asserted."""

import copy

import pytest

from jobmanager.scheduler.slot_pool import (
    HeartbeatReceived,
    JobWaitingForSlots,
    RegistrationRejected,
    SlotId,
    SlotPool,
    SlotsAllocated,
    SlotsReleased,
    SlotsRequested,
    TaskManagerDisconnected,
    TaskManagerInfo,
    TaskManagerLost,
    TaskManagerRegistered,
    Tick,
    UnknownTaskManager,
)

TIMEOUT = 10.0


def reg(rid, slots=2, now=0.0, address=None, identity=None):
    return TaskManagerRegistered(rid, address or f"{rid}:6122", slots, now, identity)


def pool_with(*tms):
    pool = SlotPool(heartbeat_timeout=TIMEOUT)
    for tm in tms:
        assert pool.handle(tm) == []
    return pool


def snapshot(pool):
    return copy.deepcopy((pool._tms, pool._allocations, pool._waiting))


def test_allocation_spreads_across_taskmanagers():
    pool = pool_with(reg("tm-a"), reg("tm-b"))
    assert pool.handle(SlotsRequested("job1", 2, 1.0)) == [
        SlotsAllocated("job1", (SlotId("tm-a", 0), SlotId("tm-b", 0)))
    ]
    assert pool.handle(SlotsRequested("job2", 1, 1.0)) == [SlotsAllocated("job2", (SlotId("tm-a", 1),))]
    assert pool.allocation("job1") == (SlotId("tm-a", 0), SlotId("tm-b", 0))
    assert pool.total_slots() == 4 and pool.free_slots() == 1
    assert pool.taskmanagers() == [
        TaskManagerInfo("tm-a", "tm-a:6122", 2, 0, 0.0),
        TaskManagerInfo("tm-b", "tm-b:6122", 2, 1, 0.0),
    ]


def test_placement_prefers_most_free_then_resource_id():
    pool = pool_with(reg("tm-b", slots=3), reg("tm-a", slots=1), reg("tm-c", slots=3))
    # free b3 c3 a1 -> b; b2 c3 a1 -> c; b2 c2 a1 -> b; b1 c2 a1 -> c; a1 b1 c1 -> a (tie by id)
    assert pool.handle(SlotsRequested("job1", 5, 0.0)) == [
        SlotsAllocated(
            "job1", (SlotId("tm-b", 0), SlotId("tm-c", 0), SlotId("tm-b", 1), SlotId("tm-c", 1), SlotId("tm-a", 0))
        )
    ]


def test_waiting_then_allocated_when_taskmanager_joins():
    pool = pool_with(reg("tm-a", slots=1))
    assert pool.handle(SlotsRequested("job1", 3, 1.0)) == [JobWaitingForSlots("job1", 3, 1)]
    assert pool.waiting_jobs() == ["job1"]
    assert pool.allocation("job1") == ()
    assert pool.handle(reg("tm-b", slots=1, now=2.0)) == [JobWaitingForSlots("job1", 3, 2)]
    assert pool.handle(reg("tm-c", slots=2, now=3.0)) == [
        SlotsAllocated("job1", (SlotId("tm-c", 0), SlotId("tm-a", 0), SlotId("tm-b", 0)))
    ]
    assert pool.waiting_jobs() == []
    assert pool.free_slots() == 1


def test_request_larger_than_cluster_waits_on_empty_cluster():
    pool = pool_with()
    assert pool.handle(SlotsRequested("job1", 4, 0.0)) == [JobWaitingForSlots("job1", 4, 0)]
    assert pool.handle(reg("tm-a", slots=4)) == [SlotsAllocated("job1", tuple(SlotId("tm-a", i) for i in range(4)))]


def test_two_waiting_jobs_served_fifo():
    pool = pool_with(reg("tm-a", slots=1))
    assert pool.handle(SlotsRequested("job0", 1, 0.0)) == [SlotsAllocated("job0", (SlotId("tm-a", 0),))]
    assert pool.handle(SlotsRequested("job1", 2, 1.0)) == [JobWaitingForSlots("job1", 2, 0)]
    assert pool.handle(SlotsRequested("job2", 2, 2.0)) == [JobWaitingForSlots("job2", 2, 0)]
    assert pool.waiting_jobs() == ["job1", "job2"]
    # Room for one of them: the earlier one wins; the other is told the new count.
    assert pool.handle(reg("tm-b", slots=3, now=3.0)) == [
        SlotsAllocated("job1", (SlotId("tm-b", 0), SlotId("tm-b", 1))),
        JobWaitingForSlots("job2", 2, 1),
    ]
    assert pool.handle(reg("tm-c", slots=1, now=4.0)) == [
        SlotsAllocated("job2", (SlotId("tm-b", 2), SlotId("tm-c", 0)))
    ]


def test_oversized_head_does_not_block_smaller_later_job():
    pool = pool_with(reg("tm-a", slots=2))
    assert pool.handle(SlotsRequested("big", 5, 0.0)) == [JobWaitingForSlots("big", 5, 2)]
    assert pool.handle(SlotsRequested("small", 2, 1.0)) == [
        SlotsAllocated("small", (SlotId("tm-a", 0), SlotId("tm-a", 1))),
        JobWaitingForSlots("big", 5, 0),
    ]
    assert pool.waiting_jobs() == ["big"]


def test_release_frees_slots_and_serves_waiting_job():
    pool = pool_with(reg("tm-a"), reg("tm-b"))
    pool.handle(SlotsRequested("job1", 3, 0.0))
    assert pool.handle(SlotsRequested("job2", 2, 1.0)) == [JobWaitingForSlots("job2", 2, 1)]
    assert pool.handle(SlotsReleased("job1")) == [SlotsAllocated("job2", (SlotId("tm-a", 0), SlotId("tm-b", 0)))]
    assert pool.allocation("job1") == ()
    assert pool.free_slots() == 2
    # The released job may ask again.
    assert pool.handle(SlotsRequested("job1", 2, 2.0)) == [
        SlotsAllocated("job1", (SlotId("tm-a", 1), SlotId("tm-b", 1)))
    ]


def test_a_released_slot_its_taskmanager_still_reports_held_is_not_offered_until_freed():
    """A cancelled task that has not stopped keeps its slot (the TaskManager's slot report)."""
    pool = pool_with(reg("tm-a", slots=1))
    assert pool.handle(SlotsRequested("hung", 1, 0.0)) == [SlotsAllocated("hung", (SlotId("tm-a", 0),))]
    assert pool.handle(HeartbeatReceived("tm-a", 1.0, frozenset({0}))) == []
    assert pool.handle(SlotsReleased("hung")) == []  # released here, still held there
    assert pool.free_slots() == 0 and pool.draining_slots() == 1
    assert pool.handle(SlotsRequested("next", 1, 2.0)) == [JobWaitingForSlots("next", 1, 0)]
    assert pool.handle(HeartbeatReceived("tm-a", 3.0, frozenset({0}))) == []  # still held: nothing changes
    assert pool.handle(HeartbeatReceived("tm-a", 4.0, frozenset())) == [SlotsAllocated("next", (SlotId("tm-a", 0),))]
    assert pool.draining_slots() == 0


def test_a_heartbeat_without_slot_report_or_with_bad_indexes_changes_no_slot():
    pool = pool_with(reg("tm-a", slots=2))
    assert pool.handle(HeartbeatReceived("tm-a", 1.0, frozenset({0, 7, -1}))) == []
    assert pool.free_slots() == 1  # index 0 held; 7 and -1 do not exist
    assert pool.handle(HeartbeatReceived("tm-a", 2.0)) == []  # no report: the last one stands
    assert pool.free_slots() == 1
    assert [i.free for i in pool.taskmanagers()] == [1]


def test_release_of_unknown_job_is_a_no_op_and_release_cancels_a_wait():
    pool = pool_with(reg("tm-a", slots=1))
    assert pool.handle(SlotsReleased("nobody")) == []
    pool.handle(SlotsRequested("job1", 2, 0.0))
    assert pool.handle(SlotsReleased("job1")) == []
    assert pool.waiting_jobs() == []
    assert pool.handle(reg("tm-b", slots=1)) == []


def test_heartbeat_timeout_loses_taskmanager_with_affected_jobs():
    pool = pool_with(reg("tm-a"), reg("tm-b"))
    pool.handle(SlotsRequested("job-z", 2, 0.0))  # tm-a:0, tm-b:0
    pool.handle(SlotsRequested("job-a", 1, 0.0))  # tm-a:1
    pool.handle(SlotsRequested("job-w", 2, 0.0))  # waits, 1 free
    assert pool.handle(HeartbeatReceived("tm-b", 5.0)) == []
    assert pool.handle(Tick(10.0)) == []  # exactly the timeout: still alive
    # tm-a had no free slot, so `available` is unchanged: no JobWaitingForSlots.
    assert pool.handle(Tick(10.5)) == [
        TaskManagerLost("tm-a", "tm-a:6122", "no heartbeat for 10.5s (timeout 10s)", ("job-a", "job-z")),
    ]
    # job-z keeps its slot on tm-b; job-a had nothing else and holds nothing now.
    assert pool.allocation("job-z") == (SlotId("tm-b", 0),)
    assert pool.allocation("job-a") == ()
    assert pool.total_slots() == 2 and pool.free_slots() == 1
    with pytest.raises(KeyError):
        pool.address_of("tm-a")
    assert pool.handle(Tick(15.5)) == [
        TaskManagerLost("tm-b", "tm-b:6122", "no heartbeat for 10.5s (timeout 10s)", ("job-z",)),
        JobWaitingForSlots("job-w", 2, 0),
    ]
    assert pool.total_slots() == 0 and pool.taskmanagers() == []


def test_several_taskmanagers_expire_in_one_tick_sorted():
    pool = pool_with(reg("tm-b"), reg("tm-a"), reg("tm-c", now=5.0))
    assert pool.handle(Tick(12.0)) == [
        TaskManagerLost("tm-a", "tm-a:6122", "no heartbeat for 12s (timeout 10s)", ()),
        TaskManagerLost("tm-b", "tm-b:6122", "no heartbeat for 12s (timeout 10s)", ()),
    ]
    assert [tm.resource_id for tm in pool.taskmanagers()] == ["tm-c"]


def test_heartbeats_keep_taskmanager_alive():
    pool = pool_with(reg("tm-a"))
    for now in (8.0, 16.0, 24.0):
        assert pool.handle(HeartbeatReceived("tm-a", now)) == []
        for t in range(int(now) + 1, int(now) + 10):  # the JobManager ticks every second
            assert pool.handle(Tick(float(t))) == []
    assert pool.taskmanagers()[0].last_heartbeat == 24.0
    # A heartbeat from the past does not move last_heartbeat backwards.
    assert pool.handle(HeartbeatReceived("tm-a", 1.0)) == []
    assert pool.taskmanagers()[0].last_heartbeat == 24.0
    # A stale Tick (time going backwards) is harmless.
    assert pool.handle(Tick(0.0)) == []
    assert pool.address_of("tm-a") == "tm-a:6122"


def test_unknown_heartbeat_and_disconnect_get_explicit_outcome():
    pool = pool_with(reg("tm-a"))
    assert pool.handle(HeartbeatReceived("tm-x", 1.0)) == [UnknownTaskManager("tm-x")]
    assert pool.handle(TaskManagerDisconnected("tm-x", "bye")) == [UnknownTaskManager("tm-x")]
    assert pool.total_slots() == 2


def test_disconnect_loses_taskmanager_and_updates_waiting():
    pool = pool_with(reg("tm-a"), reg("tm-b"))
    pool.handle(SlotsRequested("job1", 1, 0.0))  # tm-a:0
    pool.handle(SlotsRequested("job2", 9, 0.0))  # waits, told 3
    assert pool.handle(TaskManagerDisconnected("tm-a", "TaskManager shut down")) == [
        TaskManagerLost("tm-a", "tm-a:6122", "TaskManager shut down", ("job1",)),
        JobWaitingForSlots("job2", 9, 2),
    ]
    assert pool.allocation("job1") == ()
    # The TaskManager comes back and re-registers: slots are fresh.
    assert pool.handle(reg("tm-a", now=3.0)) == [JobWaitingForSlots("job2", 9, 4)]


def test_reregistration_same_address_and_slots_refreshes_heartbeat():
    pool = pool_with(reg("tm-a"))
    pool.handle(SlotsRequested("job1", 1, 0.0))
    assert pool.handle(reg("tm-a", now=8.0)) == []
    assert pool.allocation("job1") == (SlotId("tm-a", 0),)  # allocation untouched
    assert pool.handle(Tick(17.0)) == []  # refreshed at 8.0
    assert pool.taskmanagers() == [TaskManagerInfo("tm-a", "tm-a:6122", 2, 1, 8.0)]


@pytest.mark.parametrize(
    "changed",
    [
        dict(address="10.0.0.9:6122"),
        dict(slots=3),
    ],
)
def test_reregistration_by_its_identity_with_different_address_or_slots_is_a_loss(changed):
    """The TaskManager restarted: the same certificate, another address or slot count."""
    pool = pool_with(reg("tm-a", identity="taskmanager/tm-a"))
    pool.handle(SlotsRequested("job1", 2, 0.0))
    pool.handle(SlotsRequested("job2", 2, 0.0))  # waits, told 0
    new = dict(slots=2, now=4.0, identity="taskmanager/tm-a") | changed
    assert pool.handle(reg("tm-a", **new)) == [
        TaskManagerLost("tm-a", "tm-a:6122", "re-registered with a different address/slots", ("job1",)),
        SlotsAllocated("job2", (SlotId("tm-a", 0), SlotId("tm-a", 1))),
    ]
    assert pool.allocation("job1") == ()
    assert pool.address_of("tm-a") == new.get("address", "tm-a:6122")
    assert pool.taskmanagers()[0].last_heartbeat == 4.0


@pytest.mark.parametrize(
    "event",
    [
        TaskManagerRegistered("tm-x", "x:1", 0, 1.0),
        TaskManagerRegistered("tm-a", "other:1", -1, 1.0),  # would otherwise be a loss of tm-a
        SlotsRequested("job3", 0, 1.0),
        SlotsRequested("job3", -2, 1.0),
        SlotsRequested("job1", 1, 1.0),  # already holds slots
        SlotsRequested("job2", 1, 1.0),  # already waiting
    ],
)
def test_invalid_input_raises_and_leaves_state_unchanged(event):
    pool = pool_with(reg("tm-a"))
    pool.handle(SlotsRequested("job1", 1, 0.0))
    pool.handle(SlotsRequested("job2", 5, 0.0))
    before = snapshot(pool)
    with pytest.raises(ValueError):
        pool.handle(event)
    assert snapshot(pool) == before


def test_invalid_construction_and_unknown_event():
    with pytest.raises(ValueError):
        SlotPool(heartbeat_timeout=0)
    with pytest.raises(TypeError):
        SlotPool(heartbeat_timeout=1).handle("not an event")  # type: ignore[arg-type]  # the point of the test


@pytest.mark.parametrize(
    "first,second",
    [
        (dict(identity="taskmanager/tm-a"), dict(identity="taskmanager/rogue")),
        (dict(identity="taskmanager/tm-a"), dict(identity=None)),
        (dict(identity="taskmanager/tm-a"), dict(identity="taskmanager/rogue", address="x:1", slots=64)),
        (dict(), dict(address="10.0.0.9:6122")),  # plaintext: the address is all a TaskManager shows
        (dict(), dict(slots=3)),
    ],
    ids=["other-identity", "no-identity", "other-identity-elsewhere", "plaintext-address", "plaintext-slots"],
)
def test_a_living_taskmanagers_resource_id_is_not_taken_over(first, second):
    pool = pool_with(reg("tm-a", **first))
    pool.handle(SlotsRequested("job1", 2, 0.0))
    before = snapshot(pool)
    (rejected,) = pool.handle(reg("tm-a", now=1.0, **second))
    assert isinstance(rejected, RegistrationRejected) and rejected.resource_id == "tm-a"
    assert snapshot(pool) == before  # nothing changed: the real TaskManager keeps its slots


def test_a_lost_taskmanagers_resource_id_is_free_again():
    pool = pool_with(reg("tm-a", identity="taskmanager/tm-a"))
    assert [type(a) for a in pool.handle(Tick(TIMEOUT + 1))] == [TaskManagerLost]
    assert pool.handle(reg("tm-a", now=TIMEOUT + 1, identity="taskmanager/other")) == []
    assert pool.registered("tm-a").identity == "taskmanager/other"


# -- elastic and extending requests (BATCH jobs, region restarts: docs/batch.md) ----------------
def test_an_elastic_request_takes_what_is_free_up_to_its_count():
    pool = pool_with(reg("a", 2))
    actions = pool.handle(SlotsRequested("batch", 8, 0.0, minimum=1))
    assert [len(a.slots) for a in actions if isinstance(a, SlotsAllocated)] == [2]


def test_an_elastic_request_waits_for_its_minimum():
    pool = pool_with(reg("a", 1))
    pool.handle(SlotsRequested("other", 1, 0.0))
    actions = pool.handle(SlotsRequested("batch", 4, 0.0, minimum=1))
    assert [a for a in actions if isinstance(a, JobWaitingForSlots)] == [JobWaitingForSlots("batch", 1, 0)]
    actions = pool.handle(SlotsReleased("other"))
    assert [a.slots for a in actions if isinstance(a, SlotsAllocated)] == [(SlotId("a", 0),)]


def test_an_extending_request_adds_replacement_slots_to_a_job():
    pool = pool_with(reg("a", 2), reg("b", 2))
    pool.handle(SlotsRequested("job", 2, 0.0))
    pool.handle(TaskManagerDisconnected("b", "killed"))
    assert pool.allocation("job") == (SlotId("a", 0),)
    actions = pool.handle(SlotsRequested("job", 1, 1.0, extend=True))
    assert [(a.slots, a.added) for a in actions if isinstance(a, SlotsAllocated)] == [((SlotId("a", 1),), True)]
    assert pool.allocation("job") == (SlotId("a", 0), SlotId("a", 1))


def test_a_second_plain_request_and_a_bad_minimum_are_refused():
    pool = pool_with(reg("a", 2))
    pool.handle(SlotsRequested("job", 1, 0.0))
    with pytest.raises(ValueError, match="already holds"):
        pool.handle(SlotsRequested("job", 1, 0.0))
    with pytest.raises(ValueError, match="minimum"):
        pool.handle(SlotsRequested("other", 2, 0.0, minimum=3))


def test_the_jobmanagers_own_lateness_is_not_a_taskmanagers_silence():
    """Ticks 30 s apart (the JobManager paused or starved): the TaskManagers heard from just
    before are not lost for the gap; one that stays silent while ticks run on time is, with
    what happened in the reason."""
    pool = pool_with(reg("tm-a"), reg("tm-b"))
    assert pool.handle(Tick(1.0)) == []
    assert pool.handle(Tick(31.0)) == []  # 30 s without a tick: our lateness
    assert pool.taskmanagers()[0].last_heartbeat == 30.0
    assert pool.handle(HeartbeatReceived("tm-a", 31.5)) == []
    for t in range(32, 41):
        assert pool.handle(Tick(float(t))) == []
    assert pool.handle(Tick(40.5)) == [
        TaskManagerLost("tm-b", "tm-b:6122", "no heartbeat for 10.5s (timeout 10s)", ()),
    ]
    assert pool.handle(Tick(41.5)) == []  # tm-a heard at 31.5: 10 s, exactly the timeout
