"""What each system costs in CPU and memory during a measured window, and how busy the rest
of the machine was meanwhile (the load rule; bench/README.md, "How the figures are computed").

`ResourceMeter` samples every process of each named system (its root pids and all their
descendants) with psutil: CPU seconds (user + system) spent inside the window, and the peak
resident set of every process. It also reads the machine's total busy CPU time, so that what
neither the systems nor the benchmark harness used is the CPU of *foreign* processes: other
users of this shared machine. A run during which foreign processes used more than
`FOREIGN_CORES_LIMIT` cores on average is excluded from the figures by rule.

Unlike the load average, this does not count the benchmark's own threads: a system with many
processes does not look "busier" than one with few.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable

import psutil

FOREIGN_CORES_LIMIT = 0.3  # cores used on average by processes outside the benchmark
HARNESS = "harness"  # this process and its descendants that belong to no system
SMALL_PROCESS_RSS = 16 * 2**20  # processes below this peak RSS are reported together


@dataclasses.dataclass
class Usage:
    wall_s: float
    cpu_s: dict[str, float]  # CPU seconds (user + system) per system within the window
    peak_rss: dict[str, dict[str, int]]  # system -> {"<label> <pid>": peak RSS bytes}
    foreign_cpu_s: float  # CPU seconds of every process outside the systems and the harness
    steal_s: float  # CPU time the hypervisor gave to other guests during the window

    def foreign_cores(self) -> float:
        return self.foreign_cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def total_peak_rss(self, system: str) -> int:
        return sum(self.peak_rss.get(system, {}).values())

    def cpu_per_million(self, system: str, events: int) -> float | None:
        """CPU seconds per million events of one system (None without events)."""
        return self.cpu_s.get(system, 0.0) / events * 1e6 if events > 0 else None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self) | {"foreign_cores": self.foreign_cores()}


def excluded(usage: Usage | None, limit: float | None = FOREIGN_CORES_LIMIT) -> bool:
    """The load rule: True when foreign processes used more than `limit` cores on average
    (never with `limit` None or 0, or without a measurement)."""
    if not limit or usage is None:
        return False
    return usage.foreign_cores() > limit


def fmt_rss(n_bytes: float | None) -> str:
    if n_bytes is None:
        return "—"
    mib = n_bytes / 2**20
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def label(proc: psutil.Process) -> str:
    """What a process is, from its command line: zookeeper, jobmanager, taskmanager, supervisor,
    a Spark JVM, or its executable name."""
    try:
        cmd = " ".join(proc.cmdline())
        name = proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "?"
    if name == "java" or "/bin/java" in cmd:
        if "org.apache.zookeeper" in cmd:
            return "zookeeper"
        if "CoarseGrainedExecutorBackend" in cmd:
            return "spark-executor"
        if "deploy.master" in cmd or "deploy.worker" in cmd:
            return "spark-" + ("master" if "deploy.master" in cmd else "worker")
        return "spark-jvm"
    args = cmd.split()
    for role in ("jobmanager", "taskmanager"):  # python -m jobmanager|taskmanager ...
        if role in args[:4]:
            return role
    if "supervisor" in " ".join(args[:4]):
        return "supervisor"
    return name


def _cpu(proc: psutil.Process) -> tuple[float, float]:
    """(own CPU seconds, CPU seconds of its children that exited and were reaped)."""
    t = proc.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by a process and its descendants, the children they reaped
    included (0 for a process gone)."""
    try:
        root = psutil.Process(pid)
        return sum(sum(_cpu(p)) for p in [root, *root.children(recursive=True)])
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0.0


def peak_rss(proc: psutil.Process) -> int:
    """The process's high-water mark (VmHWM) if readable, else its current RSS."""
    try:
        with open(f"/proc/{proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return proc.memory_info().rss


def _machine_busy() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, stolen seconds) since boot."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, getattr(t, "steal", 0.0)


@dataclasses.dataclass
class _Seen:
    system: str
    label: str
    created: float
    ppid: int
    base: float  # CPU seconds when the window started (0 for a process born inside it)
    last: float
    reaped_base: float  # the same for its reaped children's CPU (psutil's children_*)
    reaped_last: float
    peak_rss: int
    alive: bool = True


