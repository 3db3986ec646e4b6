"""Files read with reader options, summed per key into a file sink (`key,sum` lines).

    sluice run file_source_sum.py -- INPUT OUTPUT [--format csv] [--schema DDL]
        [--options JSON] [--key K] [--value V] [--dead-letter DIR --corrupt COLUMN]

Without --schema the source infers one at submit (sluice/schema_inference.py).
With --dead-letter, rows whose COLUMN (the corrupt-record column) is set go
there as one `COLUMN` value per line, and only the others are summed.
"""

import argparse
import json

from sluice.api import FileSink, StreamExecutionEnvironment

p = argparse.ArgumentParser()
p.add_argument("input")
p.add_argument("output")
p.add_argument("--format", default="csv")
p.add_argument("--schema")
p.add_argument("--options", default="{}")
p.add_argument("--key", default="_c0")
p.add_argument("--value", default="_c1")
p.add_argument("--dead-letter")
p.add_argument("--corrupt")
args = p.parse_args()

env = StreamExecutionEnvironment.get_execution_environment()
rows = env.from_files(args.input, format=args.format, schema=args.schema, options=json.loads(args.options), name="read")
if args.dead_letter:
    rows.filter(f"{args.corrupt} IS NOT NULL", name="malformed").select(args.corrupt).sink_to(
        FileSink(args.dead_letter), name="dead letters"
    )
    rows = rows.filter(f"{args.corrupt} IS NULL", name="parsed")
sums = rows.key_by(args.key).sum(args.value)
sums.sink_to(FileSink(args.output, columns=(args.key, args.value)), name="sink")
env.execute("file_source_sum")
