"""Files counted per key into a file sink (`key,count` lines), with the source's `on_error` policy.

    sluice run file_source_count.py -- INPUT OUTPUT [--format csv] [--schema DDL] [--options JSON]
        [--on-error POLICY] [--key K] [--inspect]

--inspect puts a map body between the source and the count that calls `df.count()`,
`df.columns` and `df.collect()` on each batch and fails the job if they disagree or show a
column Sluice added while reading.
"""

import argparse
import json

from sluice.api import FileSink, StreamExecutionEnvironment

p = argparse.ArgumentParser()
p.add_argument("input")
p.add_argument("output")
p.add_argument("--format", default="csv")
p.add_argument("--schema", default="k string, v bigint")
p.add_argument("--options", default="{}")
p.add_argument("--on-error")
p.add_argument("--key", default="k")
p.add_argument("--inspect", action="store_true")
args = p.parse_args()


def inspect(df):
    """What a body may ask of a file batch: its row count, its columns and its rows."""
    n, columns, rows = df.count(), df.columns, df.collect()
    if n != len(rows) or any(c.startswith("__sluice") for c in columns):
        raise AssertionError(f"count() {n}, collect() {len(rows)} rows, columns {columns}")
    return df


env = StreamExecutionEnvironment.get_execution_environment()
rows = env.from_files(
    args.input,
    format=args.format,
    schema=args.schema,
    options=json.loads(args.options),
    on_error=args.on_error,
    name="read",
)
if args.inspect:
    rows = rows.map(inspect, name="inspect", output_schema=args.schema)
counts = rows.key_by(args.key).count()
counts.sink_to(FileSink(args.output, columns=(args.key, "count")), name="sink")
env.execute("file_source_count")
