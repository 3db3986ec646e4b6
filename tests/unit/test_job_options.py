"""sluice/job_options.py (the job-options table), sluice/units.py (the one
duration/size parser) and the generated option tables of the documentation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobmanager.master.checkpointing import checkpoint_config
from jobmanager.scheduler.restart_strategy import ExponentialDelayRestart, FixedDelayRestart, from_config
from sluice import config, job_options, reference_docs, units
from sluice.job_options import JobConfigError

ROOT = Path(__file__).resolve().parents[2]
GENERATED_DOCS = ("README.md", "docs/configuration.md")


# -- units ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw,bare,seconds",
    [
        ("500ms", "s", 0.5),
        ("60s", "s", 60.0),
        ("2min", "s", 120.0),
        ("1h", "s", 3600.0),
        ("1 H", "s", 3600.0),
        ("1.5s", "ms", 1.5),
        ("0", "s", 0.0),
        ("1e-1", "s", 0.1),
        (" 7 ", "s", 7.0),
        (3, "s", 3.0),
        (0.25, "s", 0.25),
        ("250", "ms", 0.25),
        (1000, "ms", 1.0),
        ("60000", "ms", 60.0),
        ("500ms", "ms", 0.5),
    ],
)
def test_durations(raw, bare, seconds):
    assert units.parse_duration(raw, bare) == pytest.approx(seconds)


def test_bare_milliseconds_divide_exactly_as_before():
    for ms in ("1", "3", "250", "333", "1000", "60000", "0.5"):
        assert units.parse_duration(ms, "ms") == float(ms) / 1000


@pytest.mark.parametrize(
    "raw",
    [
        "soon",
        "5 days",
        "-1",
        "-1s",
        "inf",
        "nan",
        "1e400",
        "",
        "1 2",
        "s",
        True,
        None,
        float("nan"),
        float("inf"),
        "10 m",
    ],
)
def test_bad_durations_say_what_is_accepted(raw):
    with pytest.raises(
        ValueError,
        match=r"expected a non-negative duration in seconds, or with a unit ms, s, "
        r"min or h \(e\.g\. 500ms, 60s, 2min, 1h\), got ",
    ):
        units.parse_duration(raw, "s")


def test_positive_durations_refuse_zero():
    with pytest.raises(ValueError, match="expected a positive duration in milliseconds"):
        units.parse_duration("0s", "ms", positive=True)


@pytest.mark.parametrize(
    "raw,size",
    [
        ("64mb", 64 << 20),
        ("1gb", 1 << 30),
        ("1GB", 1 << 30),
        ("4096", 4096),
        (4096, 4096),
        ("1.5kb", 1536),
        ("10 b", 10),
        ("2tb", 2 << 40),
        ("0", 0),
    ],
)
def test_sizes(raw, size):
    assert units.parse_size(raw) == size


@pytest.mark.parametrize("raw", ["64 mib", "-1mb", "0.5", "big", True, "1.0000001kb"])
def test_bad_sizes(raw):
    with pytest.raises(ValueError, match=r"expected a size in bytes, or with a unit b, kb, mb, gb or tb"):
        units.parse_size(raw)


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0.5, "500ms"),
        (6.0, "6s"),
        (60.0, "1min"),
        (90.0, "90s"),
        (3600.0, "1h"),
        (0.0, "0"),
        (0.0005, "0.0005s"),
        (1.25, "1250ms"),
    ],
)
def test_format_duration_round_trips(seconds, text):
    assert units.format_duration(seconds) == text
    assert units.parse_duration(text) == pytest.approx(seconds)


def test_format_bytes_picks_the_unit_people_read():
    assert [units.format_bytes(n) for n in (512, 3 * 1024, 12 << 20, 3 << 29)] == [
        "512 B",
        "3 KiB",
        "12 MiB",
        "1.5 GiB",
    ]


def test_format_size():
    assert [units.format_size(n) for n in (64 << 20, 1 << 30, 100, 0, 1536)] == ["64mb", "1gb", "100b", "0", "1536b"]


def test_process_and_job_options_share_the_parser():
    assert config.HEARTBEAT_TIMEOUT.parse("1500ms") == units.parse_duration("1500ms", "s")
    assert job_options.FIXED_DELAY_DELAY.parse("1500ms") == units.parse_duration("1500ms", "s")
    assert job_options.CHECKPOINTING_TIMEOUT.parse("1500") == 1.5  # bare milliseconds, as always


# -- the job-options table --------------------------------------------------------------------
def test_table_holds_every_key_once_and_every_constant():
    named = {v.key for k, v in vars(job_options).items() if k.isupper() and isinstance(v, job_options.JobOption)}
    assert named == set(job_options.BY_KEY) and len(job_options.JOB_OPTIONS) == len(named)
    assert all(o.key.startswith(job_options.FAMILIES) for o in job_options.JOB_OPTIONS)


def test_defaults():
    o = job_options.checkpointing({})
    assert o == job_options.Checkpointing(
        interval=0.0, timeout=60.0, min_pause=0.0, tolerable_failures=0, retained=2, directory=None
    )
    assert job_options.RESTART_STRATEGY.read({}) == "fixed-delay"
    assert job_options.EXPONENTIAL_ATTEMPTS.read({}) is None


def test_checkpoint_keys_take_bare_milliseconds_or_units():
    o = job_options.checkpointing(
        {
            "execution.checkpointing.interval": "1000",
            "execution.checkpointing.timeout": "2min",
            "execution.checkpointing.min-pause": "250",
            "execution.checkpointing.tolerable-failed-checkpoints": "3",
            "state.checkpoints.num-retained": "5",
            "state.checkpoints.dir": " s3://bucket/ckpt ",
        }
    )
    assert (o.interval, o.timeout, o.min_pause, o.tolerable_failures, o.retained, o.directory) == (
        1.0,
        120.0,
        0.25,
        3,
        5,
        "s3://bucket/ckpt",
    )


def test_empty_interval_and_directory_keep_their_old_meaning():
    o = job_options.checkpointing({"execution.checkpointing.interval": "", "state.checkpoints.dir": ""})
    assert o.interval == 0.0 and o.directory is None


@pytest.mark.parametrize(
    "key,raw,words",
    [
        ("execution.checkpointing.interval", "-5", "non-negative duration in milliseconds"),
        ("execution.checkpointing.interval", "often", "non-negative duration in milliseconds"),
        ("execution.checkpointing.timeout", "0", "positive duration in milliseconds"),
        ("execution.checkpointing.min-pause", "1 day", "duration in milliseconds"),
        ("execution.checkpointing.tolerable-failed-checkpoints", "-1", "non-negative integer"),
        ("execution.checkpointing.tolerable-failed-checkpoints", "1.5", "non-negative integer"),
        ("state.checkpoints.num-retained", "0", "integer >= 1"),
        ("state.checkpoints.num-retained", "two", "integer >= 1"),
    ],
)
def test_bad_checkpoint_values_name_the_key_the_value_and_the_forms(key, raw, words):
    with pytest.raises(JobConfigError) as e:
        job_options.checkpointing({key: raw})
    assert str(e.value).startswith(f"{key}: expected ") and words in str(e.value) and repr(raw) in str(e.value)
    assert e.value.key == key and isinstance(e.value, ValueError)


@pytest.mark.parametrize(
    "key,suggestion",
    [
        ("execution.checkpointing.intervall", "execution.checkpointing.interval"),
        ("execution.checkpointing.min_pause", "execution.checkpointing.min-pause"),
        ("state.checkpoint.dir", "state.checkpoints.dir"),
        ("state.checkpoints.num-retain", "state.checkpoints.num-retained"),
        ("restart-strategy.fixed-delay.atempts", "restart-strategy.fixed-delay.attempts"),
    ],
)
def test_unknown_keys_of_the_families_suggest_the_right_one(key, suggestion):
    with pytest.raises(
        JobConfigError,
        match=rf"^{key}: unknown job option; did you mean '{suggestion}'\? "
        rf"Accepted keys: .*{suggestion}",
    ):
        job_options.validate({key: "1"})


def test_keys_outside_the_families_belong_to_the_job():
    job_options.validate({"pipeline.name": "x", "my.own.key": "y", "execution.checkpointing.interval": "5s"})


def test_validate_checks_every_value():
    with pytest.raises(JobConfigError, match="restart-strategy.exponential-delay.jitter-factor"):
        job_options.validate({"restart-strategy": "none", "restart-strategy.exponential-delay.jitter-factor": "2"})


# -- the JobManager reads through the table ------------------------------------------------------
def test_checkpoint_config_reads_through_the_table():
    assert checkpoint_config({}) is None
    assert checkpoint_config({"execution.checkpointing.interval": "0"}) is None
    c = checkpoint_config(
        {
            "execution.checkpointing.interval": "500",
            "execution.checkpointing.timeout": "10s",
            "state.checkpoints.num-retained": "3",
        }
    )
    assert c is not None
    assert (c.interval, c.timeout, c.min_pause, c.tolerable_failures, c.retained) == (0.5, 10.0, 0.0, 0, 3)
    with pytest.raises(ValueError, match="^execution.checkpointing.timeout: "):
        checkpoint_config({"execution.checkpointing.interval": "1s", "execution.checkpointing.timeout": "x"})


def test_from_config_takes_the_table_defaults():
    s = from_config({})
    assert isinstance(s, FixedDelayRestart)
    assert (s.attempts, s.delay) == (job_options.FIXED_DELAY_ATTEMPTS.default, job_options.FIXED_DELAY_DELAY.default)
    e = from_config({"restart-strategy": "exponential-delay"})
    assert isinstance(e, ExponentialDelayRestart)
    assert (e.initial, e.max_delay, e.multiplier, e.reset_after, e.jitter, e.attempts) == tuple(
        o.default
        for o in (
            job_options.EXPONENTIAL_INITIAL_BACKOFF,
            job_options.EXPONENTIAL_MAX_BACKOFF,
            job_options.EXPONENTIAL_MULTIPLIER,
            job_options.EXPONENTIAL_RESET_THRESHOLD,
            job_options.EXPONENTIAL_JITTER,
            job_options.EXPONENTIAL_ATTEMPTS,
        )
    )


def test_submit_turns_a_bad_option_into_a_config_validation_error():
    """The dispatcher's JobMaster constructor raises ValueError; submit reports JobValidationError("config", ...)."""
    from jobmanager.job_master import JobMaster
    from sluice.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a"}]).print()
    job = env.get_job_graph("bad")
    job.config["restart-strategy.fixed-delay.delay"] = "soon"  # a client other than the job API's
    with pytest.raises(ValueError, match=r"^restart-strategy\.fixed-delay\.delay: expected a non-negative duration"):
        JobMaster("j", job, gateway=None, checkpoint_dir=None)  # type: ignore[arg-type]  # refused before any call


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("checkpointing.interval", "execution.checkpointing.interval"),  # the family left out
        ("checkpoint.interval", "execution.checkpointing.interval"),
        ("restart_strategy", "restart-strategy"),  # _ for -
        ("Execution.Checkpointing.Interval", "execution.checkpointing.interval"),  # another case
        ("checkpoints.dir", "state.checkpoints.dir"),
        ("execution.checkpointing.intrval", "execution.checkpointing.interval"),
    ],
)
def test_a_mistyped_option_outside_the_families_is_refused_with_a_did_you_mean(key, meant):
    with pytest.raises(job_options.JobConfigError, match=f"did you mean '{re.escape(meant)}'"):
        job_options.validate({key: "5"})


