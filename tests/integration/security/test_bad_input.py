"""Bad input is visible, never silent: malformed JSON lines, binary garbage, rows with a null key
and values of the wrong type, read by a file source under each `on_error` policy on a small
shared cluster (2 TaskManagers, real Spark, driven through the `sluice` CLI). Every job
sums a value per key; the sums are checked against the good rows written, the counters
(`records_malformed`, `records_dropped`, the job's numRecordsDropped) are exact, and a sample of
the bad lines shows in `sluice status` and `status --json`."""

from __future__ import annotations

import collections
import csv
import glob
import json
import os
import random
import re

import pytest
from harness import JOBS, read_counts, sluice
from helpers import wait_until

JOB = os.path.join(JOBS, "bad_input_sum.py")


def good_rows(file: int, n: int = 100) -> list[tuple[str, int]]:
    return [(f"k{(file * 31 + i) % 5}", file * 1000 + i) for i in range(n)]


def sums(rows: list[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = collections.defaultdict(int)
    for k, v in rows:
        out[k] += v
    return dict(out)


def write(directory, name: str, lines: list[str] | bytes) -> None:
    directory.mkdir(exist_ok=True)
    data = lines if isinstance(lines, bytes) else "".join(f"{line}\n" for line in lines).encode()
    (directory / name).write_bytes(data)


def run(cluster, tmp_path, *args: str, state: str = "FINISHED", parallelism: int = 2) -> tuple[dict[str, int], dict]:
    job_id = cluster.run(JOB, str(tmp_path / "in"), str(tmp_path / "out"), *args, parallelism=parallelism)
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=180,
        message=f"job {job_id} ended",
    )
    assert status["state"] == state, status
    final = read_counts(str(tmp_path / "out"))[0] if os.path.isdir(tmp_path / "out") else {}
    return final, status


def source(status: dict) -> list[dict]:
    return [t for t in status["tasks"] if t["operator"].split(" -> ")[0] == "read"]


def total(tasks: list[dict], key: str) -> int:
    return sum(t[key] for t in tasks)


# JSON lines that do not parse as `k string, v bigint`, and what makes each malformed
BAD_JSON = [
    "this line is not JSON",
    '{"k": "k1", "v": "7"}',  # a string where a bigint goes: not coerced
    '{"k": "k2", "v": 7.5}',  # a fraction
    '{"k": "k3", "v": true}',  # a boolean
    '{"k": "k4", "v": 99999999999999999999}',  # beyond a bigint
    "[1, 2]",  # JSON, but not an object
    '{"k": "k0", "v": 1',  # cut short
]
NULL_KEYS = ['{"v": 5}', '{"k": null, "v": 6}']  # parse, but have no key


@pytest.mark.integration
def test_malformed_json_wrong_types_and_null_keys_are_dropped_counted_and_sampled(cluster, tmp_path):
    good = []
    for f in range(2):
        lines = [json.dumps({"k": k, "v": v}) for k, v in good_rows(f)]
        lines[10:10] = BAD_JSON
        lines[50:50] = NULL_KEYS
        write(tmp_path / "in", f"part-{f}.jsonl", lines)
        good += good_rows(f)
    final, status = run(cluster, tmp_path)  # on_error: the default, drop
    assert final == sums(good)  # nothing merged under "" or a null key, nothing coerced
    read = source(status)
    malformed, null_keys = 2 * len(BAD_JSON), 2 * len(NULL_KEYS)
    assert total(read, "records_malformed") == malformed
    assert total(read, "records_out") == len(good) + null_keys  # the null-key rows parsed; key_by drops them
    assert total(read, "records_dropped") == malformed + null_keys
    assert status["records_dropped"] == malformed + null_keys  # the job's numRecordsDropped
    samples = status["bad_record_samples"]
    assert samples and all(s.startswith(("part-0.jsonl: ", "part-1.jsonl: ")) for s in samples), samples
    assert {s.split(": ", 1)[1] for s in samples} <= set(BAD_JSON), samples
    text = sluice("status", status["job_id"], "--cluster-dir", cluster.dir).stdout
    assert f"numRecordsDropped {malformed + null_keys}" in text
    assert any(s in text for s in samples), text


@pytest.mark.integration
def test_200_kb_of_binary_garbage_becomes_no_event(cluster, tmp_path):
    rng = random.Random(12)
    garbage = bytearray(b for b in rng.randbytes(220_000) if b not in b"\r\n")[:204_800]
    for i in range(99, len(garbage), 100):  # 2048 lines of 99 random bytes
        garbage[i] = ord("\n")
    write(tmp_path / "in", "garbage.jsonl", bytes(garbage))
    good = good_rows(0)
    write(tmp_path / "in", "good.jsonl", [json.dumps({"k": k, "v": v}) for k, v in good])
    final, status = run(cluster, tmp_path)
    assert final == sums(good)  # no phantom event
    read = source(status)
    # Every garbage line is dropped and counted: as malformed, or — a line that starts with a whole
    # JSON object, such as `{}` and then garbage, which Spark's JSON reader takes for that object —
    # as a row without a key.
    assert status["records_dropped"] == total(read, "records_dropped") == 2048
    parsed_garbage = 2048 - total(read, "records_malformed")
    assert total(read, "records_out") == len(good) + parsed_garbage
    assert parsed_garbage <= 2  # 1 with this seed: `{}\xf9\xf1][&...`
    assert status["bad_record_samples"] and all(s.startswith("garbage.jsonl: ") for s in status["bad_record_samples"])
    assert all(s.isprintable() and len(s) <= 200 for s in status["bad_record_samples"])  # escaped, truncated


@pytest.mark.integration
def test_csv_wrong_types_short_and_long_rows_are_malformed_and_an_empty_key_is_null(cluster, tmp_path):
    bad = ["a,1.5", "b,x", "c", "d,1,2", "e,1e3"]  # a fraction, text, too few and too many fields, not a bigint
    good = good_rows(0)
    write(tmp_path / "in", "part-0.csv", [*bad, ",5", *(f"{k},{v}" for k, v in good)])  # ",5": a null key
    final, status = run(cluster, tmp_path, "--format", "csv")
    assert final == sums(good)
    read = source(status)
    assert total(read, "records_malformed") == len(bad)
    assert total(read, "records_dropped") == len(bad) + 1


@pytest.mark.integration
def test_on_error_fail_fails_the_job_at_once_naming_the_file_and_the_line(cluster, tmp_path):
    lines = [json.dumps({"k": k, "v": v}) for k, v in good_rows(0)]
    lines.insert(20, '{"k": "k1", "v": "seven"}')
    write(tmp_path / "in", "part-0.jsonl", lines)
    # parallelism 1: both tasks share a slot, so the source's failure reaches the JobManager in
    # its TaskManager's ordered reports before its consumer's broken input does (across two
    # TaskManagers the consumer's report can come first, and that one restarts the job once)
    _, status = run(cluster, tmp_path, "--on-error", "fail", state="FAILED", parallelism=1)
    assert status["restarts"] == 0, status["exceptions"]  # non-recoverable: the same input fails the same way
    assert "malformed record (on_error='fail') in file:" in status["failure"]
    assert 'part-0.jsonl: {"k": "k1", "v": "seven"}' in status["failure"]
    assert status["exceptions"] and not status["exceptions"][-1]["restarted"]


@pytest.mark.integration
def test_on_error_dead_letter_writes_each_bad_line_as_it_was_with_its_file(cluster, tmp_path):
    good, bad = [], []
    for f in range(2):
        lines = [json.dumps({"k": k, "v": v}) for k, v in good_rows(f)]
        lines[5:5] = BAD_JSON
        lines[60:60] = NULL_KEYS
        write(tmp_path / "in", f"part-{f}.jsonl", lines)
        good += good_rows(f)
        bad += [(f"part-{f}.jsonl", line) for line in BAD_JSON]
    dead = tmp_path / "dead"
    final, status = run(cluster, tmp_path, "--on-error", f"dead_letter:{dead}")
    assert final == sums(good)
    letters = []
    for path in sorted(glob.glob(str(dead / "part-*"))):
        with open(path, newline="") as part:
            letters += [(os.path.basename(file), record) for file, record in csv.reader(part)]
    assert sorted(letters) == sorted(bad)  # each malformed line once, as it was, with its file
    read = source(status)
    assert total(read, "records_malformed") == len(bad)
    assert status["records_dropped"] == 2 * len(NULL_KEYS)  # set aside, not dropped; the null keys are


# -- at submit, no cluster ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("on_error", "options", "error"),
    [
        ("drop", {"mode": "FAILFAST"}, "'drop' contradicts the reader option mode='FAILFAST'"),
        ("fail", {"mode": "DROPMALFORMED"}, "'fail' contradicts the reader option mode='DROPMALFORMED'"),
        ("dead_letter:/tmp/bad", {"mode": "PERMISSIVE"}, "leave mode out"),
        ("dead_letter:", {}, "needs a directory"),
        ("skip", {}, 'expected "drop", "fail" or "dead_letter:DIR"'),
    ],
)
def test_on_error_and_mode_never_contradict(tmp_path, on_error, options, error):
    from sluice.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment()
    with pytest.raises(ValueError, match=f"from_files: on_error: .*{re.escape(error)}"):
        env.from_files(str(tmp_path), schema="k string, v bigint", options=options, on_error=on_error)


def test_a_text_source_has_no_on_error(tmp_path):
    from sluice.api import StreamExecutionEnvironment

    with pytest.raises(ValueError, match="a line of text is never malformed"):
        StreamExecutionEnvironment().from_files(str(tmp_path), format="text", on_error="fail")


@pytest.mark.parametrize(
    ("on_error", "options", "policy"),
    [
        (None, {}, "drop"),
        ("drop", {"mode": "dropmalformed"}, "drop"),
        ("fail", {}, "fail"),
        (None, {"mode": "FAILFAST"}, "fail"),
        (None, {"mode": "PERMISSIVE"}, "keep"),
        (None, {"columnNameOfCorruptRecord": "_bad"}, "keep"),  # a corrupt-record column asks to see them
        ("drop", {"columnNameOfCorruptRecord": "_bad"}, "drop"),
    ],
)
def test_the_policy_of_on_error_and_mode(on_error, options, policy):
    from sluice.schema_inference import error_policy

    assert error_policy("json", options, on_error) == (policy, None)
    if "mode" not in options:
        assert error_policy("csv", options, "dead_letter: /data/bad ") == ("dead_letter", "/data/bad")
