"""Parquet page-view events counted per url into a file sink of a given format, and
(optionally) every event copied as it is into a second file sink.

    sluice run parquet_counts.py -- INPUT OUTPUT [--sink-format parquet] [--copy DIR]
        [--copy-format json] [--checkpoint-interval MS] [--batch] [--monitor-interval MS]

The source takes its schema from the first file's footer (docs/file-formats.md).
--copy writes the events (url, user, ts) to DIR: exactly once, each input row is
there once. --batch runs the job in BATCH mode (docs/batch.md); --monitor-interval keeps
reading Parquet files that appear later (until cancelled).
"""

import argparse

from sluice.api import FileSink, StreamExecutionEnvironment

p = argparse.ArgumentParser()
p.add_argument("input")
p.add_argument("output")
p.add_argument("--sink-format", default="parquet")
p.add_argument("--copy")
p.add_argument("--copy-format", default="json")
p.add_argument("--checkpoint-interval", type=int, default=0)
p.add_argument("--batch", action="store_true")
p.add_argument("--monitor-interval", type=int, default=None)
args = p.parse_args()

env = StreamExecutionEnvironment.get_execution_environment()
if args.batch:
    env.set_runtime_mode("BATCH")
elif args.checkpoint_interval > 0:
    env.enable_checkpointing(args.checkpoint_interval)
events = env.from_files(args.input, format="parquet", name="events", monitor_interval_ms=args.monitor_interval)
counts = events.key_by("url").count()
counts.sink_to(FileSink(args.output, columns=("url", "count"), format=args.sink_format), name="counts sink")
if args.copy:
    events.sink_to(FileSink(args.copy, columns=("url", "user", "ts"), format=args.copy_format), name="copy sink")
env.execute("parquet_counts")