@pytest.mark.parametrize("key", ["input.path", "parallelism", "window.size", "interval", "retries", "my.app.key"])
def test_the_jobs_own_keys_are_left_alone(key):
    job_options.validate({key: "anything"})


@pytest.mark.parametrize("value", ["-5", "nan", "NaN", "inf", "-1s", "five"])
def test_a_negative_or_not_finite_checkpoint_interval_is_refused(value):
    with pytest.raises(job_options.JobConfigError, match="execution.checkpointing.interval"):
        job_options.validate({"execution.checkpointing.interval": value})


@pytest.mark.parametrize("interval", [-5, float("nan"), float("inf"), "500", True, None])
def test_enable_checkpointing_refuses_what_is_not_a_number_of_milliseconds(interval):
    from sluice.api import StreamExecutionEnvironment

    with pytest.raises(ValueError, match="enable_checkpointing: interval_ms"):
        StreamExecutionEnvironment().enable_checkpointing(interval)


def test_set_config_fails_at_the_line_that_set_a_bad_option():
    from sluice.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment()
    with pytest.raises(ValueError, match="set_config: restart-strategy.fixed-delay.delay: expected"):
        env.set_config("restart-strategy.fixed-delay.delay", "soon")
    with pytest.raises(ValueError, match="did you mean 'execution.checkpointing.interval'"):
        env.set_config("checkpointing.interval", 500)
    env.set_config("input.path", "/data")  # the job's own
    env.enable_checkpointing(250)
    assert env.get_job_graph().config["execution.checkpointing.interval"] == "250"


