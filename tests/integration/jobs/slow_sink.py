"""A fast generator feeding a deliberately slow consumer through a rebalance:
backpressure must hold the generator back.

    sluice run slow_sink.py -- OUTPUT_DIR [SECONDS_PER_BATCH [CHECKPOINT_INTERVAL_MS]]
"""

import sys
import time

from sluice.api import FileSink, StreamExecutionEnvironment

out = sys.argv[1]
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
checkpoint_interval = int(sys.argv[3]) if len(sys.argv) > 3 else 0


def slow(df):
    time.sleep(delay)  # runs once per batch on the TaskManager
    return df


env = StreamExecutionEnvironment.get_execution_environment()
if checkpoint_interval:
    env.enable_checkpointing(checkpoint_interval)
numbers = env.from_generator(
    lambda ids: ids.selectExpr("id", "id % 97 AS k"), count=50_000_000, batch_size=1000, name="numbers"
)
numbers.rebalance().map(slow, name="slow").sink_to(FileSink(out), name="sink")
env.execute("slow_sink")
