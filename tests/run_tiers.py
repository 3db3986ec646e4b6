"""`make test`: the three test tiers and the Spark JVM's class-data sharing archive, run side by
side (CONTRIBUTING.md "Run the tests").

The suite is bound by the CPU of its JVMs and Python processes, but no tier keeps both cores
busy on its own: a cluster test waits for a checkpoint, a heartbeat timeout or a replacement
TaskManager with one core idle. So the steps overlap: `test-fast` (lint, unit and offline tests)
starts at once, beside the archive's build (`make spark-cds`), which the TaskManagers of the
other two tiers map; `test-cluster` and `test-chaos` start together once the archive is there.
(Starting `test-chaos` beside the build instead was slower: three steps at once on two cores.)
Each tier is its own pytest session with its own ZooKeeper, shared cluster, free ports and
temporary directories, exactly as when run alone with `make test-<tier>`.

Each step's output goes to build/test-results/<step>.log and is printed whole when the step
ends, never interleaved. The run fails when any step fails (or, for a pytest tier, collects no
test: pytest's exit code 5 is kept); every step runs to its end even when another failed. A
SIGTERM or SIGINT is passed on to every running step (pytest then tears its clusters down).
`make test SEQUENTIAL=1` runs the same steps one after another."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

RESULTS = os.path.join("build", "test-results")


@dataclass
class Step:
    name: str
    target: str  # the make target that runs it
    after: tuple[str, ...] = ()  # steps that must have succeeded first
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ended: float = 0.0
    code: int | None = None
    log: str = ""


STEPS = (
    Step("spark-cds", "spark-cds"),
    Step("fast", "test-fast"),
    Step("cluster", "test-cluster", after=("spark-cds",)),
    Step("chaos", "test-chaos", after=("spark-cds",)),
)


def minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def start(step: Step, make: str) -> None:
    step.log = os.path.join(RESULTS, f"{step.name}.log")
    print(f"[{time.strftime('%H:%M:%S')}] {step.name}: started (make {step.target}, output in {step.log})", flush=True)
    with open(step.log, "wb") as out:
        step.proc = subprocess.Popen(
            [make, "--no-print-directory", step.target],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a signal reaches the step's whole process group (make, pytest)
        )
    step.started = time.monotonic()


def finish(step: Step, code: int) -> None:
    step.code, step.ended = code, time.monotonic()
    verdict = "passed" if code == 0 else f"FAILED (exit {code})"
    print(f"\n===== {step.name}: {verdict} after {minutes(step.ended - step.started)} =====", flush=True)
    with open(step.log, "rb") as f:
        sys.stdout.buffer.write(f.read())
    print(f"===== end of {step.name} =====\n", flush=True)


def run(steps: tuple[Step, ...], make: str, sequential: bool) -> int:
    os.makedirs(RESULTS, exist_ok=True)
    by_name = {s.name: s for s in steps}

    def forward(signum: int, _frame: object) -> None:
        for s in steps:
            if s.proc is not None and s.code is None:
                try:
                    os.killpg(s.proc.pid, signum)
                except ProcessLookupError:
                    pass

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _run(steps, by_name, make, sequential)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(steps: tuple[Step, ...], by_name: dict[str, Step], make: str, sequential: bool) -> int:
    t0 = time.monotonic()
    pending = list(steps)
    while pending or any(s.proc is not None and s.code is None for s in steps):
        running = [s for s in steps if s.proc is not None and s.code is None]
        for s in list(pending):
            if sequential and running:
                break
            deps = [by_name[d] for d in s.after]
            if any(d.code not in (None, 0) for d in deps):
                pending.remove(s)
                s.code = -1
                print(f"{s.name}: not run, because {', '.join(d.name for d in deps if d.code)} failed", flush=True)
            elif all(d.code == 0 for d in deps):
                pending.remove(s)
                start(s, make)
                running.append(s)
        for s in running:
            assert s.proc is not None
            code = s.proc.poll()
            if code is not None:
                finish(s, code)
        time.sleep(0.5)
    failed = [s.name for s in steps if s.code != 0]
    durations = "  ".join(f"{s.name} {minutes(s.ended - s.started)}" for s in steps if s.ended)
    print(f"step durations: {durations}  (all: {minutes(time.monotonic() - t0)})")
    if failed:
        print(f"failed: {' '.join(failed)}")
        return 1
    return 0


def main() -> int:
    make = os.environ.get("MAKE", "make")
    return run(STEPS, make, sequential=os.environ.get("SEQUENTIAL", "") not in ("", "0"))


if __name__ == "__main__":
    sys.exit(main())
