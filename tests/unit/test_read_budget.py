"""ReadBudget: how many files a streaming file source reads per Spark call. A call costs a fixed
part plus a part per byte; the budget must start from a first call sized by an assumed pace,
settle where a call takes about the target, never grow by more than MAX_GROWTH at once, and
shrink when calls slow down."""

from __future__ import annotations

import pytest

from taskmanager.operators.sources import ReadBudget

FILE = 1 << 20  # bytes per file (1 MiB)
FILES = [f"f{i:04d}" for i in range(2000)]
SIZES = dict.fromkeys(FILES, FILE)


def call_seconds(nbytes: int, fixed: float = 0.25, per_mb: float = 0.065) -> float:
    """A Spark call's own time: fixed cost + cost per byte (measured here: 0.25 s + 65 ms per
    file of 50k events)."""
    return fixed + per_mb * nbytes / 1_000_000


def run(budget: ReadBudget, calls: int, **cost: float) -> list[int]:
    """Files per call over `calls` calls on an endless backlog."""
    taken = []
    for _ in range(calls):
        n = budget.take(FILES, SIZES)
        taken.append(n)
        budget.done(call_seconds(n * FILE, **cost))
    return taken


def test_the_first_call_assumes_a_pace_then_follows_the_measured_cost():
    assert run(ReadBudget(target=1.0), 1) == [32]  # FIRST_PACE: 32 MiB in a second
    assert run(ReadBudget(target=0.5), 1) == [16]
    taken = run(ReadBudget(target=1.0), 2)
    assert taken == [32, 16]  # 32 files took 2.3 s: at that pace ~14 fit a second, at most halving
    cheap = run(ReadBudget(target=1.0), 3, fixed=0.01, per_mb=0.001)
    assert cheap == [32, 128, 256]  # the pace says ~1,000 files: growth is held to 4x, then MAX_FILES


@pytest.mark.parametrize("target", [0.5, 1.0, 2.0])
def test_settles_where_a_call_takes_about_the_target(target):
    budget = ReadBudget(target=target)
    taken = run(budget, 12)
    settled = call_seconds(taken[-1] * FILE)
    assert abs(settled - target) <= 0.15 * target, (taken, settled)


def test_shrinks_when_calls_slow_down_and_grows_back():
    budget = ReadBudget(target=1.0)
    fast = run(budget, 10)[-1]
    slow = run(budget, 10, per_mb=0.26)[-1]  # four times the cost per byte: a loaded machine
    assert slow < fast / 2
    assert run(budget, 10)[-1] >= fast - 1


def test_a_backlog_of_small_files_is_capped_in_files():
    tiny = dict.fromkeys(FILES, 10)
    for cap, budget in ((256, ReadBudget(target=1.0)), (3, ReadBudget(target=1.0, max_files=3))):
        taken = []
        for _ in range(10):
            taken.append(budget.take(FILES, tiny))
            budget.done(0.01)
        assert max(taken) == taken[-1] == cap  # execution.source.max-files-per-read (default 256)


def test_a_file_over_a_fixed_budget_is_read_alone_and_unknown_sizes_count_zero():
    budget = ReadBudget(target=1.0, fixed=350)
    assert budget.take(["big", "small"], {"big": 900, "small": 10}) == 1
    assert budget.take(["a", "b", "c"], {}) == 3  # listed without sizes: all fit
    budget.done(100.0)  # BATCH: the fixed budget stays whatever a call took
    assert budget.take(["a", "b"], {"a": 200, "b": 200}) == 1


def test_a_call_of_files_without_sizes_leaves_the_budget_as_it_was():
    budget = ReadBudget(target=1.0)
    assert budget.take(["a", "b"], {}) == 2  # listed without sizes: both fit
    budget.done(0.3)  # no bytes known: no pace to learn from
    assert budget.take(FILES, SIZES) == 32


def test_the_fitted_cost_line_reaches_the_target_by_the_third_call():
    taken = run(ReadBudget(target=1.0), 3)
    assert taken[:2] == [32, 16]
    assert abs(call_seconds(taken[2] * FILE) - 1.0) <= 0.1, taken


def test_a_fixed_cost_near_the_target_gets_small_calls_and_one_over_it_one_file():
    """The target is the user's bound on a call (a checkpoint barrier waits behind one): a fixed
    part near it leaves room for little input per call, and one over it for a file."""
    taken = run(ReadBudget(target=1.0), 8, fixed=0.8, per_mb=0.05)
    assert abs(call_seconds(taken[-1] * FILE, fixed=0.8, per_mb=0.05) - 1.0) <= 0.06, taken
    assert run(ReadBudget(target=0.001), 4) == [1, 1, 1, 1]  # 1 ms: a file per call


def test_a_slow_first_call_does_not_keep_the_next_calls_small():
    """A young JVM's first call is an outlier (5.6 s for 23 files that take 1.2 s once warm): the
    calls after it grow back to about the target at once, not only when it leaves the history."""
    budget = ReadBudget(target=1.0)
    first = budget.take(FILES, SIZES)
    budget.done(5.6)  # cold: JIT, class loading
    taken = [first]
    for _ in range(5):
        n = budget.take(FILES, SIZES)
        taken.append(n)
        budget.done(call_seconds(n * FILE, fixed=0.15, per_mb=0.04))
    assert all(call_seconds(n * FILE, fixed=0.15, per_mb=0.04) <= 1.0 for n in taken[1:]), taken
    assert taken[-1] >= 15, taken  # ~20 files take the target; the stale line alone kept it at ~4
