"""An unbounded keyed count over a generator, slowed down so that it runs
until cancelled: `sluice run endless_counts.py -- OUTPUT_DIR CHECKPOINT_MS`."""

import sys
import time

from sluice.api import FileSink, StreamExecutionEnvironment


def slow(df):
    time.sleep(0.2)
    return df


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(int(sys.argv[2]))
ids = env.from_generator(lambda ids: ids.selectExpr("CAST(id % 50 AS STRING) AS k"), batch_size=500, name="ids")
ids.map(slow, name="slow").key_by("k").count().sink_to(FileSink(sys.argv[1]), name="sink")
env.execute("endless_counts")
