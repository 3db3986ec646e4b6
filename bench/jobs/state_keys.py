"""bench/state_backend_bench.py's job: a running count over N distinct keys, then U updates spread
over them, on the state backend given (docs/state-backends.md).

    sluice run bench/jobs/state_keys.py -- --keys N --updates U --output DIR
        [--backend memory|rocksdb] [--full] [--interval MS] [--sample S] [--batch B]

Generator ids 0..N-1 are the keys themselves (every key once: the load), ids N..N+U-1 update key
pmod(id * MULT, N) (spread over all keys). Only keys below S reach the file sink (`k,count`): the
counts of those are checked exactly; the rest of the update stream is filtered out so that the
sink's cost does not hide the state backend's."""

import argparse

from sluice.api import FileSink, StreamExecutionEnvironment

MULT = 2654435761

ap = argparse.ArgumentParser()
ap.add_argument("--keys", type=int, required=True)
ap.add_argument("--updates", type=int, required=True)
ap.add_argument("--output", required=True)
ap.add_argument("--backend", default="memory")
ap.add_argument("--full", action="store_true")
ap.add_argument("--interval", type=int, default=2000)
ap.add_argument("--sample", type=int, default=1000)
ap.add_argument("--batch", type=int, default=100_000)
args = ap.parse_args()
n = args.keys
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(args.interval)
env.set_config("state.backend", args.backend)
env.set_config("state.backend.incremental", "false" if args.full else "true")
env.set_config("execution.checkpointing.timeout", "10min")
ids = env.from_generator(
    lambda df: df.selectExpr(f"CASE WHEN id < {n} THEN id ELSE pmod(id * {MULT}, {n}) END AS k"),
    count=n + args.updates,
    batch_size=args.batch,
    name="keys",
    schema="k long",
)
counts = ids.key_by("k").count().uid("counts")
counts.filter(f"k < {args.sample}", name="sample").sink_to(FileSink(args.output, columns=("k", "count")), name="sink")
env.execute("state_keys")
