"""Reference job for two-input operators: clicks joined with their impressions within an
interval of event time.

    sluice run examples/click_join.py -- --impressions DIR --clicks DIR --output DIR
        [--lower-ms 0] [--upper-ms 600000] [--out-of-orderness-ms 0] [--checkpoint-interval 1000]

Reads impressions {"imp_id", "ad", "user", "ts"} and clicks {"imp_id", "user", "ts"}
(`generate_clicks.py` writes both) and writes `imp_id,ad,ts,ts_right` for every click whose
timestamp lies in [impression ts + lower, impression ts + upper]: an interval join keyed by
imp_id. Each pair is written once, when its later row arrives; rows are kept only until the
watermark says no partner can come any more.
"""

import argparse

from sluice.api import FileSink, StreamExecutionEnvironment, WatermarkStrategy


def build(
    env: StreamExecutionEnvironment,
    impressions_dir: str,
    clicks_dir: str,
    output_dir: str,
    lower_ms: int,
    upper_ms: int,
    out_of_orderness_ms: int,
) -> None:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(out_of_orderness_ms).with_timestamp_column("ts")
    impressions = env.from_files(
        impressions_dir, format="json", schema="imp_id long, ad string, user long, ts long", name="impressions"
    ).assign_timestamps_and_watermarks(strategy)
    clicks = env.from_files(
        clicks_dir, format="json", schema="imp_id long, user long, ts long", name="clicks"
    ).assign_timestamps_and_watermarks(strategy)
    joined = impressions.key_by("imp_id").interval_join(clicks.key_by("imp_id")).between(lower_ms, upper_ms)
    joined.sink_to(FileSink(output_dir, columns=("imp_id", "ad", "ts", "ts_right")), name="joined sink")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impressions", required=True, help="directory of impression *.jsonl files")
    ap.add_argument("--clicks", required=True, help="directory of click *.jsonl files")
    ap.add_argument("--output", required=True, help="directory for committed imp_id,ad,ts,ts_right files")
    ap.add_argument("--lower-ms", type=int, default=0, help="earliest click, relative to its impression (ms)")
    ap.add_argument("--upper-ms", type=int, default=600_000, help="latest click, relative to its impression (ms)")
    ap.add_argument("--out-of-orderness-ms", type=int, default=0, help="how far timestamps may run behind (ms)")
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="milliseconds; 0 disables checkpoints")
    args = ap.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(args.checkpoint_interval)
    try:
        build(
            env,
            args.impressions,
            args.clicks,
            args.output,
            args.lower_ms,
            args.upper_ms,
            args.out_of_orderness_ms,
        )
    except (TypeError, ValueError) as exc:
        ap.error(str(exc))
    env.execute("click_join")


if __name__ == "__main__":
    main()
