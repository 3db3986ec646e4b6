"""The inputs of bench/batch_bench.py's parts (page views of examples/generate_page_views.py, cached
between invocations) and the checks of their outputs: the batch counts of Sluice and of the peer
(bench/output_check.py's rules, plus each key written once) and the failover job's copy (every
input row exactly once). Each check returns the run's `check_ok` and `check` text.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import shutil
import time
from collections.abc import Iterable
from typing import Any

from bench_common import write_atomically
from paired_runs import log


def cached_page_views(root: str, events: int, files: int, seed: int = 7) -> tuple[str, dict[str, int]]:
    """Page views of examples/generate_page_views.py under `root`, generated once per (events, files,
    seed) and reused: (the directory of the *.jsonl files, the expected count per url)."""
    from generate_page_views import generate

    base = os.path.join(os.path.abspath(root), f"page-views-{events}x{files}-seed{seed}")
    data, expected_path = os.path.join(base, "events"), os.path.join(base, "expected.json")
    if os.path.exists(expected_path):
        with open(expected_path) as f:
            expected = json.load(f)
        log(f"using cached input {data} ({events:,} events, {len(expected)} urls)")
        return data, expected
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.monotonic()
    expected = generate(data, events=events, files=files, urls=10_000, seed=seed)
    write_atomically(expected_path, json.dumps(expected))  # last: marks the directory complete
    log(f"generated {events:,} events in {files} files into {data} in {time.monotonic() - t0:.0f}s")
    return data, expected


def input_rows(directory: str) -> collections.Counter:
    """Every input row as the copy job writes it (`url,user,ts`), with its multiplicity."""
    rows: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        with open(path) as f:
            for line in f:
                if line.strip():
                    e = json.loads(line)
                    rows[f"{e['url']},{e['user']},{e['ts']}"] += 1
    return rows


def counts_check(parts: Iterable[tuple[str, Any]], expected: dict[str, int], want_files: int | None) -> dict:
    """bench/output_check.py's rules over committed `key,count` parts (no line twice, counts increasing,
    final counts exact), plus the batch rule: each key written once. `want_files`: the number of parts
    there must be (one per sink subtask), None: any."""
    from output_check import check_updates

    check = check_updates(parts, expected)
    text = check.describe()
    ok = check.ok
    if ok and check.lines != len(check.final):
        ok, text = False, f"VIOLATION: {check.lines:,} lines for {len(check.final):,} keys: a key written twice"
    elif ok and want_files is not None and check.files != want_files:
        ok, text = False, f"VIOLATION: {check.files} parts, expected {want_files} (one per sink subtask)"
    elif ok:
        text = f"exact: {len(check.final):,} urls once each, {check.files} part{'s' if check.files != 1 else ''}"
    return {"check_ok": ok, "check": text}


def sluice_counts(out: str, expected: dict[str, int], sink_parallelism: int) -> dict:
    from output_check import sluice_parts

    try:
        return counts_check(sluice_parts(out), expected, sink_parallelism)
    except (OSError, ValueError) as exc:
        return {"check_ok": False, "check": f"unreadable output: {type(exc).__name__}: {exc}"}


def peer_counts(out: str, expected: dict[str, int]) -> dict:
    """The peer's committed output: `_SUCCESS` there, then every part-*.csv."""
    from output_check import _csv_lines

    if not os.path.exists(os.path.join(out, "_SUCCESS")):
        return {"check_ok": False, "check": "no _SUCCESS: the write did not commit"}

    def parts():
        for path in sorted(glob.glob(os.path.join(out, "part-*"))):
            with open(path) as f:
                yield path, _csv_lines(f.read())

    return counts_check(parts(), expected, None)


def copy_check(out: str, expected: collections.Counter) -> dict:
    """Every input row exactly once among the committed parts of the copy job."""
    from sluice.output import committed_parts

    got: collections.Counter = collections.Counter()
    files = committed_parts(out)
    for path in files:
        with open(path) as f:
            got.update(line.rstrip("\n") for line in f if line.strip())
    if got == expected:
        return {"check_ok": True, "check": f"exact: {sum(got.values()):,} rows once each in {len(files)} parts"}
    twice = sum((got - expected).values())
    missing = sum((expected - got).values())
    return {"check_ok": False, "check": f"VIOLATION: {twice:,} rows too many, {missing:,} missing"}
