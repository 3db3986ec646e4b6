"""Deterministic sample data for page_views: page-view events with
Zipf-distributed url popularity (s = 1), split over files.

    python examples/generate_page_views.py --out data/ --events 200000 [--files 8] [--urls 10000] [--seed 7]

Also importable: `generate(out, events, files, urls, seed)` returns the
expected final count per url, computed independently of Sluice.
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import numpy as np


def generate(out: str, events: int, files: int = 8, urls: int = 10_000, seed: int = 7) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, urls + 1)
    weights = 1.0 / ranks
    weights /= weights.sum()
    url_idx = rng.choice(urls, size=events, p=weights)
    users = rng.integers(0, 1_000_000, size=events)
    os.makedirs(out, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    per_file = -(-events // files) if files else events
    for f in range(files):
        lo, hi = f * per_file, min(events, (f + 1) * per_file)
        if lo >= hi:
            break
        lines = []
        for i in range(lo, hi):
            url = f"/page/{int(url_idx[i])}"
            counts[url] += 1
            lines.append(json.dumps({"url": url, "user": int(users[i]), "ts": 1_700_000_000_000 + i}))
        with open(os.path.join(out, f"events-{f:04d}.jsonl"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return dict(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    counts = generate(args.out, args.events, args.files, args.urls, args.seed)
    print(f"wrote {args.events} events for {len(counts)} urls to {args.out}")


if __name__ == "__main__":
    main()
