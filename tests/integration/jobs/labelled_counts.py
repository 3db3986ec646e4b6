"""Page-view counts per url from a watched directory, each line labelled by the version of the
function that wrote it: `url,count,label` lines. A live reconfiguration swaps the "label"
function (`sluice reconfigure JOB --operator label --jobfile labelled_counts.py -- ... --label v2`)
while the counts go on from their state.

    sluice run labelled_counts.py -- INPUT OUTPUT [--label v1] [--checkpoint-interval MS]
"""

import argparse

from pyspark.sql import functions as F

from sluice.api import FileSink, StreamExecutionEnvironment

p = argparse.ArgumentParser()
p.add_argument("input")
p.add_argument("output")
p.add_argument("--label", default="v1")
p.add_argument("--checkpoint-interval", type=int, default=300)
args = p.parse_args()
label = args.label

env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(args.checkpoint_interval)
events = env.from_files(
    args.input, format="json", schema="url string, user long, ts long", monitor_interval_ms=200
).uid("page-views")
counts = events.key_by("url").count().uid("counts")
labelled = counts.map(
    lambda df: df.withColumn("label", F.lit(label)), output_schema="url string, count bigint, label string"
).uid("label")
labelled.sink_to(FileSink(args.output, columns=("url", "count", "label"))).uid("sink")
env.execute("labelled_counts")
