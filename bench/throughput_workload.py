"""The input of bench/throughput_suite.py's runs: page views (examples/generate_page_views.py's
generate()) in chunks of CHUNK_EVENTS events, CHUNK_FILES files each, generated once in parallel; an
input of N events is a directory of hard links to the first N / CHUNK_EVENTS chunks' files (so every
input shares its files with the larger ones), with the final count per url it must produce.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass

from paired_runs import log
from throughput_plan import CHUNK_EVENTS

CHUNK_FILES = 8  # files per chunk: 12,500 events (~0.9 MB) per file
URLS = 10_000


@dataclass
class Dataset:
    """An input directory of `files` files holding `events` events; `expected`: url -> final count."""

    path: str
    events: int
    files: int
    expected: dict[str, int]


def _worker_signals() -> None:
    """A generator worker: default SIGTERM, SIGINT ignored (the parent handles Ctrl-C and ends the pool)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _chunk(args: tuple[str, int]) -> dict[str, int]:
    """One chunk, in a generator worker (examples/ is on sys.path: bench/throughput_suite.py puts it there)."""
    from generate_page_views import generate

    path, i = args
    return generate(path, events=CHUNK_EVENTS, files=CHUNK_FILES, urls=URLS, seed=1000 + i)


class Data:
    """Chunks generated once (in parallel); an input of N events is a directory of hard links to the
    first N / CHUNK_EVENTS chunks' files, so every input shares its files with the larger ones."""

    def __init__(self, work: str, max_events: int):
        self.work = work
        self.n_chunks = math.ceil(max_events / CHUNK_EVENTS)
        self.chunks: list[dict[str, int]] = []
        self.sets: dict[int, Dataset] = {}

    def generate(self) -> None:
        t0 = time.monotonic()
        jobs = [(os.path.join(self.work, "chunks", f"c{i:04d}"), i) for i in range(self.n_chunks)]
        procs = max(1, min(os.cpu_count() or 1, 4))
        pool = multiprocessing.get_context("fork").Pool(procs, initializer=_worker_signals)
        try:
            self.chunks = pool.map(_chunk, jobs)
            pool.close()  # workers exit by themselves (terminate() would SIGTERM them)
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()
        log(f"generated {self.n_chunks * CHUNK_EVENTS:,} events in {time.monotonic() - t0:.1f}s")

    def of(self, events: int) -> Dataset:
        if events % CHUNK_EVENTS or events <= 0:
            raise ValueError(f"sizes are multiples of {CHUNK_EVENTS:,} events, got {events:,}")
        if events not in self.sets:
            k = events // CHUNK_EVENTS
            if k > self.n_chunks:
                raise ValueError(f"{events:,} events: only {self.n_chunks * CHUNK_EVENTS:,} generated")
            path = os.path.join(self.work, f"input-{events}")
            os.makedirs(path, exist_ok=True)
            expected: dict[str, int] = {}
            files = 0
            for i in range(k):
                src = os.path.join(self.work, "chunks", f"c{i:04d}")
                for name in sorted(os.listdir(src)):
                    os.link(os.path.join(src, name), os.path.join(path, f"c{i:04d}-{name}"))
                    files += 1
                for url, n in self.chunks[i].items():
                    expected[url] = expected.get(url, 0) + n
            self.sets[events] = Dataset(path, events, files, expected)
        return self.sets[events]
