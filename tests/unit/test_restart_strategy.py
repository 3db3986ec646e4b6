"""The JobManager's pure restart strategies and their configuration."""

import dataclasses
import random

import pytest

from jobmanager.scheduler.restart_strategy import (
    ExponentialDelayRestart,
    FixedDelayRestart,
    NoRestart,
    RestartDecision,
    RestartStrategy,
    from_config,
)


def delays(strategy, times):
    out = []
    for t in times:
        d = strategy.on_failure(t)
        out.append(d.delay if d.restart else None)
    return out


# -- NoRestart ----------------------------------------------------------------------
def test_no_restart_never_restarts_and_says_why():
    s = NoRestart()
    for t in (0.0, 100.0):
        d = s.on_failure(t)
        assert d.restart is False and d.delay == 0.0
        assert "none" in d.reason
    s.on_success(5.0)
    assert s.on_failure(200.0).restart is False


def test_strategies_are_restart_strategies():
    for s in (NoRestart(), FixedDelayRestart(1, 0.0), ExponentialDelayRestart()):
        assert isinstance(s, RestartStrategy)


def test_decision_is_frozen():
    d = RestartDecision(True, 1.0, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.restart = False  # type: ignore[misc]  # frozen: the point of the test


# -- FixedDelayRestart -----------------------------------------------------------------
def test_fixed_delay_restarts_attempts_times_then_gives_up():
    s = FixedDelayRestart(attempts=3, delay=2.5)
    for i in range(1, 4):
        d = s.on_failure(float(i))
        assert d == RestartDecision(True, 2.5, f"restart attempt {i} of 3 after 2.5s (fixed delay)")
    d = s.on_failure(10.0)
    assert d == RestartDecision(False, 0.0, "restart attempts exhausted (3 of 3)")
    assert s.on_failure(11.0).restart is False


def test_fixed_delay_attempts_count_over_the_jobs_life():
    s = FixedDelayRestart(attempts=2, delay=0.0)
    assert s.on_failure(0.0).restart
    s.on_success(1000.0)
    assert s.on_failure(2000.0).restart
    s.on_success(3000.0)
    d = s.on_failure(4000.0)
    assert not d.restart and d.reason == "restart attempts exhausted (2 of 2)"


def test_fixed_delay_zero_attempts():
    d = FixedDelayRestart(attempts=0, delay=1.0).on_failure(0.0)
    assert d == RestartDecision(False, 0.0, "restart attempts exhausted (0 of 0)")


@pytest.mark.parametrize(
    "attempts, delay", [(-1, 1.0), (1.5, 1.0), (True, 1.0), (1, -0.1), (1, float("nan")), (1, float("inf")), (1, "x")]
)
def test_fixed_delay_rejects_bad_arguments(attempts, delay):
    with pytest.raises(ValueError):
        FixedDelayRestart(attempts, delay)


# -- ExponentialDelayRestart -------------------------------------------------------------
def test_exponential_doubles_up_to_max():
    s = ExponentialDelayRestart(initial=1.0, max_delay=10.0, multiplier=2.0, reset_after=1000.0)
    assert delays(s, [0, 1, 2, 3, 4, 5, 6]) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_exponential_defaults():
    s = ExponentialDelayRestart()
    assert (s.initial, s.max_delay, s.multiplier, s.reset_after, s.jitter, s.attempts) == (
        0.5,
        30.0,
        2.0,
        60.0,
        0.0,
        None,
    )
    # unlimited attempts; reaches and stays at the 30 s cap
    ds = delays(s, [float(i) for i in range(20)])
    assert ds[:7] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert all(d == 30.0 for d in ds[6:])


def test_exponential_reason_names_attempt_and_delay():
    s = ExponentialDelayRestart(initial=1.0, attempts=5)
    s.on_failure(0.0)
    d = s.on_failure(1.0)
    assert d.restart and d.delay == 2.0
    assert d.reason == "restart attempt 2 of 5 after 2s (exponential delay, backoff 2s)"


def test_exponential_resets_after_a_long_enough_run():
    # restart due at failure + delay; a failure more than reset_after after
    # that starts over from initial
    s = ExponentialDelayRestart(initial=1.0, max_delay=100.0, reset_after=10.0)
    assert delays(s, [0.0, 1.0, 3.0]) == [1.0, 2.0, 4.0]  # restart due at 7.0
    assert delays(s, [17.0]) == [8.0]  # ran exactly 10 s: no reset
    # restart due at 25.0; fails at 35.5 -> ran 10.5 s > 10 s
    assert delays(s, [35.5, 36.0]) == [1.0, 2.0]


def test_exponential_backoff_time_does_not_count_as_running_time():
    s = ExponentialDelayRestart(initial=20.0, max_delay=40.0, reset_after=10.0)
    assert delays(s, [0.0]) == [20.0]
    # 20.5 s after the failure, but only 0.5 s after the restart: keep growing
    assert delays(s, [20.5]) == [40.0]


def test_exponential_on_success_resets_backoff_and_attempts():
    s = ExponentialDelayRestart(initial=1.0, max_delay=100.0, reset_after=1000.0, attempts=2)
    assert delays(s, [0.0, 1.0]) == [1.0, 2.0]
    s.on_success(2.0)
    assert delays(s, [3.0, 4.0, 5.0]) == [1.0, 2.0, None]


def test_exponential_attempts_exhausted_until_reset():
    s = ExponentialDelayRestart(initial=1.0, reset_after=10.0, attempts=2)
    assert delays(s, [0.0, 1.0]) == [1.0, 2.0]  # restart due at 3.0
    d = s.on_failure(4.0)
    assert d.restart is False and d.delay == 0.0
    assert d.reason.startswith("restart attempts exhausted (2 of 2)")
    # a long healthy run (from the restart due at 3.0) gives the attempts back
    assert delays(s, [13.5]) == [1.0]


def test_exponential_multiplier_one_is_a_constant_delay():
    s = ExponentialDelayRestart(initial=3.0, max_delay=3.0, multiplier=1.0)
    assert delays(s, [0, 1, 2]) == [3.0, 3.0, 3.0]


def test_exponential_jitter_is_deterministic_with_injected_rng():
    a = ExponentialDelayRestart(initial=1.0, max_delay=100.0, jitter=0.5, rng=random.Random(7))
    b = ExponentialDelayRestart(initial=1.0, max_delay=100.0, jitter=0.5, rng=random.Random(7))
    times = [float(i) for i in range(6)]
    da, db = delays(a, times), delays(b, times)
    assert da == db
    for base, d in zip([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], da, strict=True):
        assert base * 0.5 <= d <= base * 1.5
    assert da != [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def test_exponential_jitter_never_exceeds_max_and_base_keeps_growing():
    s = ExponentialDelayRestart(initial=1.0, max_delay=4.0, jitter=1.0, rng=random.Random(1))
    ds = delays(s, [float(i) for i in range(50)])
    assert all(0.0 <= d <= 4.0 for d in ds)
    assert s.backoff == 4.0


def test_exponential_jitter_uses_the_rng():
    class Fixed(random.Random):
        def uniform(self, _a: float, b: float) -> float:
            return b

    s = ExponentialDelayRestart(initial=2.0, max_delay=100.0, jitter=0.25, rng=Fixed())
    assert delays(s, [0.0, 1.0]) == [2.5, 5.0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0.0},
        {"initial": -1.0},
        {"initial": 2.0, "max_delay": 1.0},
        {"multiplier": 0.5},
        {"reset_after": 0.0},
        {"jitter": -0.1},
        {"jitter": 1.5},
        {"attempts": -1},
        {"attempts": 2.0},
        {"initial": float("nan")},
    ],
)
def test_exponential_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        ExponentialDelayRestart(**kwargs)


