"""Reference job for keyed state and timers: the first event per user within a time-to-live.

    sluice run examples/dedup.py -- --input DIR --output DIR --ttl-ms 60000
        [--out-of-orderness-ms 2000] [--checkpoint-interval 1000]

Reads page-view events {"url": str, "user": int, "ts": int} from INPUT/*.jsonl
(`generate_page_views.py --users N` makes users repeat) and writes `user,ts,url` for each
event that is a user's first in `--ttl-ms` of event time: an event is kept when the user
has no kept event in the `ttl` ms before it. Events are taken in timestamp order once the
watermark passes them, so the output does not depend on how the input was split or
batched. The process function keeps, per user, the events waiting for the watermark
(`list_state`) and the timestamp of the last kept one (`value_state`), with one event-time
timer per user and batch; a user's state is dropped `ttl` after their last kept event, so
state stays bounded by the users active within the TTL.
"""

import argparse

import pandas as pd

from sluice.api import FileSink, StreamExecutionEnvironment, WatermarkStrategy


class FirstWithinTtl:
    def __init__(self, ttl_ms: int) -> None:
        self.ttl = ttl_ms

    def process(self, user, rows: pd.DataFrame, ctx) -> None:  # noqa: ARG002 — the user is the key: state is per user already
        ctx.list_state("pending").add_all(list(zip(rows["ts"].tolist(), rows["url"].tolist(), strict=True)))
        ctx.register_event_time_timer(int(rows["ts"].max()))

    def on_timer(self, user, timestamp: int, ctx) -> pd.DataFrame | None:
        pending = ctx.list_state("pending")
        last = ctx.value_state("last")
        waiting = sorted(pending.get())
        due = [e for e in waiting if e[0] <= timestamp]
        kept = []
        for ts, url in due:
            if last.value is None or ts >= last.value + self.ttl:
                last.update(ts)
                kept.append((ts, url))
        rest = waiting[len(due) :]
        if rest:
            pending.update(rest)
        else:
            pending.clear()
            if last.value is not None:
                if timestamp >= last.value + self.ttl:
                    last.clear()  # the watermark passed the TTL: no later event can be a duplicate
                else:
                    ctx.register_event_time_timer(last.value + self.ttl)  # forget the user then
        if not kept:
            return None
        return pd.DataFrame({"user": [user] * len(kept), "ts": [t for t, _u in kept], "url": [u for _t, u in kept]})


def build(
    env: StreamExecutionEnvironment, input_dir: str, output_dir: str, ttl_ms: int, out_of_orderness_ms: int
) -> None:
    events = env.from_files(input_dir, format="json", schema="url string, user long, ts long", name="page views")
    timed = events.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(out_of_orderness_ms).with_timestamp_column("ts")
    )
    firsts = timed.key_by("user").process(FirstWithinTtl(ttl_ms), output_schema="user bigint, ts bigint, url string")
    firsts.sink_to(FileSink(output_dir, columns=("user", "ts", "url")), name="firsts sink")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="directory of *.jsonl event files")
    ap.add_argument("--output", required=True, help="directory for committed user,ts,url files")
    ap.add_argument("--ttl-ms", type=int, required=True, help="a user's next event counts again after this long")
    ap.add_argument("--out-of-orderness-ms", type=int, default=0, help="how far timestamps may run behind (ms)")
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="milliseconds; 0 disables checkpoints")
    args = ap.parse_args()
    if args.ttl_ms <= 0:
        ap.error("--ttl-ms must be > 0")
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(args.checkpoint_interval)
    build(env, args.input, args.output, args.ttl_ms, args.out_of_orderness_ms)
    env.execute("dedup")


if __name__ == "__main__":
    main()
