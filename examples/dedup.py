"""Reference job for keyed state and timers: the first event per user within a time-to-live.

    sluice run examples/dedup.py -- --input DIR --output DIR --ttl-ms 60000
        [--out-of-orderness-ms 2000] [--checkpoint-interval 1000] [--state-backend rocksdb]
        [--builtin | --batch-form]

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

`--batch-form` runs the same rule as a batch-form process function (`process_batch`,
docs/user-state.md#the-batch-form): one call per batch for all its users, state read and
written as lists. `--builtin` computes the same output with the built-in operator instead,
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


class FirstWithinTtlBatch:
    """The same rule in the batch form (`process_batch`): one call per batch for all its users
    and one per timer round, the per-user state read and written as lists."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl = ttl_ms

    def _move_timers(self, ctx, users: list, ats: list, olds: list) -> None:
        moved = [(u, at, old) for u, at, old in zip(users, ats, olds, strict=True) if at != old]
        if not moved:
            return
        stale = [(u, old) for u, _at, old in moved if old is not None]
        if stale:
            ctx.delete_event_time_timers([u for u, _ in stale], [old for _, old in stale])
        keys, times = [u for u, _at, _old in moved], [at for _u, at, _old in moved]
        ctx.register_event_time_timers(keys, times)
        ctx.value_state("timer").update(keys, times)

    def process(self, rows: pd.DataFrame, ctx) -> None:
        users, bounds = ctx.keys, ctx.offsets.tolist()
        ts, urls = rows["ts"].tolist(), rows["url"].tolist()
        spans = list(zip(bounds[:-1], bounds[1:], strict=True))
        ctx.list_state("pending").add_all(users, [list(zip(ts[a:b], urls[a:b], strict=True)) for a, b in spans])
        timers = ctx.value_state("timer").get(users)
        latest = [max(ts[a:b]) for a, b in spans]
        ats = [t if old is None or old < t else old for t, old in zip(latest, timers, strict=True)]
        self._move_timers(ctx, users, ats, timers)

    def on_timer(self, timers: pd.DataFrame, ctx) -> list[dict] | None:
        fired: dict = {}  # user -> the latest of its timers in this round (one each, as a rule)
        for user, stamp in zip(ctx.keys, timers["timestamp"].tolist(), strict=True):
            fired[user] = max(stamp, fired.get(user, stamp))
        users = list(fired)
        ctx.value_state("timer").clear(users)
        pendings, lasts = ctx.list_state("pending").get(users), ctx.value_state("last").get(users)
        ctx.list_state("pending").clear(users)
        kept: list[dict] = []
        forget: list[tuple[int, int]] = []
        remember: list[tuple[int, int]] = []
        for user, pending, last in zip(users, pendings, lasts, strict=True):
            for ts, url in sorted(pending):  # all waiting events: the timer is at the latest one
                if last is None or ts >= last + self.ttl:
                    last = ts
                    kept.append({"user": user, "ts": ts, "url": url})
            if last is not None:
                (forget if fired[user] >= last + self.ttl else remember).append((user, last))
        ctx.value_state("last").clear([u for u, _ in forget])  # no later event can be a duplicate
        if remember:
            ctx.value_state("last").update([u for u, _ in remember], [t for _, t in remember])
            self._move_timers(
                ctx, [u for u, _ in remember], [t + self.ttl for _, t in remember], [None] * len(remember)
            )
        return kept or None


def build(
    env: StreamExecutionEnvironment,
    input_dir: str,
    output_dir: str,
    ttl_ms: int,
    out_of_orderness_ms: int,
    builtin: bool = False,
    batch_form: bool = False,
) -> None:
    events = env.from_files(input_dir, format="json", schema="url string, user long, ts long", name="page views")
    timed = events.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(out_of_orderness_ms).with_timestamp_column("ts")
    )
    if builtin:
        firsts = timed.deduplicate("user", within_ms=ttl_ms)
    elif batch_form:
        schema = "user bigint, ts bigint, url string"
        firsts = timed.key_by("user").process_batch(FirstWithinTtlBatch(ttl_ms), output_schema=schema)
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
    form = ap.add_mutually_exclusive_group()
    form.add_argument("--builtin", action="store_true", help="the built-in deduplicate operator, not the function")
    form.add_argument("--batch-form", action="store_true", help="the function's batch form: one call per batch")
    args = ap.parse_args()
    if args.ttl_ms <= 0:
        ap.error("--ttl-ms must be > 0")
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(args.checkpoint_interval)
    env.set_config("state.backend", args.state_backend)
    build(
        env,
        args.input,
        args.output,
        args.ttl_ms,
        args.out_of_orderness_ms,
        builtin=args.builtin,
        batch_form=args.batch_form,
    )
    env.execute("dedup")


if __name__ == "__main__":
    main()
