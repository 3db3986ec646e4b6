"""Windowed join: impressions and clicks (generate_clicks.py) paired per imp_id within the same
tumbling event-time window.

    window_join.py --impressions DIR --clicks DIR --output DIR --window-ms MS"""

import argparse

from sluice.api import FileSink, StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impressions", required=True)
    ap.add_argument("--clicks", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--window-ms", type=int, required=True)
    args = ap.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(500)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(500).with_timestamp_column("ts")
    imps = env.from_files(args.impressions, format="json", schema="imp_id long, ad string, user long, ts long")
    clicks = env.from_files(args.clicks, format="json", schema="imp_id long, user long, ts long")
    joined = (
        imps.assign_timestamps_and_watermarks(strategy)
        .join(clicks.assign_timestamps_and_watermarks(strategy))
        .where("imp_id")
        .equal_to("imp_id")
        .window(TumblingEventTimeWindows.of(args.window_ms))
    )
    joined.sink_to(FileSink(args.output, columns=("imp_id", "window_start", "ts", "ts_right")))
    env.execute("window_join")


if __name__ == "__main__":
    main()
