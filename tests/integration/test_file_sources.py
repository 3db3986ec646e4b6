"""File sources end to end (reader options, schemas inferred at submit, malformed rows and the
record counters in `status --json`) on the shared cluster: 2 TaskManagers, real
Spark, driven through the `sluice` CLI. Every job sums a value per key; the sums are checked
against the rows written, so a lost or doubled row shows."""

from __future__ import annotations

import collections
import csv
import glob
import json
import os
import random

import pytest
from harness import JOBS, read_counts, sluice
from helpers import wait_until

pytestmark = pytest.mark.integration

FILES = 4
JOB = os.path.join(JOBS, "file_source_sum.py")
COUNT_JOB = os.path.join(JOBS, "file_source_count.py")


def rows(file: int, n: int = 250) -> list[tuple[str, int]]:
    """Deterministic (key, value) rows of one input file."""
    return [(f"k{(file * 31 + i) % 7}", file * 1000 + i) for i in range(n)]


def sums(rows: list[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = collections.defaultdict(int)
    for k, v in rows:
        out[k] += v
    return dict(out)


def run(
    cluster, tmp_path, *args: str, parallelism: int = 2, job: str = JOB, options: dict[str, str] | None = None
) -> tuple[dict[str, int], dict]:
    """Run `job` (file_source_sum.py) over tmp_path/in into tmp_path/out (`options`: job options);
    the final sum (or count) per key (values are positive, so a key's largest is its last) and
    the job's `status --json`."""
    job_id = cluster.run(
        job, str(tmp_path / "in"), str(tmp_path / "out"), *args, parallelism=parallelism, options=options
    )
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=120,
        message=f"job {job_id} ended",
    )
    assert status["state"] == "FINISHED", status
    final, _ = read_counts(str(tmp_path / "out"))
    return final, status


def tasks(status: dict, operator: str) -> list[dict]:
    found = [t for t in status["tasks"] if t["operator"].split(" -> ")[0] == operator]
    assert found, [t["operator"] for t in status["tasks"]]
    return found


def total(tasks: list[dict], key: str) -> int:
    return sum(t[key] for t in tasks)


def write(tmp_path, name: str, lines: list[str]) -> None:
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / name).write_text("".join(f"{line}\n" for line in lines))


def test_headerless_csv_loses_no_row_and_counts_rows_read_before_pre_aggregation(cluster, tmp_path):
    everything = []
    for f in range(FILES):
        write(tmp_path, f"part-{f}.csv", [f"{k},{v}" for k, v in rows(f)])
        everything += rows(f)
    final, status = run(cluster, tmp_path)  # no schema: _c0 string, _c1 bigint inferred at submit
    assert final == sums(everything)  # the first line of every file is data (Spark's header=false)
    source = tasks(status, "read")
    assert {t["subtask"] for t in source} == {0, 1}
    assert total(source, "records_out") == len(everything)  # rows read
    assert total(source, "records_malformed") == 0
    sent = total(source, "records_sent")
    assert 0 < sent < len(everything)  # after pre-aggregation: at most 7 keys per batch
    aggregate = [t for t in status["tasks"] if t["operator"].startswith("aggregate")]
    assert total(aggregate, "records_in") == sent


def test_csv_with_a_header_and_another_separator(cluster, tmp_path):
    everything = []
    for f in range(FILES):
        write(tmp_path, f"part-{f}.csv", ["country;views", *(f"{k};{v}" for k, v in rows(f, 50))])
        everything += rows(f, 50)
    options = json.dumps({"header": True, "sep": ";"})
    final, status = run(cluster, tmp_path, "--options", options, "--key", "country", "--value", "views")
    assert final == sums(everything)
    assert total(tasks(status, "read"), "records_out") == len(everything)  # the header lines are not rows


