"""Deterministic sample data for page_views: page-view events with
Zipf-distributed url popularity (s = 1), split over files.

    python examples/generate_page_views.py --out data/ --events 200000 [--files 8] [--urls 10000] [--seed 7]
        [--disorder-ms 0] [--users 1000000]

Also importable: `generate(out, events, files, urls, seed, disorder_ms=0)` returns the
expected final count per url, computed independently of Sluice.

Event i (0-based, in file and line order) has the timestamp BASE_TS + i - d_i, in epoch
milliseconds. Without disorder d_i = 0: the timestamps increase by 1 ms per event. With
`--disorder-ms N`, d_i is a uniform integer in [0, N] drawn from a generator of its own (seeded
from the seed), so timestamps are out of order by up to N ms while the url and user draws, the
files and the line order stay those of the same seed without disorder (with N = 0 the output is
byte for byte the same as without the option).

Expected windowed counts, computed here without Sluice (bench/windowed_bench.py checks both
systems against them): `read_events(dir)` reads the generated *.jsonl files back;
`window_counts(events, size_ms, slide_ms)` is a plain-Python count per (url, window_start,
window_end); `window_count_table(urls, timestamps, size_ms, slide_ms)` is the same in numpy, as a
pandas DataFrame, for a million events; `expected_windows(dir, size_ms, slide_ms)` is the table
of the files in `dir`. Windows are aligned to epoch 0: window starts are the multiples of the
slide, a window is [start, start + size), end excluded, and an event belongs to every window with
start <= ts < start + size (tumbling: slide = size, one window per event).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

BASE_TS = 1_700_000_000_000  # event 0's timestamp (epoch ms) without disorder
DISORDER_STREAM = 0x0D150D3E  # second seed word of the disorder draws' own generator


def generate(
    out: str,
    events: int,
    files: int = 8,
    urls: int = 10_000,
    seed: int = 7,
    *,
    disorder_ms: int = 0,
    users: int = 1_000_000,
) -> dict[str, int]:
    if disorder_ms < 0:
        raise ValueError(f"disorder_ms must be >= 0, got {disorder_ms}")
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, urls + 1)
    weights = 1.0 / ranks
    weights /= weights.sum()
    url_idx = rng.choice(urls, size=events, p=weights)
    if users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    user_ids = rng.integers(0, users, size=events)  # users uniform in [0, users): fewer users repeat more
    ts = BASE_TS + np.arange(events, dtype=np.int64)
    if disorder_ms:
        # a generator of its own, so that the url and user draws above are those of the same seed without disorder
        ts -= disorder_draws(seed, events, disorder_ms)
    os.makedirs(out, exist_ok=True)
    per_file = -(-events // files) if files else events
    for f in range(files):
        lo, hi = f * per_file, min(events, (f + 1) * per_file)
        if lo >= hi:
            break
        # the lines json.dumps({"url", "user", "ts"}) writes, formatted without a call per event
        lines = [
            f'{{"url": "/page/{u}", "user": {user}, "ts": {t}}}'
            for u, user, t in zip(url_idx[lo:hi].tolist(), user_ids[lo:hi].tolist(), ts[lo:hi].tolist(), strict=True)
        ]
        with open(os.path.join(out, f"events-{f:04d}.jsonl"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    hits = np.bincount(url_idx, minlength=urls)
    return {f"/page/{u}": int(hits[u]) for u in np.flatnonzero(hits).tolist()}


def disorder_draws(seed: int, events: int, disorder_ms: int) -> np.ndarray:
    """d_0 .. d_{events-1}: how many ms each event's timestamp lies before BASE_TS + i, uniform in
    [0, disorder_ms], from a generator seeded from (seed, DISORDER_STREAM)."""
    rng = np.random.default_rng([seed, DISORDER_STREAM])
    return rng.integers(0, disorder_ms + 1, size=events, dtype=np.int64)


# -- expected windowed counts (independent of Sluice) -------------------------------------------------
def _check_window(size_ms: int, slide_ms: int) -> None:
    for name, v in (("size_ms", size_ms), ("slide_ms", slide_ms)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v <= 0:
            raise ValueError(f"{name} must be a positive whole number of ms, got {v!r}")


def window_counts(events: Iterable[tuple[str, int]], size_ms: int, slide_ms: int) -> dict[tuple[str, int, int], int]:
    """The count per (url, window_start, window_end) of `events` ((url, ts) pairs): windows aligned
    to epoch 0, starts the multiples of `slide_ms`, each [start, start + size_ms). Plain Python, one
    event at a time: the reference the vectorized `window_count_table` is tested against."""
    _check_window(size_ms, slide_ms)
    counts: collections.Counter = collections.Counter()
    for url, ts in events:
        ts = int(ts)
        start = ts - ts % slide_ms  # the latest window start <= ts (Python's % floors: also for ts < 0)
        while start + size_ms > ts:
            counts[(url, start, start + size_ms)] += 1
            start -= slide_ms
    return dict(counts)


def window_count_table(urls: Any, timestamps: Any, size_ms: int, slide_ms: int) -> Any:
    """`window_counts` vectorized: a pandas DataFrame with columns url (str), window_start,
    window_end, count (int64), one row per (url, window) with at least one event, sorted by
    (window_start, url)."""
    import pandas as pd

    _check_window(size_ms, slide_ms)
    urls = np.asarray(urls, dtype=object)
    ts = np.asarray(timestamps, dtype=np.int64)
    if urls.shape != ts.shape or urls.ndim != 1:
        raise ValueError(f"urls and timestamps: two sequences of one length, got shapes {urls.shape}, {ts.shape}")
    columns: dict[str, list] = {"url": [], "window_start": [], "window_end": [], "count": []}
    if len(ts) == 0:
        return pd.DataFrame(columns).astype({"window_start": "int64", "window_end": "int64", "count": "int64"})
    names, code = np.unique(urls, return_inverse=True)
    last = ts - np.mod(ts, slide_ms)  # the latest window start <= ts (np.mod floors like Python's %)
    lo = int(last.min()) - (-(-size_ms // slide_ms)) * slide_ms  # below every window start
    slots = (int(last.max()) - lo) // slide_ms + 1
    keys = []
    for k in range(-(-size_ms // slide_ms)):  # an event is in at most ceil(size / slide) windows
        start = last - k * slide_ms
        inside = start + size_ms > ts
        keys.append(code[inside].astype(np.int64) * slots + (start[inside] - lo) // slide_ms)
    key, count = np.unique(np.concatenate(keys), return_counts=True)
    start = lo + (key % slots) * slide_ms
    frame = pd.DataFrame(
        {"url": names[key // slots], "window_start": start, "window_end": start + size_ms, "count": count}
    ).astype({"window_start": "int64", "window_end": "int64", "count": "int64"})
    return frame.sort_values(["window_start", "url"], kind="stable", ignore_index=True)


def read_events(directory: str) -> tuple[np.ndarray, np.ndarray]:
    """(urls, timestamps) of every event in the *.jsonl files of `directory`, in file-name and line
    order."""
    urls: list[str] = []
    ts: list[int] = []
    paths = sorted(glob.glob(os.path.join(directory, "*.jsonl")))
    if not paths:
        raise FileNotFoundError(f"no *.jsonl files in {directory}")
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    e = json.loads(line)
                    urls.append(e["url"])
                    ts.append(e["ts"])
    return np.array(urls, dtype=object), np.array(ts, dtype=np.int64)


def expected_windows(directory: str, size_ms: int, slide_ms: int | None = None) -> Any:
    """The expected count per (url, window) of the events in `directory` (`window_count_table`);
    `slide_ms` None: tumbling windows of `size_ms`."""
    urls, ts = read_events(directory)
    return window_count_table(urls, ts, size_ms, size_ms if slide_ms is None else slide_ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--disorder-ms",
        type=int,
        default=0,
        help="timestamps out of order by up to this many ms (event i: BASE + i - uniform[0, N]); 0: in order",
    )
    ap.add_argument("--users", type=int, default=1_000_000, help="user ids uniform in [0, N) (dedup.py: a small N)")
    args = ap.parse_args()
    if args.disorder_ms < 0:
        ap.error("--disorder-ms must be >= 0")
    if args.users < 1:
        ap.error("--users must be >= 1")
    counts = generate(
        args.out, args.events, args.files, args.urls, args.seed, disorder_ms=args.disorder_ms, users=args.users
    )
    print(f"wrote {args.events} events for {len(counts)} urls to {args.out}")


if __name__ == "__main__":
    main()