# -- from_config -----------------------------------------------------------------------
def test_from_config_default_is_fixed_delay_3_attempts_half_second():
    s = from_config({})
    assert isinstance(s, FixedDelayRestart)
    assert (s.attempts, s.delay) == (3, 0.5)


def test_from_config_none():
    assert isinstance(from_config({"restart-strategy": "none"}), NoRestart)
    assert isinstance(from_config({"restart-strategy": " None "}), NoRestart)


def test_from_config_fixed_delay():
    s = from_config(
        {
            "restart-strategy": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "5",
            "restart-strategy.fixed-delay.delay": "2",
        }
    )
    assert isinstance(s, FixedDelayRestart) and (s.attempts, s.delay) == (5, 2.0)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("0.25", 0.25),
        ("500ms", 0.5),
        ("500 ms", 0.5),
        ("2s", 2.0),
        ("1min", 60.0),
        ("1 h", 3600.0),
        ("0", 0.0),
        ("1e-1", 0.1),
    ],
)
def test_from_config_durations(text, seconds):
    s = from_config({"restart-strategy.fixed-delay.delay": text})
    assert isinstance(s, FixedDelayRestart)
    assert s.delay == pytest.approx(seconds)


def test_from_config_exponential_delay_defaults():
    s = from_config({"restart-strategy": "exponential-delay"})
    assert isinstance(s, ExponentialDelayRestart)
    assert (s.initial, s.max_delay, s.multiplier, s.reset_after, s.jitter, s.attempts) == (
        0.5,
        30.0,
        2.0,
        60.0,
        0.0,
        None,
    )


