"""bench/state_bench.py's two jobs, dedup and join: what each is (`JOBS`: its output columns; the
Sluice example that runs it and the dedup forms' flags; the input's seeds), and its input generated
with its expected answer and output check (`prepare_dedup`, `prepare_join` -> `Data`). Pure but for
the input files it writes; no Spark, no cluster."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from paired_runs import SLUICE
from state_bench_checks import (
    DEDUP_COLUMNS,
    JOIN_COLUMNS,
    Check,
    check_dedup_exact,
    check_dedup_peer,
    check_join,
    expected_firsts,
)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
DEDUP_JOB = os.path.join(EXAMPLES, "dedup.py")
JOIN_JOB = os.path.join(EXAMPLES, "click_join.py")
EVENTS_PER_FILE = 12_500
PAGE_SEED = 7
CLICK_SEED = 11
FORM_FLAGS = {"builtin": " --builtin", "batch": " --batch-form"}  # --dedup-operator -> examples/dedup.py's flag


@dataclass(frozen=True)
class Job:
    name: str
    label: str
    columns: tuple[str, ...]


JOBS = {
    "dedup": Job("dedup", "dedup (first event per user within the TTL)", tuple(DEDUP_COLUMNS)),
    "join": Job("join", "interval join (clicks within 10 min of their impression)", tuple(JOIN_COLUMNS)),
}


@dataclass
class Data:
    """One job's input and its expected answer."""

    job: Job
    inputs: dict  # the query's / the job's inputs and parameters
    dirs: list[str]  # input directories (the window starts at the first read of a file in any)
    events: int
    check: Callable[[str, Any], Check]  # (system, rows) -> the check


def read_jsonl(directory: str, columns: Sequence[str]) -> Any:
    """The `columns` of every *.jsonl file in `directory` (file-name order) as one DataFrame."""
    import pandas as pd

    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    if not names:
        raise FileNotFoundError(f"no *.jsonl files in {directory}")
    frames = [pd.read_json(os.path.join(directory, n), lines=True, dtype=False)[list(columns)] for n in names]
    return pd.concat(frames, ignore_index=True)


def count_lines(directory: str) -> int:
    """Non-empty lines of the *.jsonl files in `directory`."""
    n = 0
    for name in sorted(os.listdir(directory)):
        if name.endswith(".jsonl"):
            with open(os.path.join(directory, name), "rb") as f:
                n += sum(1 for line in f if line.strip())
    return n


def prepare_dedup(
    work: str, events: int, users: int, disorder_ms: int, ttl_ms: int, form: str = "process"
) -> tuple[Data, dict]:
    from generate_page_views import generate

    data = os.path.join(work, "page-views")
    files = max(1, -(-events // EVENTS_PER_FILE))
    generate(data, events=events, files=files, urls=10_000, seed=PAGE_SEED, disorder_ms=disorder_ms, users=users)
    frame = read_jsonl(data, DEDUP_COLUMNS)
    expected = expected_firsts(frame, ttl_ms)
    input_frame = frame[DEDUP_COLUMNS]

    def check(system: str, got: Any) -> Check:
        if system == SLUICE:
            return check_dedup_exact(got, expected)
        return check_dedup_peer(got, input_frame, ttl_ms)

    d = Data(
        JOBS["dedup"],
        {"job": "dedup", "input": data, "ttl_ms": ttl_ms, "delay_ms": disorder_ms, "form": form},
        [data],
        len(frame),
        check,
    )
    return d, {"dedup_events": len(frame), "dedup_files": files, "expected_dedup": len(expected)}


def prepare_join(work: str, impressions: int, disorder_ms: int, upper_ms: int) -> tuple[Data, dict]:
    from generate_clicks import expected_joins, generate

    data = os.path.join(work, "clicks-data")
    files = max(1, -(-impressions // EVENTS_PER_FILE))
    generate(data, impressions=impressions, files=files, disorder_ms=disorder_ms, seed=CLICK_SEED)
    imps = read_jsonl(os.path.join(data, "impressions"), ["imp_id", "ad"])
    clicks = count_lines(os.path.join(data, "clicks"))
    ads = dict(zip(imps["imp_id"].tolist(), imps["ad"].tolist(), strict=True))
    expected = expected_joins(data, 0, upper_ms)

    def check(_system: str, got: Any) -> Check:
        return check_join(got, expected, ads)

    inputs: dict[str, Any] = {
        "job": "join",
        "impressions": os.path.join(data, "impressions"),
        "clicks": os.path.join(data, "clicks"),
        "upper_ms": upper_ms,
        "delay_ms": disorder_ms,
    }
    d = Data(JOBS["join"], inputs, [inputs["impressions"], inputs["clicks"]], len(imps) + clicks, check)
    return d, {
        "impressions": len(imps),
        "clicks": clicks,
        "join_files": files,
        "expected_join": sum(expected.values()),
    }
