"""bench/state_bench.py's runs: the two sides (`SluiceSide`: the example jobs, or the instrumented
dedup, on the local cluster; `PeerSide`: a query in the peer's child, with its state figures) and
`Bench`, bench/paired_runs.py's PairedBench for the two jobs, with each run's RSS split by role and
the one instrumented dedup run that counts the process function's Python calls (`count_calls`: a
job file written from `COUNTED_JOB`, its counts read back)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import paired_runs
import spark_peer
from bench_common import fmt, size
from paired_runs import PEER, SLUICE, log, read_rows
from state_bench_checks import Check
from state_bench_jobs import DEDUP_JOB, EXAMPLES, FORM_FLAGS, JOBS, JOIN_JOB, Data, Job

CALLS_PREFIX = "calls-"  # the instrumented job's count files


COUNTED_JOB = '''"""Written by bench/state_bench.py: examples/dedup.py with its process function counting
its calls (process and on_timer: what the keyed-process operator counts as python_calls), written
to {counts}/calls-<pid>-<instance>.json while the final watermark fires the last timers."""

import json
import os
import sys

import cloudpickle

sys.path.insert(0, {examples!r})
import dedup  # noqa: E402 — importable once examples/ is on the path

from sluice.eventtime import MAX_WATERMARK  # noqa: E402 — after dedup, as the job file reads

cloudpickle.register_pickle_by_value(dedup)  # the TaskManagers cannot import examples/
COUNTS = {counts!r}


class Counted(dedup.FirstWithinTtl):
    def __init__(self, ttl_ms):
        super().__init__(ttl_ms)
        self.calls = [0, 0]  # process, on_timer

    def _write(self):
        path = os.path.join(COUNTS, f"calls-{{os.getpid()}}-{{id(self)}}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({{"process": self.calls[0], "on_timer": self.calls[1]}}, f)
        os.replace(tmp, path)

    def process(self, user, rows, ctx):
        self.calls[0] += 1
        if self.calls[0] % 20000 == 0:
            self._write()
        return super().process(user, rows, ctx)

    def on_timer(self, user, timestamp, ctx):
        self.calls[1] += 1
        out = super().on_timer(user, timestamp, ctx)
        if ctx.current_watermark == MAX_WATERMARK:  # the end of the input: this may be the last call
            self._write()
        return out


dedup.FirstWithinTtl = Counted  # dedup.build() as it is, with the counting function
dedup.main()
'''


def counted_job_text(counts_dir: str) -> str:
    return COUNTED_JOB.format(counts=counts_dir, examples=EXAMPLES)


def read_call_counts(counts_dir: str) -> dict[str, int]:
    """The instrumented run's calls, summed over its process-function instances: process, on_timer,
    instances."""
    total = {"process": 0, "on_timer": 0, "instances": 0}
    for name in sorted(os.listdir(counts_dir)) if os.path.isdir(counts_dir) else []:
        if name.startswith(CALLS_PREFIX) and name.endswith(".json"):
            with open(os.path.join(counts_dir, name)) as f:
                got = json.load(f)
            total["process"] += int(got["process"])
            total["on_timer"] += int(got["on_timer"])
            total["instances"] += 1
    return total


def rss_parts(peak_rss: dict[str, int], system: str) -> dict[str, int]:
    """From a ResourceMeter's peak RSS per process ("<label> <pid>" -> bytes) of one system: Sluice's
    TaskManager Python process and its Spark JVM (only TaskManagers start one; the cluster has one
    TaskManager); the peer's driver (its Python process and its JVM). The largest process of each role,
    not the sum: one quick run saw a second "spark-jvm" of ~0.9 GiB in the peer's tree (1.9 GiB for a
    1.0 GiB driver JVM), most likely a JVM child caught between fork and exec, which shows the JVM's
    command line and memory."""
    py = jvm = 0
    for name, rss in peak_rss.items():
        role = name.rsplit(" ", 1)[0]
        if role == "spark-jvm":
            jvm = max(jvm, rss)
        elif (system == SLUICE and role == "taskmanager") or (system == PEER and role.startswith("python")):
            py = max(py, rss)
    return {"py": py, "jvm": jvm, "total": py + jvm}


def peer_state(progress: Sequence[dict]) -> dict:
    """From the peer's batches (spark_peer.serve_queries's progress entries): the largest
    memoryUsedBytes summed over the state operators of a batch, the rows in state at the end, the rows
    dropped by the watermark."""
    peak = None
    for p in progress:
        if p["state"]:
            mem = sum(s.get("memoryUsedBytes") or 0 for s in p["state"])
            peak = mem if peak is None else max(peak, mem)
    last = progress[-1]["state"] if progress else []
    return {
        "state_peak": peak,
        "state_rows_end": sum(s.get("numRowsTotal") or 0 for s in last) if last else None,
        "late_dropped": sum(s.get("numRowsDroppedByWatermark") or 0 for p in progress for s in p["state"]),
    }


class PeerSide(spark_peer.PeerSide):
    """A job's query in the peer's child: bench/state_bench.py --child (its `peer_query`)."""

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "state_bench.py")

    def launch(self, job: Job, inputs: dict, out: str, knob: int, _job_file: str | None = None) -> Callable[[], dict]:
        return self.submit({"job": job.name, "out": out, "shuffle_partitions": knob, **inputs}, peer_state)


class SluiceSide(paired_runs.SluiceSide):
    """The example jobs (or the instrumented `job_file`) on the local cluster."""

    def launch(self, job: Job, inputs: dict, out: str, knob: int, job_file: str | None = None) -> Callable[[], dict]:
        if job.name == "dedup":
            path = job_file or DEDUP_JOB
            args = ["--input", inputs["input"], "--ttl-ms", str(inputs["ttl_ms"])]
            form = inputs.get("form", "process")  # the function per key, in its batch form, or stream.deduplicate
            args += FORM_FLAGS.get(form, "").split()
        else:
            path = job_file or JOIN_JOB
            args = ["--impressions", inputs["impressions"], "--clicks", inputs["clicks"]]
            args += ["--upper-ms", str(inputs["upper_ms"])]
        args += ["--output", out, "--out-of-orderness-ms", str(inputs["delay_ms"])]
        args += ["--checkpoint-interval", str(knob)]
        return self.submit(path, args)


class Bench(paired_runs.PairedBench):
    item_key = "job"
    error_chars = 600

    def __init__(self, args, work: str, data: dict[str, Data]):
        super().__init__(args, work)
        self.data = data

    def events(self, item: Job) -> int:
        return self.data[item.name].events

    def inputs(self, item: Job) -> list[str]:
        return self.data[item.name].dirs

    def launch(self, side: Any, item: Job, out: str, knob: int, **extra: Any) -> Callable[[], dict]:
        return side.launch(item, self.data[item.name].inputs, out, knob, extra.get("job_file"))

    def judge(self, system: str, item: Job, files: list[str], r: dict) -> tuple[Check, dict[str, int]]:
        got, per = read_rows(files, item.columns)
        return self.data[item.name].check(system, got), per

    def unreadable(self, error: str) -> Check:
        return Check(error=error)

    def usage(self, r: dict, usage: Any, system: str) -> None:
        r["steal_s"] = usage.steal_s
        rss = rss_parts(usage.peak_rss.get(paired_runs.MEASURED, {}), system)
        r.update(rss_py=rss["py"] or None, rss_jvm=rss["jvm"] or None, rss=rss["total"] or None)
        r["rss_processes"] = dict(usage.peak_rss.get(paired_runs.MEASURED, {}))

    def log_extra(self, r: dict) -> str:
        return f"RSS {size(r.get('rss'))}, "

    def count_calls(self) -> dict | None:
        """The instrumented dedup run (uncounted): python calls of the process function."""
        counts = os.path.join(self.work, "calls")
        os.makedirs(counts, exist_ok=True)
        path = os.path.join(self.work, "dedup_counted.py")
        with open(path, "w") as f:
            f.write(counted_job_text(counts))
        r = self.run(SLUICE, JOBS["dedup"], "instrumented", job_file=path)
        if "error" in r:
            return None
        calls: dict[str, Any] = read_call_counts(counts)  # the counts, then their events and rate
        r["calls"] = calls
        d = self.data["dedup"]
        calls["events"] = d.events
        calls["per_event"] = (calls["process"] + calls["on_timer"]) / d.events if d.events else None
        log(
            f"instrumented dedup: {calls['process']:,} process + {calls['on_timer']:,} on_timer calls in "
            f"{calls['instances']} instances = {fmt(calls['per_event'], '.3f')} per event"
        )
        return calls
