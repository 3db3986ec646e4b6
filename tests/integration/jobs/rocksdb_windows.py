"""Sliding event-time windows with aggregates on the rocksdb state backend (docs/state-backends.md):

    sluice run rocksdb_windows.py -- --input IN --output OUT [--window-ms 2000] [--slide-ms 1000]
        [--out-of-orderness-ms 500] [--checkpoint-interval MS] [--monitor-interval MS] [--backend memory|rocksdb]

Reads {"url": str, "user": int, "ts": int} JSON lines from a watched directory and writes,
per url and window, `url,window_start,window_end,views,users_sum` through the exactly-once
file sink once the watermark passes the window's end. The panes live in RocksDB
(taskmanager/state/rocksdb_panes.py)."""

import argparse

from sluice.api import FileSink, SlidingEventTimeWindows, StreamExecutionEnvironment, WatermarkStrategy

ap = argparse.ArgumentParser()
ap.add_argument("--input", required=True)
ap.add_argument("--output", required=True)
ap.add_argument("--window-ms", type=int, default=2000)
ap.add_argument("--slide-ms", type=int, default=1000)
ap.add_argument("--out-of-orderness-ms", type=int, default=500)
ap.add_argument("--checkpoint-interval", type=int, default=300)
ap.add_argument("--monitor-interval", type=int, default=200)
ap.add_argument("--backend", default="rocksdb", help="state.backend (memory: the same job for comparison)")
args = ap.parse_args()
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(args.checkpoint_interval)
env.set_config("state.backend", args.backend)
events = env.from_files(
    args.input,
    format="json",
    schema="url string, user long, ts long",
    name="page views",
    monitor_interval_ms=args.monitor_interval or None,
).uid("page-views")
strategy = WatermarkStrategy.for_bounded_out_of_orderness(args.out_of_orderness_ms).with_timestamp_column("ts")
windows = (
    events.assign_timestamps_and_watermarks(strategy)
    .key_by("url")
    .window(SlidingEventTimeWindows.of(args.window_ms, args.slide_ms))
    .aggregate(views=("count", "*"), users_sum=("sum", "user"))
    .uid("windows")
)
columns = ("url", "window_start", "window_end", "views", "users_sum")
windows.sink_to(FileSink(args.output, columns=columns), name="windows sink").uid("windows-sink")
env.execute("rocksdb_windows")
