"""Reference job: a running count of page views per url.

    sluice run examples/page_views.py -- --input data/ --output out/ [--checkpoint-interval 1000]
                                         [--monitor-interval MS] [--sqlite counts.db]

Reads newline-delimited JSON events {"url": str, "user": int, "ts": int}
from INPUT/*.jsonl and writes the running counts as lines `url,count`
through the file sink under OUTPUT: an update stream, a url's line is
written when its count changed, and its final count is its last line in
file-name order (`sluice output OUTPUT --final`).
With --sqlite the counts are also upserted, exactly once, into the table
`page_views (url TEXT PRIMARY KEY, count INTEGER)` of that SQLite database:
one row per url, its latest committed count
(`sqlite3 counts.db 'SELECT * FROM page_views ORDER BY count DESC LIMIT 10'`).
With --monitor-interval the job keeps watching INPUT for new files (an
unbounded stream: it runs until cancelled).
"""

import argparse

from sluice.api import FileSink, SqliteSink, StreamExecutionEnvironment


def build(
    env: StreamExecutionEnvironment,
    input_dir: str,
    output_dir: str,
    monitor_interval_ms: int | None = None,
    sqlite_path: str | None = None,
) -> None:
    events = env.from_files(
        input_dir,
        format="json",
        schema="url string, user long, ts long",
        name="page views",
        monitor_interval_ms=monitor_interval_ms,
    ).uid("page-views")
    # uids: a savepoint's state is found by them, whatever a later version adds (docs/savepoints.md)
    counts = events.key_by("url").count().uid("counts")
    counts.sink_to(FileSink(output_dir, columns=("url", "count")), name="counts sink").uid("counts-sink")
    if sqlite_path:
        sqlite = SqliteSink(sqlite_path, "page_views", key="url", columns=("url", "count"))
        counts.sink_to(sqlite, name="sqlite sink").uid("sqlite-sink")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="directory of *.jsonl event files")
    ap.add_argument("--output", required=True, help="directory for committed url,count files")
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="milliseconds; 0 disables checkpoints")
    ap.add_argument(
        "--monitor-interval",
        type=int,
        default=0,
        help="milliseconds; > 0 keeps reading files that appear in --input later (runs until cancelled)",
    )
    ap.add_argument("--sqlite", default=None, help="also upsert url,count into table page_views of this SQLite file")
    args = ap.parse_args()
    if args.monitor_interval < 0:
        ap.error("--monitor-interval must be 0 (read the files there now, then finish) or a positive number of ms")
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(args.checkpoint_interval)
    build(env, args.input, args.output, args.monitor_interval or None, args.sqlite)
    env.execute("page_views")


if __name__ == "__main__":
    main()
