"""Reference job for keyed state and timers: the first event per user within a time-to-live.

    sluice run examples/dedup.py -- --input DIR --output DIR --ttl-ms 60000
        [--out-of-orderness-ms 2000] [--checkpoint-interval 1000] [--state-backend rocksdb] [--builtin]

Reads page-view events {"url": str, "user": int, "ts": int} from INPUT/*.jsonl
(`generate_page_views.py --users N` makes users repeat) and writes `user,ts,url` for each
event that is a user's first in `--ttl-ms` of event time: an event is kept when the user
has no kept event in the `ttl` ms before it. Events are taken in timestamp order once the
watermark passes them, so the output does not depend on how the input was split or
batched. The process function keeps, per user, the events waiting for the watermark
(`list_state`), the timestamp of the last kept one (`value_state`) and one event-time timer,
at the latest waiting event or, with none waiting, when the user is to be forgotten (`ttl`
after their last kept event), so state stays bounded by the users active within the TTL. It
returns its rows as a list of dicts, the cheapest form for a few rows.

`--builtin` computes the same output with the built-in operator instead,
`stream.deduplicate("user", within_ms=ttl)` (docs/user-state.md#deduplicate): vectorized, no
Python call per user, the way to deduplicate unless the rule needs code of its own.
"""

import argparse

import pandas as pd

from sluice.api import FileSink, StreamExecutionEnvironment, WatermarkStrategy


class FirstWithinTtl:
    """Per user: the events waiting for the watermark, the last kept event's time, and one
    event-time timer (at the latest waiting event, or when the user is to be forgotten)."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl = ttl_ms

    def _move_timer(self, ctx, at: int) -> None:
        timer = ctx.value_state("timer")
        if timer.value != at:
            if timer.value is not None:
                ctx.delete_event_time_timer(timer.value)
            ctx.register_event_time_timer(at)
            timer.update(at)

    def process(self, user, rows: pd.DataFrame, ctx) -> None:  # noqa: ARG002 — the user is the key: state is per user already
        ts = rows["ts"].tolist()
        ctx.list_state("pending").add_all(list(zip(ts, rows["url"].tolist(), strict=True)))
        timer = ctx.value_state("timer").value
        self._move_timer(ctx, max(max(ts), timer if timer is not None else max(ts)))

    def on_timer(self, user, timestamp: int, ctx) -> list[dict] | None:
        ctx.value_state("timer").clear()
        pending = ctx.list_state("pending")
        last = ctx.value_state("last")
        kept = []
        for ts, url in sorted(pending.get()):  # all waiting events: the timer is at the latest one
            if last.value is None or ts >= last.value + self.ttl:
                last.update(ts)
                kept.append({"user": user, "ts": ts, "url": url})
        pending.clear()
        if last.value is not None:
            if timestamp >= last.value + self.ttl:
                last.clear()  # the watermark passed the TTL: no later event can be a duplicate
            else:
                self._move_timer(ctx, last.value + self.ttl)  # forget the user then
        return kept or None


def build(
    env: StreamExecutionEnvironment,
    input_dir: str,
    output_dir: str,
    ttl_ms: int,
    out_of_orderness_ms: int,
    builtin: bool = False,
) -> None:
    events = env.from_files(input_dir, format="json", schema="url string, user long, ts long", name="page views")
    timed = events.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(out_of_orderness_ms).with_timestamp_column("ts")
    )
    if builtin:
        firsts = timed.deduplicate("user", within_ms=ttl_ms)
    else:
        schema = "user bigint, ts bigint, url string"
        firsts = timed.key_by("user").process(FirstWithinTtl(ttl_ms), output_schema=schema)
    firsts.sink_to(FileSink(output_dir, columns=("user", "ts", "url")), name="firsts sink")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="directory of *.jsonl event files")
    ap.add_argument("--output", required=True, help="directory for committed user,ts,url files")
    ap.add_argument("--ttl-ms", type=int, required=True, help="a user's next event counts again after this long")
    ap.add_argument("--out-of-orderness-ms", type=int, default=0, help="how far timestamps may run behind (ms)")
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="milliseconds; 0 disables checkpoints")
    ap.add_argument(
        "--state-backend",
        choices=("memory", "rocksdb"),
        default="memory",
        help="where the per-user state and timers live (docs/state-backends.md)",
    )
    ap.add_argument("--builtin", action="store_true", help="the built-in deduplicate operator, not the function")
    args = ap.parse_args()
    if args.ttl_ms <= 0:
        ap.error("--ttl-ms must be > 0")
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(args.checkpoint_interval)
    env.set_config("state.backend", args.state_backend)
    build(env, args.input, args.output, args.ttl_ms, args.out_of_orderness_ms, builtin=args.builtin)
    env.execute("dedup")


if __name__ == "__main__":
    main()
