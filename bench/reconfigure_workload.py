"""The reconfiguration benchmark's workload (bench/reconfigure_bench.py): the job and the change it
measures (constants), the input generated once and copied into each round, the steady feed of files
into the watched directory, and the reader of the committed output that checks it exactly.

No Spark, no cluster: files and one thread (the feed) only.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import threading
import time

# the job and the change
CHECKPOINT_MS = 300
MONITOR_MS = 200
P_FROM, P_TO = 3, 2
OPERATOR = "counts"  # the uid whose parallelism changes
SOURCE_CHAIN = "page views"  # the source task's name in `sluice status`
SOURCE_TASK = "page-views"  # its chain id in log tags and execution ids
SINK_CHAIN = "counts sink"  # part of the counts chain's name
# the windows sampled around the change
PRE_S = 4.0  # the steady window sampled before the command
POST_S = 3.0  # sampled after the new configuration's first commit
POLL = 0.1  # status samples
SEED_INITIAL, SEED_FEED = 7, 8
# the two methods (the run matrix's "systems")
METHODS = {
    "a": "stop-with-savepoint + restore (`sluice rescale JOB --parallelism 2`)",
    "b": f"live (`sluice reconfigure JOB --operator {OPERATOR} --parallelism 2`)",
}
SHORT = {"a": "(a) stop + restore", "b": "(b) live"}


class Data:
    """The initial files (one generate() call) and the feed's templates (another), with the counts
    of every feed file (read back from it)."""

    def __init__(self, root: str, events: int, files: int, feed_files: int, feed_events: int, urls: int):
        from generate_page_views import generate

        self.initial_dir = os.path.join(root, "initial")
        self.feed_dir = os.path.join(root, "feed")
        self.initial = collections.Counter(
            generate(self.initial_dir, events=events, files=files, urls=urls, seed=SEED_INITIAL)
        )
        generate(self.feed_dir, events=feed_files * feed_events, files=feed_files, urls=urls, seed=SEED_FEED)
        self.feed = sorted(os.path.join(self.feed_dir, n) for n in os.listdir(self.feed_dir))
        self.feed_counts = []
        for path in self.feed:
            with open(path) as f:
                self.feed_counts.append(collections.Counter(json.loads(line)["url"] for line in f if line.strip()))
        self.events, self.files, self.feed_events = events, files, feed_events

    def copy_initial(self, inp: str) -> None:
        os.makedirs(inp, exist_ok=True)
        for name in sorted(os.listdir(self.initial_dir)):
            shutil.copyfile(os.path.join(self.initial_dir, name), os.path.join(inp, name))


class Feeder(threading.Thread):
    """Every `every` s one more file (a feed template, in turn, under a name of its own) is written
    into `stage` and renamed into the watched `inp`. `total`: the counts of everything in `inp`
    (the initial files and every file fed), kept as files land."""

    def __init__(self, data: Data, inp: str, stage: str, every: float):
        super().__init__(daemon=True, name="feeder")
        self.data, self.inp, self.stage, self.every = data, inp, stage, every
        os.makedirs(stage, exist_ok=True)
        self.total = collections.Counter(data.initial)
        self.fed = 0
        self.late_max = 0.0  # the furthest a file landed after its slot
        self.skipped = 0  # slots dropped because the harness was late by more than one period
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t0, k = time.monotonic(), 0
            while not self.halt.is_set():
                slot = t0 + k * self.every
                wait = slot - time.monotonic()
                if wait > 0 and self.halt.wait(wait):
                    break
                late = time.monotonic() - slot
                if late > self.every:  # the machine stalled: go on from now, do not feed a burst
                    self.skipped += int(late // self.every)
                    t0 = time.monotonic() - k * self.every
                    late = 0.0
                self.late_max = max(self.late_max, late)
                self.feed_one()
                k += 1
        except BaseException as exc:  # noqa: BLE001 — reported by the round
            self.error = exc

    def feed_one(self) -> None:
        """The next template under the next name: written into the stage, renamed into the input."""
        template = self.data.feed[self.fed % len(self.data.feed)]
        name = f"feed-{self.fed:05d}.jsonl"
        shutil.copyfile(template, os.path.join(self.stage, name))
        os.rename(os.path.join(self.stage, name), os.path.join(self.inp, name))
        with self.lock:
            self.total.update(self.data.feed_counts[self.fed % len(self.data.feed)])
            self.fed += 1

    def snapshot(self) -> collections.Counter:
        with self.lock:
            return collections.Counter(self.total)

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(timeout=10)


class OutputReader:
    """The committed output read incrementally: each visible part once (a committed part does not
    change); each url's largest count, and (url, count) lines committed more than once."""

    def __init__(self, out: str):
        self.out = out
        self.read: set[str] = set()
        self.final: dict[str, int] = {}
        self.seen: set[tuple[str, int]] = set()
        self.lines = 0
        self.twice: list[tuple[str, int]] = []
        self.malformed: list[str] = []

    def poll(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.out) if n.startswith("part-"))
        except FileNotFoundError:
            return
        for name in names:
            if name in self.read:
                continue
            with open(os.path.join(self.out, name)) as f:
                for line in f:
                    self.take(name, line.rstrip("\n"))
            self.read.add(name)

    def take(self, name: str, line: str) -> None:
        """One line `url,count` of the part `name`."""
        if not line:
            return
        url, _, count = line.rpartition(",")
        try:
            c = int(count)
        except ValueError:
            self.malformed.append(f"{name}: {line!r}")
            return
        self.lines += 1
        if (url, c) in self.seen:
            self.twice.append((url, c))
        self.seen.add((url, c))
        if c > self.final.get(url, 0):
            self.final[url] = c

    def covers(self, expected: collections.Counter) -> bool:
        return all(self.final.get(u, 0) >= c for u, c in expected.items())

    def short(self, expected: collections.Counter) -> list[str]:
        """Urls committed below what was fed (so far)."""
        return [u for u, c in expected.items() if self.final.get(u, 0) < c]

    def over(self, expected: collections.Counter) -> list[str]:
        """Urls committed above what was fed: counted twice (it can only get worse)."""
        return [u for u, c in self.final.items() if c > expected.get(u, 0)]
