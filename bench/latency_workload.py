"""The input and the latency probe of bench/latency_suite.py: page-view file contents with one marker
event each (`Contents`, and the final counts they add up to), the `Feeder` thread that renames the files
into the watched directory at a fixed pace (or all at once, a backlog), and the `Watcher` that notes
when each marker is first seen in a committed output file.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import numpy as np
import paced_latency  # (through page_views_bench, puts the repo and examples/ on sys.path)
from generate_page_views import generate

MARKER = paced_latency.MARKER
MARKER_B = MARKER.encode()
URL = "/page/"
CONTENT_BLOCKS = 16  # distinct file contents, reused round robin (counts just add up)


class Contents:
    """CONTENT_BLOCKS distinct files of page-view events (generate()'s Zipf urls) of up to `events`
    events each; a file of e events is the first e lines of one of them."""

    def __init__(self, work: str, events: int, urls: int, seed: int = 17):
        self.events, self.urls = events, urls
        d = os.path.join(work, f"contents-{events}")
        generate(d, events=events * CONTENT_BLOCKS, files=CONTENT_BLOCKS, urls=urls, seed=seed)
        self.text: list[bytes] = []
        self.ends: list[np.ndarray] = []  # byte offset after each line
        self.idx: list[np.ndarray] = []  # url index of each line
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            lines = data.splitlines(keepends=True)
            self.text.append(data)
            self.ends.append(np.cumsum([len(x) for x in lines]))
            self.idx.append(np.array([int(json.loads(x)["url"][len(URL) :]) for x in lines]))
        shutil.rmtree(d, ignore_errors=True)

    def content(self, i: int, events: int) -> bytes:
        j = i % CONTENT_BLOCKS
        return self.text[j][: int(self.ends[j][events - 1])] + marker_line(i)

    def expected(self, files: int, events: int) -> dict[str, int]:
        """The final counts after files 0..files-1 of `events` events each (markers included)."""
        total = np.zeros(self.urls, dtype=np.int64)
        for j in range(CONTENT_BLOCKS):
            uses = len(range(j, files, CONTENT_BLOCKS))
            if uses:
                total += uses * np.bincount(self.idx[j][:events], minlength=self.urls)
        out = {f"{URL}{u}": int(c) for u, c in enumerate(total.tolist()) if c}
        out.update({marker_name(i): 1 for i in range(files)})
        return out


def marker_name(i: int) -> str:
    return f"{MARKER}{i:05d}"


def marker_line(i: int) -> bytes:
    return (json.dumps({"url": marker_name(i), "user": 0, "ts": 0}) + "\n").encode()


class Feeder(threading.Thread):
    """Writes file i (hidden name, then rename) at start + i / rate; arrival[i] = monotonic time of
    its rename. backlog: every file is written hidden by `prepare()` and all are renamed at once."""

    def __init__(self, watched: str, contents: Contents, events: int, files: int, rate: float, backlog=False):
        super().__init__(daemon=True)
        self.watched, self.contents, self.events, self.files, self.rate = watched, contents, events, files, rate
        self.backlog = backlog
        self.arrival: list[float] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _hidden(self, i: int) -> str:
        return os.path.join(self.watched, f".events-{i:05d}.jsonl")

    def _write(self, i: int) -> None:
        with open(self._hidden(i), "wb") as f:
            f.write(self.contents.content(i, self.events))

    def prepare(self) -> None:
        if self.backlog:
            for i in range(self.files):
                self._write(i)

    def run(self) -> None:
        try:
            start = time.monotonic()
            for i in range(self.files):
                if not self.backlog:
                    if self.stop_event.wait(max(0.0, start + i / self.rate - time.monotonic())):
                        return
                    self._write(i)
                os.replace(self._hidden(i), os.path.join(self.watched, f"events-{i:05d}.jsonl"))
                self.arrival.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 — reported by the run
            self.error = exc


class Watcher(paced_latency.Watcher):
    """paced_latency's watcher, reading each committed file once, as bytes (a marker is a line's
    start): the sustained runs commit millions of lines, which csv-parsing every 20 ms would make
    the harness's own load."""

    def scan(self) -> None:
        now = time.monotonic()
        for name in self.visible():
            if name in self._read:
                continue
            try:
                with open(os.path.join(self.path, name), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            self._read[name] = now
            pos = data.find(MARKER_B)
            while pos != -1:
                end = data.find(b",", pos)
                self.seen.setdefault(int(data[pos + len(MARKER_B) : end]), now)
                pos = data.find(MARKER_B, end)
