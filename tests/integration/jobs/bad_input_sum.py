"""Files with bad input summed per key into a file sink (`key,sum` lines), with the source's
`on_error` policy.

    sluice run bad_input_sum.py -- INPUT OUTPUT [--format json] [--schema DDL] [--on-error POLICY]
        [--options JSON] [--key K] [--value V]
"""

import argparse
import json

from sluice.api import FileSink, StreamExecutionEnvironment

p = argparse.ArgumentParser()
p.add_argument("input")
p.add_argument("output")
p.add_argument("--format", default="json")
p.add_argument("--schema", default="k string, v bigint")
p.add_argument("--on-error")
p.add_argument("--options", default="{}")
p.add_argument("--key", default="k")
p.add_argument("--value", default="v")
args = p.parse_args()

env = StreamExecutionEnvironment.get_execution_environment()
rows = env.from_files(
    args.input,
    format=args.format,
    schema=args.schema,
    options=json.loads(args.options),
    on_error=args.on_error,
    name="read",
)
sums = rows.key_by(args.key).sum(args.value)
sums.sink_to(FileSink(args.output, columns=(args.key, args.value)), name="sink")
env.execute("bad_input_sum")
