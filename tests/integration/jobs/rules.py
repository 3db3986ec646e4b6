"""Broadcast state: page views counted per url, each count multiplied at the end by the
factor a broadcast rules stream ({"url": str, "factor": int} lines) gave that url (1 if none).

    rules.py --input DIR --rules DIR --output DIR"""

import argparse

import pandas as pd

from sluice.api import FileSink, StreamExecutionEnvironment


class ScaledCounts:
    def process(self, url, rows: pd.DataFrame, ctx) -> None:
        n = ctx.value_state("n")
        n.update((n.value or 0) + len(rows))
        ctx.register_event_time_timer(2**62)  # fires at the end of the input, after every rule

    def process_broadcast(self, rules: pd.DataFrame, ctx) -> None:
        factors = ctx.broadcast_state("factors")
        for url, factor in zip(rules["url"], rules["factor"], strict=True):
            factors[url] = int(factor)

    def on_timer(self, url, ts, ctx) -> pd.DataFrame:
        factor = ctx.broadcast_state("factors").get(url, 1)
        return pd.DataFrame({"url": [url], "count": [ctx.value_state("n").value * factor]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(500)
    events = env.from_files(args.input, format="json", schema="url string, user long, ts long")
    rules = env.from_files(args.rules, format="json", schema="url string, factor long").set_parallelism(1)
    scaled = (
        events.key_by("url")
        .connect(rules.broadcast())
        .process(ScaledCounts(), output_schema="url string, count bigint")
    )
    scaled.sink_to(FileSink(args.output, columns=("url", "count")))
    env.execute("rules")


if __name__ == "__main__":
    main()
