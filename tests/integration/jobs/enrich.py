"""Stream–table enrichment: page views joined with a CSV table url -> category (loaded in
Spark, cached per TaskManager), counted per category.

    enrich.py --input DIR --table DIR --output DIR [--how inner|left]"""

import argparse

from sluice.api import FileSink, StreamExecutionEnvironment


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--how", default="inner")
    args = ap.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(500)
    table_dir = args.table
    events = env.from_files(args.input, format="json", schema="url string, user long, ts long")
    enriched = events.join_table(
        lambda spark: spark.read.schema("url string, category string").csv(table_dir),
        on="url",
        how=args.how,
        refresh_ms=60_000,
    )
    counts = enriched.select("url", "coalesce(category, 'none') AS category").key_by("category").count()
    counts.sink_to(FileSink(args.output, columns=("category", "count")))
    env.execute("enrich")


if __name__ == "__main__":
    main()
