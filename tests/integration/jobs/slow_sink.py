"""A fast generator feeding a deliberately slow consumer through a rebalance:
backpressure must hold the generator back.

    sluice run slow_sink.py -- OUTPUT_DIR [SECONDS_PER_1000_ROWS [CHECKPOINT_INTERVAL_MS]]

The consumer's delay grows with the rows it is given, not with the number of calls: a task
hands its operator every batch that is waiting in one table, so a fixed sleep per call would
let the consumer keep up with any producer.
"""

import sys
import time

from sluice.api import FileSink, StreamExecutionEnvironment

out = sys.argv[1]
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
checkpoint_interval = int(sys.argv[3]) if len(sys.argv) > 3 else 0


def slow(df):
    # Runs on the TaskManager's task thread, in short sleeps so that a cancellation (which
    # interrupts the thread between Python steps) is not held up by a long one.
    until = time.monotonic() + delay * df.count() / 1000
    while time.monotonic() < until:
        time.sleep(0.05)
    return df


env = StreamExecutionEnvironment.get_execution_environment()
if checkpoint_interval:
    env.enable_checkpointing(checkpoint_interval)
numbers = env.from_generator(
    lambda ids: ids.selectExpr("id", "id % 97 AS k"), count=50_000_000, batch_size=1000, name="numbers"
)
numbers.rebalance().map(slow, name="slow").sink_to(FileSink(out), name="sink")
env.execute("slow_sink")