def test_dropmalformed_drops_and_counts_one_bad_line_per_file(cluster, tmp_path):
    bad_lines = ["oops", "k1,not a number", "k2,3,4", "k3,5.5"]  # too few fields, not numbers, too many fields
    good = []
    for f in range(FILES):
        lines = [f"{k},{v}" for k, v in rows(f, 100)]
        lines.insert(f * 10, bad_lines[f])
        write(tmp_path, f"part-{f}.csv", lines)
        good += rows(f, 100)
    options = json.dumps({"mode": "DROPMALFORMED"})
    final, status = run(
        cluster, tmp_path, "--schema", "k string, v bigint", "--options", options, "--key", "k", "--value", "v"
    )
    assert final == sums(good)
    source = tasks(status, "read")
    assert total(source, "records_malformed") == FILES
    assert total(source, "records_out") == len(good)
    table = sluice("status", status["job_id"], "--cluster-dir", cluster.dir).stdout
    assert "malformed" in table


def test_json_lines_that_yield_nothing_are_counted_and_never_keyed(cluster, tmp_path):
    good = []
    for f in range(FILES):
        lines = [json.dumps({"k": k, "v": v}) for k, v in rows(f, 100)]
        lines.insert(5, "this line is not JSON")
        write(tmp_path, f"part-{f}.jsonl", lines)
        good += rows(f, 100)
    final, status = run(cluster, tmp_path, "--format", "json", "--key", "k", "--value", "v", parallelism=1)
    assert final == sums(good)  # on_error's default drops the malformed lines, and counts them
    source = tasks(status, "read")
    assert (total(source, "records_malformed"), total(source, "records_out")) == (FILES, len(good))
    assert total(source, "records_dropped") == status["records_dropped"] == FILES


def test_json_permissive_keeps_malformed_rows_in_the_corrupt_record_column(cluster, tmp_path):
    good, bad = [], []
    for f in range(FILES):
        lines = [json.dumps({"k": k, "v": v}) for k, v in rows(f, 100)]
        broken = [f'{{"k": "k{f}", "v": "not a number"}}', f"garbage {f}"]
        lines[3:3] = broken
        write(tmp_path, f"part-{f}.jsonl", lines)
        good += rows(f, 100)
        bad += broken
    options = json.dumps({"columnNameOfCorruptRecord": "_corrupt"})
    args = ["--format", "json", "--schema", "k string, v bigint, _corrupt string", "--options", options]
    args += ["--key", "k", "--value", "v", "--dead-letter", str(tmp_path / "dead"), "--corrupt", "_corrupt"]
    final, status = run(cluster, tmp_path, *args, parallelism=1)
    assert final == sums(good)
    assert sorted(dead_letters(str(tmp_path / "dead"))) == sorted(bad)  # each malformed line, as it was
    assert total(tasks(status, "read"), "records_malformed") == len(bad)


def garbage(rng: random.Random, size: int) -> list[bytes]:
    """About `size` bytes of random binary lines. Each holds a 0xFF byte, never valid UTF-8, so
    each is malformed whatever separators and quotes it happens to hold (README.md, "Reading
    files"), and none holds a line break, so the lines can be counted here."""
    lines: list[bytes] = []
    while sum(len(line) + 1 for line in lines) < size:
        raw = bytes(b for b in rng.randbytes(rng.randint(1, 400)) if b not in b"\r\n")
        at = rng.randint(0, len(raw))
        lines.append(raw[:at] + b"\xff" + raw[at:])
    return lines


def field(text: str) -> str:
    """A CSV field as Spark reads it by default: quoted when it holds a separator or a quote, a
    quote inside escaped with a backslash."""
    return '"' + text.replace('"', '\\"') + '"' if "," in text or '"' in text else text


