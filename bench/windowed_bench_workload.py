"""bench/windowed_bench.py's workloads and the check of their output (pure): the two windows
(`WORKLOADS`: tumbling 10 s; sliding 60 s every 10 s), the input's seed, and the exactness check of
committed window rows `url,window_start,window_end,count` against the counts
examples/generate_page_views.py computes (`check_windows`: complete for Sluice; for the peer the
windows its final watermark passed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from paired_runs import read_rows

COLUMNS = ["url", "window_start", "window_end", "count"]
KEY = ["url", "window_start", "window_end"]
EVENTS_PER_FILE = 12_500
SEED = 7


@dataclass(frozen=True)
class Workload:
    """A window of the count: `size_ms` every `slide_ms` (tumbling when the two are equal)."""

    name: str
    size_ms: int
    slide_ms: int

    @property
    def label(self) -> str:
        if self.size_ms == self.slide_ms:
            return f"tumbling {self.size_ms / 1000:g} s"
        return f"sliding {self.size_ms / 1000:g} s every {self.slide_ms / 1000:g} s"


WORKLOADS = {"tumbling": Workload("tumbling", 10_000, 10_000), "sliding": Workload("sliding", 60_000, 10_000)}


@dataclass
class WindowCheck:
    """The committed windows against the expected ones. `complete`: every expected window must be
    there (Sluice); otherwise only emitted windows are judged, and those with an end at or below
    `emitted_through` must be there (the peer's final watermark)."""

    rows: int = 0  # lines read
    expected: int = 0  # expected (url, window) rows
    duplicates: int = 0  # rows whose (url, window) is on another row too
    unexpected: int = 0  # (url, window) never expected
    wrong: int = 0  # count differs from the expected one
    missing: int = 0  # expected windows not committed (complete) / unemitted (peer)
    missing_due: int = 0  # peer: unemitted although their end is at or below emitted_through
    malformed: int = 0
    complete: bool = True
    emitted_through: int | None = None
    samples: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        bad = self.duplicates or self.unexpected or self.wrong or self.malformed or self.error
        if self.complete:
            return not bad and not self.missing and self.rows > 0
        return not bad and not self.missing_due

    def describe(self) -> str:
        if self.error:
            return f"VIOLATION: {self.error}"
        if not self.ok:
            parts = [
                f"{n} {what}"
                for n, what in (
                    (self.malformed, "malformed lines"),
                    (self.duplicates, "lines of a window committed twice"),
                    (self.unexpected, "windows never expected"),
                    (self.wrong, "wrong counts"),
                    (self.missing if self.complete else self.missing_due, "expected windows missing"),
                )
                if n
            ] or ["no output"]
            return "VIOLATION: " + ", ".join(parts) + (f"; e.g. {'; '.join(self.samples[:3])}" if self.samples else "")
        if self.complete:
            return f"exact: all {self.expected:,} windows once, every count exact"
        return (
            f"exact: {self.rows:,} windows emitted once, every count exact; {self.missing:,} of {self.expected:,} "
            "unemitted (end above the final watermark)"
        )


def _frame(rows: Any) -> Any:
    import pandas as pd

    return rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows), columns=COLUMNS)


def check_windows(got: Any, expected: Any, complete: bool = True, emitted_through: int | None = None) -> WindowCheck:
    """Judge committed window rows `got` (a DataFrame or (url, window_start, window_end, count) tuples)
    against `expected` (the same columns: generate_page_views.window_count_table)."""
    import pandas as pd

    got, expected = _frame(got), _frame(expected)
    r = WindowCheck(rows=len(got), expected=len(expected), complete=complete, emitted_through=emitted_through)
    got = got.copy()
    for c in COLUMNS[1:]:
        got[c] = pd.to_numeric(got[c], errors="coerce")
    bad = got[COLUMNS[1:]].isna().any(axis=1) | got["url"].isna()
    r.malformed = int(bad.sum())
    if r.malformed:
        r.samples.append(f"malformed line {','.join(map(str, got[bad].iloc[0].tolist()))}")
    got = got[~bad].astype({c: "int64" for c in COLUMNS[1:]})
    got["url"] = got["url"].astype(str)
    dup = got.duplicated(KEY, keep=False)
    r.duplicates = int(dup.sum())
    if r.duplicates:
        d = got[dup].sort_values(KEY).head(2)
        r.samples.append(f"twice: {' and '.join(_row(x) for x in d.itertuples(index=False))}")
    m = got.drop_duplicates(KEY).merge(
        expected.astype({c: "int64" for c in COLUMNS[1:]}),
        on=KEY,
        how="outer",
        suffixes=("", "_expected"),
        indicator=True,
    )
    unexpected = m[m["_merge"] == "left_only"]
    missing = m[m["_merge"] == "right_only"]
    both = m[m["_merge"] == "both"]
    wrong = both[both["count"] != both["count_expected"]]
    r.unexpected, r.missing, r.wrong = len(unexpected), len(missing), len(wrong)
    if emitted_through is not None:
        r.missing_due = int((missing["window_end"] <= emitted_through).sum())
    elif not complete:
        r.missing_due = 0
    if r.unexpected:
        r.samples.append(f"never expected: {_row(unexpected.iloc[0])}")
    if r.wrong:
        w = wrong.iloc[0]
        r.samples.append(f"count {int(w['count'])}, expected {int(w['count_expected'])}: {_key(w)}")
    if complete and r.missing:
        r.samples.append(f"missing: {_key(missing.iloc[0])} (expected {int(missing.iloc[0]['count_expected'])})")
    if not complete and r.missing_due:
        due = missing[missing["window_end"] <= emitted_through].iloc[0]
        r.samples.append(f"not emitted although its end <= the final watermark {emitted_through}: {_key(due)}")
    return r


def _key(row: Any) -> str:
    return f"({row['url']}, {int(row['window_start'])}, {int(row['window_end'])})"


def _row(row: Any) -> str:
    if hasattr(row, "_asdict"):
        row = row._asdict()
    return f"{_key(row)} = {int(row['count'])}"


def read_lines(paths: Iterable[str]) -> tuple[Any, dict[str, int]]:
    """The CSV lines `url,window_start,window_end,count` of `paths` (headerless) as one DataFrame of
    strings, and the number of lines per path."""
    return read_rows(paths, COLUMNS, strict=True)
