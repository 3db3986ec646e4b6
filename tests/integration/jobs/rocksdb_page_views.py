"""examples/page_views.py's job on the rocksdb state backend (docs/state-backends.md):

    sluice run rocksdb_page_views.py -- --input IN --output OUT [--checkpoint-interval MS]
        [--monitor-interval MS] [--full]

--full: full checkpoints (state.backend.incremental false) instead of incremental ones."""

import argparse

from sluice.api import FileSink, StreamExecutionEnvironment

ap = argparse.ArgumentParser()
ap.add_argument("--input", required=True)
ap.add_argument("--output", required=True)
ap.add_argument("--checkpoint-interval", type=int, default=300)
ap.add_argument("--monitor-interval", type=int, default=0)
ap.add_argument("--full", action="store_true")
args = ap.parse_args()
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(args.checkpoint_interval)
env.set_config("state.backend", "rocksdb")
env.set_config("state.backend.incremental", "false" if args.full else "true")
events = env.from_files(
    args.input,
    format="json",
    schema="url string, user long, ts long",
    name="page views",
    monitor_interval_ms=args.monitor_interval or None,
).uid("page-views")
counts = events.key_by("url").count().uid("counts")
counts.sink_to(FileSink(args.output, columns=("url", "count")), name="counts sink").uid("counts-sink")
env.execute("rocksdb_page_views")
