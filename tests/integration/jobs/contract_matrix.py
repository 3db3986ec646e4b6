"""Every stateful operator kind at once, as parallel branches of one source, for the contract
matrix (tests/integration/test_contract_matrix.py):

    contract_matrix.py --input DIR --output ROOT [--monitor-interval MS] [--backend memory|rocksdb]
        [--checkpoint-interval MS] [--out-of-orderness-ms MS] [--idleness-ms MS]

Reads JSON lines {"kind", "url", "user", "v", "k", "kb", "factor", "ts"} (kind "e" an event, "a"/"b"
the two sides of a join pair with id k (a) or kb (b), "r" a rule giving url a factor from ts on) from DIR,
watched with --monitor-interval, else a fixed listing read to its end. Each branch below has
uid'd operators and two un-chained keyed sinks: a FileSink under ROOT/<branch>/ and a SqliteSink
into ROOT/<branch>.db, table t, keyed by the branch's natural key.

    agg        key_by(url) running count and sum(v)                      key url
    tumbling   key_by(url) tumbling 1 s windows, count and sum(v)         key (url, window_start)
    sliding    key_by(url) sliding 2 s every 1 s, count and max(v)        key (url, window_start)
    session    key_by(user) session windows, gap 250 ms, count, min(ts)   key (user, window_start)
    apply      key_by(user) tumbling 1 s windows, apply: distinct urls, sum(v)  key (user, window_start)
    timers     key_by(url) process function: counts per 1 s bucket, emitted by an event-time timer
               at the bucket's end with the url's running total           key (url, bucket)
    interval   a join b on k, b.ts in [a.ts, a.ts + 500]                  key k
    wjoin      a join b on k in the same tumbling 1 s window              key (k, window_start)
    bcast      key_by(url) connected to the broadcast rules: per 1 s bucket the count times the
               factor of the url's latest rule at or before the bucket's last ms (timer)
                                                                          key (url, bucket)
"""

import argparse
import os

import pandas as pd

from sluice.api import (
    EventTimeSessionWindows,
    FileSink,
    SlidingEventTimeWindows,
    SqliteSink,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)

BUCKET = 1_000  # ms: tumbling windows, the timers' buckets, the window join's windows
SLIDE_SIZE, SLIDE = 2_000, 1_000
GAP = 250  # session gap
BETWEEN = (0, 500)  # interval join bounds


class BucketTimers:
    """Counts per (url, bucket) in map state; the timer at the bucket's last ms emits the count
    and the url's running total of fired buckets (value state), then forgets the bucket."""

    def process(self, url, rows: pd.DataFrame, ctx) -> None:
        buckets = ctx.map_state("buckets")
        for b, n in (rows["ts"] // BUCKET * BUCKET).value_counts().items():
            buckets[int(b)] = buckets.get(int(b), 0) + int(n)
            ctx.register_event_time_timer(int(b) + BUCKET - 1)

    def on_timer(self, url, ts, ctx) -> pd.DataFrame:
        bucket = ts - BUCKET + 1
        buckets = ctx.map_state("buckets")
        n = buckets[bucket]
        del buckets[bucket]
        total = ctx.value_state("total")
        total.update((total.value or 0) + n)
        return pd.DataFrame({"url": [url], "bucket": [bucket], "n": [n], "total": [total.value]})


class ScaledBuckets(BucketTimers):
    """Broadcast state: rules (url, ts) -> factor. A bucket fires at its last ms T with the count
    times the factor of the url's latest rule with ts <= T (1 without one): every such rule came
    before the watermark passed T, so the answer does not depend on how the inputs interleave."""

    def process_broadcast(self, rules: pd.DataFrame, ctx) -> None:
        factors = ctx.broadcast_state("factors")
        rules = rules[rules["kind"] == "r"]
        for url, ts, factor in zip(rules["url"], rules["ts"], rules["factor"], strict=True):
            factors[(url, int(ts))] = int(factor)

    def on_timer(self, url, ts, ctx) -> pd.DataFrame:
        bucket = ts - BUCKET + 1
        buckets = ctx.map_state("buckets")
        n = buckets[bucket]
        del buckets[bucket]
        factors = ctx.broadcast_state("factors")
        ruled = [(t, f) for (u, t), f in factors.items() if u == url and t <= ts]
        factor = max(ruled)[1] if ruled else 1
        return pd.DataFrame({"url": [url], "bucket": [bucket], "n": [n], "scaled": [n * factor]})


def distinct_urls(user, start, end, rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"urls": [int(rows["url"].nunique())], "vsum": [int(rows["v"].sum())]})