class ResourceMeter:
    """Samples the named systems' processes every `interval` seconds from `start` to `stop`.

    `systems` maps a name to a function returning that system's root pids now (called at every
    sample, so restarted processes are followed); each root's descendants count too. A process
    belongs to the first system whose tree holds it. Processes that exit between samples keep
    the CPU time of their last sample (at most `interval` of their CPU is missed)."""

    def __init__(self, systems: dict[str, Callable[[], Iterable[int]]], interval: float = 0.2):
        if HARNESS in systems:
            raise ValueError(f"{HARNESS!r} is the benchmark itself; name the system otherwise")
        self.systems = systems
        self.interval = interval
        self.usage: Usage | None = None
        self._seen: dict[tuple[int, float], _Seen] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._start_wall = 0.0
        self._busy0 = (0.0, 0.0)

    # -- sampling ---------------------------------------------------------------------------
    def _members(self) -> dict[int, str]:
        owner: dict[int, str] = {}
        for name, roots in self.systems.items():
            try:
                pids = list(roots())
            except Exception:  # noqa: BLE001 — a system between restarts has no pids for a moment
                pids = []
            for pid in pids:
                try:
                    root = psutil.Process(pid)
                    tree = [root, *root.children(recursive=True)]
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                for p in tree:
                    owner.setdefault(p.pid, name)
        me = psutil.Process(os.getpid())
        for p in [me, *me.children(recursive=True)]:
            owner.setdefault(p.pid, HARNESS)
        return owner

    def _sample(self, first: bool = False) -> None:
        present = set()
        for pid, system in self._members().items():
            try:
                proc = psutil.Process(pid)
                with proc.oneshot():
                    created = proc.create_time()
                    cpu, reaped = _cpu(proc)
                    rss = peak_rss(proc)
                    key = (pid, created)
                    present.add(key)
                    seen = self._seen.get(key)
                    if seen is None:
                        born_inside = created >= self._start_wall and not first
                        base, reaped_base = (0.0, 0.0) if born_inside else (cpu, reaped)
                        self._seen[key] = _Seen(
                            system, label(proc), created, proc.ppid(), base, cpu, reaped_base, reaped, rss
                        )
                    else:
                        seen.last = max(seen.last, cpu)
                        seen.reaped_last = max(seen.reaped_last, reaped)
                        seen.peak_rss = max(seen.peak_rss, rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for key, seen in self._seen.items():
            seen.alive = key in present

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    # -- the window -------------------------------------------------------------------------
    def start(self) -> ResourceMeter:
        self._start_wall = time.time()
        self._t0 = time.monotonic()
        self._busy0 = _machine_busy()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._loop, name="resource-meter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Usage:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        wall = time.monotonic() - self._t0
        busy1, steal1 = _machine_busy()
        cpu: dict[str, float] = {name: 0.0 for name in self.systems}
        harness = 0.0
        peaks: dict[str, dict[str, int]] = {name: {} for name in self.systems}
        tracked = {pid for (pid, _), seen in self._seen.items() if seen.alive}
        small: dict[str, list[int]] = {name: [] for name in self.systems}
        for (pid, _), seen in self._seen.items():
            used = max(0.0, seen.reaped_last - seen.reaped_base)  # children that exited: e.g. a JVM's forks
            if seen.alive or seen.ppid not in tracked:
                # a process gone whose parent is still measured is in that parent's reaped CPU
                used += max(0.0, seen.last - seen.base)
            if seen.system == HARNESS:
                harness += used
                continue
            cpu[seen.system] += used
            if seen.peak_rss >= SMALL_PROCESS_RSS:
                peaks[seen.system][f"{seen.label} {pid}"] = seen.peak_rss
            else:
                small[seen.system].append(seen.peak_rss)
        for name, sizes in small.items():
            if sizes:  # helpers a JVM forks (chmod, readlink, ...): one line, the largest of them
                peaks[name][f"{len(sizes)} small processes, largest"] = max(sizes)
        foreign = max(0.0, (busy1 - self._busy0[0]) - sum(cpu.values()) - harness)
        self.usage = Usage(wall, cpu, peaks, foreign, max(0.0, steal1 - self._busy0[1]))
        return self.usage

    def __enter__(self) -> ResourceMeter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
