"""Reference event-time job: page views per url and window.

    sluice run examples/windowed_page_views.py -- --input data/ --output out/ --window-ms 10000
        [--slide-ms 10000] [--out-of-orderness-ms 2000] [--allowed-lateness-ms 0]
        [--late-output DIR] [--checkpoint-interval 1000] [--monitor-interval MS [--idleness-ms MS]]
        [--state-backend memory|rocksdb]

Reads newline-delimited JSON events {"url": str, "user": int, "ts": int} (ts in epoch ms,
possibly out of order: `generate_page_views.py --disorder-ms`) from INPUT/*.jsonl, assigns
event time from `ts` with watermarks trailing the largest timestamp by the out-of-orderness
bound, and counts views per url in tumbling windows (or sliding ones with --slide-ms below
the window size). Each window's count is written once, when the watermark passes its end,
as a line `url,window_start,window_end,count` through the exactly-once file sink under
OUTPUT (an append stream: with --allowed-lateness-ms 0, one line per url and window). At
the end of the input every remaining window fires. Records later than their windows'
allowed lateness are dropped and counted (numLateRecordsDropped in `sluice status`), or
written to --late-output as `url,user,ts` lines. With --monitor-interval the job keeps
watching INPUT for new files (unbounded: windows fire as the watermark advances, and it runs
until cancelled); --idleness-ms then lets a source subtask that gets no files stop holding
back the watermark. --state-backend puts the windows' state on RocksDB (docs/state-backends.md).
"""

import argparse

from sluice.api import (
    FileSink,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)


def build(
    env: StreamExecutionEnvironment,
    input_dir: str,
    output_dir: str,
    window_ms: int,
    slide_ms: int | None = None,
    out_of_orderness_ms: int = 0,
    allowed_lateness_ms: int = 0,
    late_dir: str | None = None,
    monitor_interval_ms: int | None = None,
    idleness_ms: int | None = None,
) -> None:
    events = env.from_files(
        input_dir,
        format="json",
        schema="url string, user long, ts long",
        name="page views",
        monitor_interval_ms=monitor_interval_ms,
    )
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(out_of_orderness_ms).with_timestamp_column("ts")
    if idleness_ms:
        strategy = strategy.with_idleness(idleness_ms)
    timed = events.assign_timestamps_and_watermarks(strategy)
    assigner: TumblingEventTimeWindows | SlidingEventTimeWindows
    if slide_ms is None or slide_ms == window_ms:
        assigner = TumblingEventTimeWindows.of(window_ms)
    else:
        assigner = SlidingEventTimeWindows.of(window_ms, slide_ms)
    windowed = timed.key_by("url").window(assigner).allowed_lateness(allowed_lateness_ms)
    if late_dir:
        windowed.side_output_late_data().sink_to(FileSink(late_dir, columns=("url", "user", "ts")), name="late")
    counts = windowed.count()
    counts.sink_to(FileSink(output_dir, columns=("url", "window_start", "window_end", "count")), name="windows sink")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="directory of *.jsonl event files")
    ap.add_argument("--output", required=True, help="directory for committed url,window_start,window_end,count files")
    ap.add_argument("--window-ms", type=int, required=True, help="window size in ms")
    ap.add_argument("--slide-ms", type=int, default=None, help="slide in ms (default: the size: tumbling windows)")
    ap.add_argument("--out-of-orderness-ms", type=int, default=0, help="how far timestamps may run behind (ms)")
    ap.add_argument("--allowed-lateness-ms", type=int, default=0, help="how long a fired window still takes updates")
    ap.add_argument("--late-output", default=None, help="directory for records later than that (default: dropped)")
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="milliseconds; 0 disables checkpoints")
    ap.add_argument("--monitor-interval", type=int, default=0, help="ms; > 0 keeps watching --input (unbounded)")
    ap.add_argument("--idleness-ms", type=int, default=0, help="a source subtask without input this long is idle")
    ap.add_argument(
        "--state-backend",
        choices=("memory", "rocksdb"),
        default=None,
        help="where the windows' state lives (state.backend; default: the job option's default, memory)",
    )
    args = ap.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.state_backend:
        env.set_config("state.backend", args.state_backend)
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(args.checkpoint_interval)
    try:
        build(
            env,
            args.input,
            args.output,
            args.window_ms,
            args.slide_ms,
            args.out_of_orderness_ms,
            args.allowed_lateness_ms,
            args.late_output,
            args.monitor_interval or None,
            args.idleness_ms or None,
        )
    except (TypeError, ValueError) as exc:
        ap.error(str(exc))
    env.execute("windowed_page_views")


if __name__ == "__main__":
    main()