def test_from_config_exponential_delay_all_keys():
    s = from_config(
        {
            "restart-strategy": "exponential-delay",
            "restart-strategy.exponential-delay.initial-backoff": "1s",
            "restart-strategy.exponential-delay.max-backoff": "1min",
            "restart-strategy.exponential-delay.backoff-multiplier": "1.5",
            "restart-strategy.exponential-delay.reset-backoff-threshold": "10min",
            "restart-strategy.exponential-delay.jitter-factor": "0.1",
            "restart-strategy.exponential-delay.attempts": "7",
        }
    )
    assert isinstance(s, ExponentialDelayRestart)
    assert (s.initial, s.max_delay, s.multiplier, s.reset_after, s.jitter, s.attempts) == (
        1.0,
        60.0,
        1.5,
        600.0,
        0.1,
        7,
    )


def test_from_config_ignores_keys_of_other_strategies_and_unrelated_keys():
    s = from_config(
        {
            "restart-strategy": "none",
            "restart-strategy.fixed-delay.attempts": "9",
            "state.checkpoints.dir": "file:///tmp/x",
        }
    )
    assert isinstance(s, NoRestart)


@pytest.mark.parametrize(
    "config, key, accepted",
    [
        ({"restart-strategy": "failure-rate"}, "restart-strategy", "none, fixed-delay, exponential-delay"),
        (
            {"restart-strategy.fixed-delay.attempts": "three"},
            "restart-strategy.fixed-delay.attempts",
            "non-negative integer",
        ),
        (
            {"restart-strategy.fixed-delay.attempts": "-1"},
            "restart-strategy.fixed-delay.attempts",
            "non-negative integer",
        ),
        ({"restart-strategy.fixed-delay.delay": "soon"}, "restart-strategy.fixed-delay.delay", "duration in seconds"),
        ({"restart-strategy.fixed-delay.delay": "-1"}, "restart-strategy.fixed-delay.delay", "duration in seconds"),
        ({"restart-strategy.fixed-delay.delay": "5 days"}, "restart-strategy.fixed-delay.delay", "duration in seconds"),
        (
            {"restart-strategy": "exponential-delay", "restart-strategy.exponential-delay.initial-backoff": "0"},
            "restart-strategy.exponential-delay.initial-backoff",
            "positive duration",
        ),
        (
            {"restart-strategy": "exponential-delay", "restart-strategy.exponential-delay.max-backoff": "0.1"},
            "restart-strategy.exponential-delay.max-backoff",
            "initial-backoff",
        ),
        (
            {"restart-strategy": "exponential-delay", "restart-strategy.exponential-delay.backoff-multiplier": "0.5"},
            "restart-strategy.exponential-delay.backoff-multiplier",
            ">= 1.0",
        ),
        (
            {"restart-strategy": "exponential-delay", "restart-strategy.exponential-delay.backoff-multiplier": "nan"},
            "restart-strategy.exponential-delay.backoff-multiplier",
            ">= 1.0",
        ),
        (
            {
                "restart-strategy": "exponential-delay",
                "restart-strategy.exponential-delay.reset-backoff-threshold": "0s",
            },
            "restart-strategy.exponential-delay.reset-backoff-threshold",
            "positive duration",
        ),
        (
            {"restart-strategy": "exponential-delay", "restart-strategy.exponential-delay.jitter-factor": "2"},
            "restart-strategy.exponential-delay.jitter-factor",
            "between 0.0 and 1.0",
        ),
        (
            {"restart-strategy": "exponential-delay", "restart-strategy.exponential-delay.attempts": "1.5"},
            "restart-strategy.exponential-delay.attempts",
            "non-negative integer",
        ),
        (
            {"restart-strategy.fixed-delay.atempts": "3"},
            "restart-strategy.fixed-delay.atempts",
            "restart-strategy.fixed-delay.attempts",
        ),
        (
            {"restart-strategy.exponential-delay.max-backof": "3"},
            "restart-strategy.exponential-delay.max-backof",
            "restart-strategy.exponential-delay.max-backoff",
        ),
        ({"restart-strategy.failure-rate.delay": "3"}, "restart-strategy.failure-rate.delay", "unknown job option"),
        (
            {"restart-strategy": "none", "restart-strategy.fixed-delay.delay": "soon"},  # checked though not chosen
            "restart-strategy.fixed-delay.delay",
            "duration in seconds",
        ),
    ],
)
def test_from_config_bad_values_name_the_key_and_accepted_values(config, key, accepted):
    with pytest.raises(ValueError) as e:
        from_config(config)
    msg = str(e.value)
    assert msg.startswith(key + ":"), msg
    assert accepted in msg, msg


def test_from_config_strategies_are_independent_objects():
    cfg = {"restart-strategy.fixed-delay.attempts": "1"}
    a, b = from_config(cfg), from_config(cfg)
    assert a.on_failure(0.0).restart
    assert b.on_failure(0.0).restart