def test_binary_garbage_and_rows_of_the_wrong_width_or_type_in_csv_never_become_data(cluster, tmp_path):
    rng = random.Random(31)
    good = [(f"k{rng.randrange(9)}", f"{rng.randrange(1000)},2024-01-{rng.randint(1, 28):02d}") for _ in range(400)]
    # valid too: a separator or an escaped quote in a quoted key (Spark's default escape is a
    # backslash), empty fields (nulls)
    good += [("k,quoted", "1,2024-02-01"), ('say "hi"', "2,2024-02-02"), ("k5", ",")]
    good_lines = [f"{field(k)},{rest}".encode() for k, rest in good]
    short = [b"k1,5", b"k2", b"k3,"]
    long = [b"k1,5,2024-01-02,extra", b"k4,1,2024-01-01,,", b'"k,5",1,2024-01-01,x']
    mistyped = [
        b"k5,not a number,2024-01-01",
        b"k6,5.5,2024-01-01",
        b"k7,3,not a date",
        b"k8,99999999999999999999,2024-01-01",
    ]
    binary = garbage(rng, 200_000)
    header = [b"k,n,day"]
    files = {
        "part-0.csv": header + good_lines[:150] + [b""] + binary + good_lines[150:200],
        "part-1.csv": header + short + good_lines[200:300] + [b"", b"   "] + long + mistyped,
        "part-2.csv": header + good_lines[300:] + [b""],
    }
    (tmp_path / "in").mkdir()
    for name, lines in files.items():
        (tmp_path / "in" / name).write_bytes(b"".join(line + b"\n" for line in lines))
    args = ["--schema", "k string, n bigint, day date", "--options", json.dumps({"header": True}), "--key", "k"]
    final, status = run(cluster, tmp_path, *args, job=COUNT_JOB)  # the job reads only k
    assert final == dict(collections.Counter(k for k, _rest in good))  # no invented key, none lost
    source = tasks(status, "read")
    bad = len(binary) + len(short) + len(long) + len(mistyped)  # empty and blank lines are no rows
    assert total(source, "records_malformed") == bad
    assert total(source, "records_out") == len(good)
    assert status["bad_record_samples"]


@pytest.mark.parametrize("format", ["json", "csv"])
def test_a_body_may_count_list_and_collect_a_file_batch(cluster, tmp_path, format):
    good = [(k, v) for f in range(FILES) for k, v in rows(f, 20)]
    for f in range(FILES):
        if format == "json":
            lines = [json.dumps({"k": k, "v": v}) for k, v in rows(f, 20)] + ["not JSON"]
        else:
            lines = [f"{k},{v}" for k, v in rows(f, 20)] + ["k1,not a number"]
        write(tmp_path, f"part-{f}.{'jsonl' if format == 'json' else 'csv'}", lines)
    final, status = run(cluster, tmp_path, "--format", format, "--inspect", job=COUNT_JOB)
    assert final == dict(collections.Counter(k for k, _v in good))
    assert total(tasks(status, "read"), "records_malformed") == FILES


@pytest.mark.parametrize("columns", ["all", "read"])
def test_a_bad_value_in_a_column_the_job_does_not_read_is_malformed_unless_only_read_columns_are_checked(
    cluster, tmp_path, columns
):
    good = [(k, v) for f in range(FILES) for k, v in rows(f, 30)]
    for f in range(FILES):
        lines = [json.dumps({"k": k, "v": v, "n": v}) for k, v in rows(f, 30)]
        lines += [json.dumps({"k": "k1", "v": 1, "n": "not a number"}), "not JSON"]
        write(tmp_path, f"part-{f}.jsonl", lines)
    args = ["--format", "json", "--schema", "k string, v bigint, n bigint"]  # the job reads k only
    options = {"execution.source.malformed-columns": columns}
    final, status = run(cluster, tmp_path, *args, job=COUNT_JOB, options=options)
    expected = collections.Counter(k for k, _v in good)
    if columns == "read":  # the bad n goes unseen: its row is data; a line that is not JSON never is
        expected["k1"] += FILES
    assert final == dict(expected)
    assert total(tasks(status, "read"), "records_malformed") == (2 if columns == "all" else 1) * FILES


def dead_letters(directory: str) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*"))):
        if not os.path.basename(path).startswith((".", "_")):
            with open(path, newline="") as f:
                out += [row[0] for row in csv.reader(f)]
    return out
