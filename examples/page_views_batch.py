"""Reference batch job: page views per url over files that are all there, and the top urls.

    sluice run examples/page_views_batch.py -- --input data/ --output out/
                                               [--top 100 --top-output top/]

The same counts as examples/page_views.py, run in BATCH mode (docs/batch.md): the job reads
INPUT/*.jsonl to its end, stage by stage through blocking exchanges, and writes each url's
final count once — one line `url,count` per url under OUTPUT, no update stream — without
checkpoints. A failure re-runs only the stages it touched, from the results the stage
before wrote to local disk.

With --top-output a second stage takes those counts through another blocking exchange and
writes the --top most viewed urls as `rank,url,count` lines (ties by url), from one subtask
that keeps only the current top N.
"""

import argparse
import heapq

import pandas as pd

from sluice.api import FileSink, StreamExecutionEnvironment

END_OF_INPUT = 2**62  # an event-time timer the end of the input fires (its final watermark)


class TopUrls:
    """One key ("all") sees every url's final count; it keeps the N largest and emits them,
    ranked, when the input ends."""

    def __init__(self, n: int) -> None:
        self.n = n

    def process(self, _key, rows: pd.DataFrame, ctx) -> None:
        top = ctx.value_state("top")
        merged = (top.value or []) + list(zip(rows["count"].tolist(), rows["url"].tolist(), strict=True))
        # largest count first, then the smallest url: heapq on (count, reversed url order)
        top.update(heapq.nsmallest(self.n, merged, key=lambda cu: (-cu[0], cu[1])))
        if not ctx.value_state("timer").value:
            ctx.register_event_time_timer(END_OF_INPUT)
            ctx.value_state("timer").update(True)

    def on_timer(self, _key, _timestamp: int, ctx) -> list[dict]:
        ranked = ctx.value_state("top").value or []
        return [{"rank": i + 1, "url": url, "count": count} for i, (count, url) in enumerate(ranked)]


def build(env: StreamExecutionEnvironment, input_dir: str, output_dir: str, top: int, top_dir: str | None) -> None:
    env.set_runtime_mode("BATCH")
    events = env.from_files(input_dir, format="json", schema="url string, user long, ts long", name="page views")
    counts = events.uid("page-views").key_by("url").count().uid("counts")
    counts.sink_to(FileSink(output_dir, columns=("url", "count")), name="counts sink").uid("counts-sink")
    if top_dir:
        ranked = (
            counts.select("url", "count", "'all' AS everything")
            .key_by("everything")
            .process(TopUrls(top), output_schema="rank int, url string, count long", name=f"top {top}")
            .set_parallelism(1)
        )
        ranked.sink_to(FileSink(top_dir, columns=("rank", "url", "count")), name="top sink").set_parallelism(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="directory of *.jsonl event files")
    ap.add_argument("--output", required=True, help="directory for the url,count files")
    ap.add_argument("--top", type=int, default=100, help="how many urls --top-output lists")
    ap.add_argument("--top-output", default=None, help="directory for the rank,url,count lines of the top urls")
    args = ap.parse_args()
    if args.top < 1:
        ap.error("--top must be a positive number of urls")
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, args.input, args.output, args.top, args.top_output)
    env.execute("page_views_batch")


if __name__ == "__main__":
    main()
