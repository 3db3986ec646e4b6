"""The reference job (examples/page_views.py) as the cluster tests run it: a watched input that
grows in atomic batches, submission, and the checks of its committed counts (exact, no line
twice, each url's counts rising in commit order)."""

from __future__ import annotations

import collections
import glob
import os
import sys
from typing import Any

from harness import EXAMPLES, SMALL_READS, LocalCluster, assert_update_stream, last_line, read_counts, sluice
from helpers import wait_until

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

PAGE_VIEWS = os.path.join(EXAMPLES, "page_views.py")


class Input:
    """A watched input directory: batches of events land atomically (renamed into place)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.dir = root / "in"
        self.dir.mkdir()
        self.expected: collections.Counter[str] = collections.Counter()
        self.batches = 0

    def add(self, events: int, files: int) -> None:
        staging = self.root / f"staging-{self.batches}"
        counts = generate(str(staging), events=events, files=files, urls=400, seed=100 + self.batches)
        for name in sorted(os.listdir(staging)):
            os.rename(staging / name, self.dir / f"b{self.batches}-{name}")
        self.expected.update(counts)
        self.batches += 1


def run_page_views(cluster: LocalCluster, inp: Input, out: Any, *extra: str, parallelism: int = 2) -> str:
    """Submit page_views over a watched Input (checkpoints every 300 ms), detached; the job id."""
    args = ["run", PAGE_VIEWS, "--detach", "--cluster-dir", cluster.dir, "--parallelism", str(parallelism), *extra]
    job_args = ["--input", str(inp.dir), "--output", str(out), "--monitor-interval", "200"]
    job_args += ["--checkpoint-interval", "300"]
    return last_line(sluice(*args, "--", *job_args))


def start_page_views(
    cluster: LocalCluster, tmp_path: Any, events: int = 300_000, files: int = 120, interval: int = 300
) -> tuple[str, dict[str, int]]:
    """Generate `events` into tmp_path/in and submit page_views over them, read in small calls
    (SMALL_READS: a kill or failover lands mid-job); (job id, expected counts)."""
    expected = generate(str(tmp_path / "in"), events=events, files=files, urls=3_000, seed=5)
    job_id = cluster.run(
        PAGE_VIEWS,
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint-interval",
        str(interval),
        parallelism=2,
        options=SMALL_READS,
    )
    return job_id, expected


def wait_counts(out: Any, expected: Any, timeout: float = 180) -> list[tuple[str, int]]:
    """Wait until the committed counts under `out` equal `expected`; every committed line."""

    def done() -> list[tuple[str, int]] | None:
        final, lines = read_counts(str(out))
        return lines if final == dict(expected) else None

    return wait_until(done, timeout=timeout, message=f"committed counts under {out} to reach the input's")


def assert_exactly_once(tmp_path: Any, expected: dict[str, int]) -> None:
    """The committed counts under tmp_path/out equal `expected`, no line twice, each url's
    counts rise in commit order, and no staging file is left behind."""
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)
    # per url, counts only grow in commit order (files sort by subtask, attempt, part)
    last: dict[str, int] = collections.defaultdict(int)
    for url, count in lines:
        assert count > last[url], f"{url}: {count} after {last[url]}"
        last[url] = count
    assert not [f for f in glob.glob(str(tmp_path / "out" / ".*"))], "staging files left behind"
