"""A keyed process function in its two forms, on the operator alone: examples/dedup.py's per-key
function (`process`, one call per key and batch) against its batch form (`process_batch`, one call
per batch), fed the same batches in one process, alternating form by form, run by run.

    python bench/process_forms_bench.py [--events 400000] [--users 20000] [--files 32] [--runs 5]
        [--checkpoint-every 4] [--ttl-ms 60000] [--forms per-key,batch] [--before COMMIT]
        [--out bench/RESULTS.md | -]

Input: examples/generate_page_views.py's generate() (seed 7, timestamps out of order by up to
2,000 ms), read with pyarrow, one batch per file, the key group column added as a TaskManager's
exchange adds it. Each run builds a fresh operator (memory state backend, the rule's TTL --ttl-ms
of event time, 60,000 ms by default as in `state_bench.py`'s dedup; a longer TTL keeps more users
in the state) and per batch calls process(), then on_watermark() at the batch's largest
timestamp minus 2,000 ms, a snapshot every --checkpoint-every batches, and end_input(). Measured per
run: CPU seconds of this process (time.process_time) for the whole input, the part spent in
snapshots, and the operator's calls into user code; the two forms' outputs are compared row for
row on every run. No Spark, no cluster: the figure is the operator's own cost, which is what the
form changes (state_bench.py measures whole jobs on a cluster).

--before COMMIT: the operator code of COMMIT too (a temporary git worktree), for an operator
change's before/after figures: every measured run is then a child process importing one of the two
checkouts' code, the two alternating run by run, and the outputs of both must be the same.

Order (`run_order`): a warm-up round, then --runs rounds; each round runs every (checkout, form)
once, forward in even rounds and backward in odd ones. The section is
bench/process_forms_bench_report.py's.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import TypeVar

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# the checkout whose operator and examples are measured: this one, or --before's in a child run
CODE = os.environ.get("PROCESS_FORMS_CODE", REPO)
sys.path[:0] = [CODE, os.path.join(CODE, "examples")]

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
from bench_common import add_worktree, begin_run, finish_workdir, publish, remove_worktree, run_main
from process_forms_bench_report import DISORDER_MS, FORMS, SEED, THIS, report
from run_matrix import Order, items_only

from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from taskmanager.operators.base import OperatorContext
from taskmanager.operators.keyed_process import KeyedProcess
from taskmanager.spark_engine import Batch

T = TypeVar("T")


def child_run(code: str, form: str, data: str, checkpoint_every: int, ttl_ms: int) -> tuple[dict, str]:
    """One run in a child process importing the operator code of the checkout at `code`: its
    figures and a digest of its output rows."""
    argv = [sys.executable, os.path.abspath(__file__), "--child", form, data, str(checkpoint_every), str(ttl_ms)]
    out = subprocess.run(
        argv, env={**os.environ, "PROCESS_FORMS_CODE": code}, check=True, capture_output=True, text=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["run"], result["digest"]


def digest(rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def batches(directory: str) -> list[pa.Table]:
    tables = []
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        t = pj.read_json(path)
        t = t.append_column(KEY_GROUP, pa.array((t.column("user").to_numpy() % 128).astype(np.int32)))
        tables.append(t)
    return tables


def one_run(form: str, tables: list[pa.Table], checkpoint_every: int, ttl_ms: int) -> tuple[dict, list[dict]]:
    from dedup import FirstWithinTtl, FirstWithinTtlBatch

    fn = FirstWithinTtlBatch(ttl_ms) if form == "batch" else FirstWithinTtl(ttl_ms)
    ctx = OperatorContext(name="p", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=True)
    settings = {"keys": ["user"], "process": fn, "output_schema": "user bigint, ts bigint, url string"}
    op = KeyedProcess.create(OperatorKind.PROCESS, {**settings, "batch": form == "batch"}, ctx)
    rows: list[dict] = []

    def emit(batch: Batch | None) -> None:
        if batch is not None:
            rows.extend(batch.table().to_pylist())

    snapshots = 0.0
    start = time.process_time()
    for i, t in enumerate(tables):
        emit(op.process(Batch(None, table=t)))
        emit(op.on_watermark(int(np.max(t.column("ts").to_numpy())) - DISORDER_MS))
        if (i + 1) % checkpoint_every == 0:
            t0 = time.process_time()
            op.snapshot(i + 1)
            snapshots += time.process_time() - t0
    emit(op.end_input())
    cpu = time.process_time() - start
    return {"form": form, "cpu": cpu, "snapshots": snapshots, "calls": op.python_calls, "rows": len(rows)}, rows


def run_order(conditions: list[T], runs: int) -> list[tuple[int, T]]:
    """(round, condition) in run order: round 0 warms up, rounds 1 to `runs` are measured; each round
    runs every condition once, forward in even rounds and backward in odd ones."""
    order = items_only(conditions, runs + 1, Order.REVERSE)
    return [(k // len(conditions), c) for k, c in enumerate(order)]


def measure(
    args: argparse.Namespace, codes: list[tuple[str, str]], forms: list[str], data: str, tables: list[pa.Table]
) -> list[dict]:
    """Every run (`codes`: (label, checkout); a child process per run when there is more than this
    one); the outputs must all be the same. Returns the measured runs."""
    runs: list[dict] = []
    reference: str | None = None
    for i, (code, form) in run_order([(code, form) for code in codes for form in forms], args.runs):
        label, root = code
        if len(codes) > 1:
            run, output = child_run(root, form, data, args.checkpoint_every, args.ttl_ms)
        else:
            run, rows = one_run(form, tables, args.checkpoint_every, args.ttl_ms)
            output = digest(rows)
        if reference is None:
            reference = output
        elif output != reference:
            raise SystemExit(f"{label}: the {form} form's output differs from the first run's (run {i})")
        run["code"] = label
        which = "warm-up" if i == 0 else f"run {i}"
        log(f"{which}: {label} {form} {run['cpu']:.2f}s CPU, {run['calls']:,} calls")
        if i:
            runs.append(run)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--users", type=int, default=20_000)
    ap.add_argument("--files", type=int, default=32, help="batches (one input file each)")
    ap.add_argument("--runs", type=int, default=5, help="measured runs per form")
    ap.add_argument("--checkpoint-every", type=int, default=4, help="batches between snapshots")
    ap.add_argument("--ttl-ms", type=int, default=60_000, help="the rule's TTL in event time (ms)")
    ap.add_argument("--forms", default=",".join(FORMS), help="forms to run, of: " + ", ".join(FORMS))
    ap.add_argument("--before", default=None, help="a commit whose operator code runs too (a temporary git worktree)")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to ('-': none)")
    if sys.argv[1:2] == ["--child"]:  # one run for a parent's --before comparison: JSON on stdout
        form, data, every, ttl = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        run, rows = one_run(form, batches(data), every, ttl)
        print(json.dumps({"run": run, "digest": digest(rows)}))
        return 0
    args = ap.parse_args()
    if min(args.events, args.users, args.files, args.runs, args.checkpoint_every, args.ttl_ms) < 1:
        ap.error("every number must be >= 1")
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if not forms or any(f not in FORMS for f in forms):
        ap.error(f"--forms: a comma-separated list of {', '.join(FORMS)}")
    from generate_page_views import generate

    command, facts, temp, work = begin_run(REPO, None, "process-forms-", log)
    worktree = add_worktree(REPO, args.before, os.path.join(work, "before")) if args.before else None
    try:
        data = os.path.join(work, "in")
        generate(
            data,
            events=args.events,
            files=args.files,
            urls=10_000,
            seed=SEED,
            disorder_ms=DISORDER_MS,
            users=args.users,
        )
        tables = batches(data)
        events = sum(t.num_rows for t in tables)
        codes = [(THIS, REPO), *([(f"before {args.before}", worktree)] if worktree else [])]
        runs = measure(args, codes, forms, data, tables)
        publish(report(command, facts, args, runs, events), args.out, log, append=args.out != "-")
    finally:
        if worktree:
            remove_worktree(REPO, worktree)
        finish_workdir(work, temp, log)
    return 0


if __name__ == "__main__":
    run_main(main)