def sinks(stream, root: str, branch: str, key: tuple[str, ...], columns: tuple[str, ...]) -> None:
    stream.sink_to(FileSink(os.path.join(root, branch), columns=columns), name=f"{branch} file").uid(f"{branch}-file")
    sqlite = SqliteSink(os.path.join(root, f"{branch}.db"), "t", key=key, columns=columns)
    stream.sink_to(sqlite, name=f"{branch} sqlite").uid(f"{branch}-sqlite")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--monitor-interval", type=int, default=0)
    ap.add_argument("--backend", default="memory")
    ap.add_argument("--checkpoint-interval", type=int, default=500)
    ap.add_argument("--out-of-orderness-ms", type=int, default=1_000)
    ap.add_argument("--idleness-ms", type=int, default=300)
    args = ap.parse_args()
    root = args.output
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(args.checkpoint_interval)
    env.set_config("state.backend", args.backend)
    env.set_config("execution.checkpointing.timeout", "180000")  # a loaded CI machine: slow, not wrong
    events = env.from_files(
        args.input,
        format="json",
        schema="kind string, url string, user long, v long, k long, kb long, factor long, ts long",
        name="events",
        monitor_interval_ms=args.monitor_interval or None,
    ).uid("events")
    strategy = (
        WatermarkStrategy.for_bounded_out_of_orderness(args.out_of_orderness_ms)
        .with_timestamp_column("ts")
        .with_idleness(args.idleness_ms)
    )
    timed = events.assign_timestamps_and_watermarks(strategy).uid("timed")

    agg = timed.key_by("url").aggregate(n=("count", "*"), total=("sum", "v")).uid("agg")
    sinks(agg, root, "agg", ("url",), ("url", "n", "total"))

    tumbling = (
        timed.key_by("url")
        .window(TumblingEventTimeWindows.of(BUCKET))
        .aggregate(n=("count", "*"), total=("sum", "v"))
        .uid("tumbling")
    )
    sinks(tumbling, root, "tumbling", ("url", "window_start"), ("url", "window_start", "window_end", "n", "total"))

    sliding = (
        timed.key_by("url")
        .window(SlidingEventTimeWindows.of(SLIDE_SIZE, SLIDE))
        .aggregate(n=("count", "*"), top=("max", "v"))
        .uid("sliding")
    )
    sinks(sliding, root, "sliding", ("url", "window_start"), ("url", "window_start", "window_end", "n", "top"))

    session = (
        timed.key_by("user")
        .window(EventTimeSessionWindows.with_gap(GAP))
        .aggregate(n=("count", "*"), first=("min", "ts"))
        .uid("session")
    )
    sinks(session, root, "session", ("user", "window_start"), ("user", "window_start", "window_end", "n", "first"))

    applied = (
        timed.key_by("user")
        .window(TumblingEventTimeWindows.of(BUCKET))
        .apply(distinct_urls, output_schema="user long, window_start long, window_end long, urls long, vsum long")
        .uid("apply")
    )
    sinks(applied, root, "apply", ("user", "window_start"), ("user", "window_start", "window_end", "urls", "vsum"))

    timers = (
        timed.key_by("url")
        .process(BucketTimers(), output_schema="url string, bucket long, n long, total long")
        .uid("timers")
    )
    sinks(timers, root, "timers", ("url", "bucket"), ("url", "bucket", "n", "total"))

    # the join's sides: a rows carry the pair id in k (key_by drops every other row: its k is
    # null), b rows in kb; one select makes the b side a stream of its own
    b = timed.filter("kb IS NOT NULL", name="b side").uid("b-side").select("kb AS k", "ts").uid("b-keyed")
    interval = timed.key_by("k").interval_join(b.key_by("k")).between(*BETWEEN).uid("interval")
    sinks(interval, root, "interval", ("k",), ("k", "ts", "ts_right"))
    wjoin = timed.join(b).where("k").equal_to("k").window(TumblingEventTimeWindows.of(BUCKET)).uid("wjoin")
    sinks(wjoin, root, "wjoin", ("k", "window_start"), ("k", "window_start", "ts", "ts_right"))

    # the rules through an operator of their own: an operator reads another one once, so a
    # keyed stream connected to a broadcast of itself (`.connect(timed.broadcast())`) is refused
    rules = timed.filter("kind = 'r'", name="rules").uid("rules")
    bcast = (
        timed.key_by("url")
        .connect(rules.broadcast())
        .process(ScaledBuckets(), output_schema="url string, bucket long, n long, scaled long")
        .uid("bcast")
    )
    sinks(bcast, root, "bcast", ("url", "bucket"), ("url", "bucket", "n", "scaled"))
    env.execute("contract_matrix")


if __name__ == "__main__":
    main()
