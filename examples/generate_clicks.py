"""Deterministic sample data for click_join.py: ad impressions and the clicks on them.

    python examples/generate_clicks.py --out data/ [--impressions 100000] [--files 8]
        [--click-rate 0.3] [--max-delay-ms 1200000] [--disorder-ms 0] [--seed 11]

Writes OUT/impressions/*.jsonl, events {"imp_id": int, "ad": str, "user": int, "ts": int},
one impression every 10 ms in file order, and OUT/clicks/*.jsonl, events {"imp_id": int,
"user": int, "ts": int}: about `click-rate` of the impressions get one click and some a
second, each `uniform[0, max-delay]` ms after its impression (so with a 10-minute join
interval and a 20-minute maximum delay about half the clicks join), plus clicks on
impression ids that do not exist. With --disorder-ms each timestamp moves back by up to that
much. Files of both directories cover consecutive stretches of time.

Also importable: `generate(out, ...)`, and `expected_joins(out, lower_ms, upper_ms)`, the
(imp_id, impression ts, click ts) of every pair with lower <= click ts - impression ts <=
upper, computed from the files without Sluice.
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import numpy as np

BASE_TS = 1_700_000_000_000
STEP_MS = 10  # between impressions


def _write(directory: str, rows: list[dict], files: int) -> None:
    os.makedirs(directory, exist_ok=True)
    per = -(-len(rows) // files) if rows else 0
    for f in range(files):
        part = rows[f * per : (f + 1) * per]
        if part:
            with open(os.path.join(directory, f"part-{f:04d}.jsonl"), "w") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in part)


def generate(
    out: str,
    impressions: int = 100_000,
    files: int = 8,
    click_rate: float = 0.3,
    max_delay_ms: int = 1_200_000,
    disorder_ms: int = 0,
    seed: int = 11,
) -> None:
    rng = np.random.default_rng(seed)
    imp_ts = BASE_TS + np.arange(impressions, dtype=np.int64) * STEP_MS
    users = rng.integers(0, 50_000, size=impressions)
    ads = rng.integers(0, 500, size=impressions)
    jitter = rng.integers(0, disorder_ms + 1, size=impressions) if disorder_ms else np.zeros(impressions, np.int64)
    imps = [
        {"imp_id": i, "ad": f"ad-{int(ads[i])}", "user": int(users[i]), "ts": int(imp_ts[i] - jitter[i])}
        for i in range(impressions)
    ]
    clicked = np.flatnonzero(rng.random(impressions) < click_rate)
    twice = clicked[rng.random(len(clicked)) < 0.1]
    targets = np.concatenate([clicked, twice])
    delays = rng.integers(0, max_delay_ms + 1, size=len(targets))
    orphans = rng.integers(impressions, impressions * 2, size=max(1, len(targets) // 20))
    orphan_ts = BASE_TS + rng.integers(0, impressions * STEP_MS, size=len(orphans))
    clicks = [
        {"imp_id": int(t), "user": int(users[t]), "ts": int(imps[t]["ts"] + delays[k])} for k, t in enumerate(targets)
    ]
    clicks += [{"imp_id": int(o), "user": -1, "ts": int(ts)} for o, ts in zip(orphans, orphan_ts, strict=True)]
    click_jitter = rng.integers(0, disorder_ms + 1, size=len(clicks)) if disorder_ms else np.zeros(len(clicks))
    for c, j in zip(clicks, click_jitter, strict=True):
        c["ts"] -= int(j)
    clicks.sort(key=lambda c: c["ts"] + int(rng.integers(0, disorder_ms + 1)) if disorder_ms else c["ts"])
    _write(os.path.join(out, "impressions"), imps, files)
    _write(os.path.join(out, "clicks"), clicks, files)


def _read(directory: str) -> list[dict]:
    rows = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".jsonl"):
            with open(os.path.join(directory, name)) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows


def expected_joins(out: str, lower_ms: int, upper_ms: int) -> collections.Counter:
    """Counter of (imp_id, impression ts, click ts) over every joining pair."""
    imps: dict[int, list[int]] = collections.defaultdict(list)
    for r in _read(os.path.join(out, "impressions")):
        imps[r["imp_id"]].append(r["ts"])
    pairs: collections.Counter = collections.Counter()
    for c in _read(os.path.join(out, "clicks")):
        for its in imps.get(c["imp_id"], ()):
            if lower_ms <= c["ts"] - its <= upper_ms:
                pairs[(c["imp_id"], its, c["ts"])] += 1
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--impressions", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--click-rate", type=float, default=0.3)
    ap.add_argument("--max-delay-ms", type=int, default=1_200_000)
    ap.add_argument("--disorder-ms", type=int, default=0)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    if args.impressions < 1 or args.files < 1 or not 0 <= args.click_rate <= 1 or args.disorder_ms < 0:
        ap.error("--impressions and --files >= 1, --click-rate in [0, 1], --disorder-ms >= 0")
    generate(args.out, args.impressions, args.files, args.click_rate, args.max_delay_ms, args.disorder_ms, args.seed)
    print(f"wrote {args.impressions} impressions and their clicks to {args.out}")


if __name__ == "__main__":
    main()