# -- the reference tables in the documentation ------------------------------------------------
def test_reference_table_lists_every_job_option():
    table = job_options.reference()
    assert all(f"| `{o.key}` |" in table for o in job_options.JOB_OPTIONS)
    assert "| 1min |" in table and "none \\| fixed-delay \\| exponential-delay" in table


@pytest.mark.parametrize("doc", GENERATED_DOCS)
def test_generated_tables_in_the_docs_are_current(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    option_tables = {"process-options", "job-options"}  # the architecture's blocks: test_architecture_doc.py
    assert set(reference_docs.blocks_in(text)) == option_tables, f"{doc} lacks a generated option table"
    assert reference_docs.render(text) == text, (
        f"the option tables in {doc} are stale: run `make docs-config` "
        f"(python -m sluice.reference_docs {' '.join(GENERATED_DOCS)})"
    )


def test_reference_docs_rewrites_only_the_blocks(tmp_path, capsys):
    path = tmp_path / "x.md"
    path.write_text(
        "intro\n<!-- BEGIN GENERATED job-options: make docs-config -->\nold\n"
        "<!-- END GENERATED job-options -->\noutro\n"
    )
    assert reference_docs.main(["--check", str(path)]) == 1
    assert "make docs-config" in capsys.readouterr().err
    assert reference_docs.main([str(path)]) == 0
    text = path.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and job_options.reference() in text
    assert reference_docs.main(["--check", str(path)]) == 0
