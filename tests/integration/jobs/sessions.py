"""Session windows per user, with aggregates and with apply, over JSON events
{"user": int, "url": str, "ts": int}:

    sessions.py --input DIR --output DIR --apply-output DIR --gap-ms MS

OUTPUT gets `user,window_start,window_end,views,first_ts` per session; APPLY-OUTPUT
`user,window_start,window_end,urls` (distinct urls of the session, from apply)."""

import argparse

import pandas as pd

from sluice.api import EventTimeSessionWindows, FileSink, StreamExecutionEnvironment, WatermarkStrategy


def distinct_urls(user, start, end, rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"urls": [rows["url"].nunique()]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--apply-output", required=True)
    ap.add_argument("--gap-ms", type=int, required=True)
    args = ap.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(500)
    events = env.from_files(args.input, format="json", schema="user long, url string, ts long")
    timed = events.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(3000).with_timestamp_column("ts")
    )
    sessions = timed.key_by("user").window(EventTimeSessionWindows.with_gap(args.gap_ms))
    stats = sessions.aggregate(views=("count", "*"), first_ts=("min", "ts"))
    stats.sink_to(FileSink(args.output, columns=("user", "window_start", "window_end", "views", "first_ts")))
    urls = timed.key_by("user").window(EventTimeSessionWindows.with_gap(args.gap_ms)).apply(distinct_urls)
    urls.sink_to(FileSink(args.apply_output, columns=("user", "window_start", "window_end", "urls")))
    env.execute("sessions")


if __name__ == "__main__":
    main()
