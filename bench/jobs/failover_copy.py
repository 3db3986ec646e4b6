"""bench/batch_bench.py's failover job: an embarrassingly parallel streaming copy of page views
(source -> a paced pass-through -> file sink, all chained: one pipelined region per subtask,
docs/batch.md) under a given failover strategy.

    sluice run bench/jobs/failover_copy.py -p 4 -- --input DIR --output DIR --strategy region|full
                                                  [--checkpoint-interval 500] [--pause 0.1]

Every input row comes out once (url,user,ts lines), so a restart that replays or loses rows
shows in the output. `--pause`: seconds each batch spends in the pass-through (on the
TaskManager), which stretches the job to a length a kill can land in.
"""

import argparse
import time

from sluice.api import FileSink, StreamExecutionEnvironment

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--input", required=True)
ap.add_argument("--output", required=True)
ap.add_argument("--strategy", choices=("region", "full"), required=True, help="jobmanager.execution.failover-strategy")
ap.add_argument("--checkpoint-interval", type=int, default=500, help="ms")
ap.add_argument("--pause", type=float, default=0.1, help="seconds per batch")
args = ap.parse_args()
pause = args.pause


def paced(batch):
    time.sleep(pause)
    return batch


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(args.checkpoint_interval)
env.set_config("jobmanager.execution.failover-strategy", args.strategy)
# one file per source read: the pass-through's pause then paces every file, so the job lasts long
# enough for a checkpoint and a kill (a read sized by execution.source.batch-duration takes a
# subtask's whole backlog of small files in one call, and the job ends before any kill)
env.set_config("execution.source.max-files-per-read", "1")
views = env.from_files(args.input, format="json", schema="url string, user long, ts long", name="views")
views.map(paced, name="paced").sink_to(FileSink(args.output, columns=("url", "user", "ts")), name="copy")
env.execute(f"failover_copy ({args.strategy})")
