"""An embarrassingly parallel streaming job: read page views, pass them through a slow
body, write them out. Every operator is chained into one task, so each subtask is a
pipelined region of its own (docs/batch.md, "Region failover").

    sluice run parallel_copy.py -- INPUT_DIR OUTPUT_DIR CHECKPOINT_MS [SECONDS_PER_BATCH]
"""

import sys
import time

from sluice.api import FileSink, StreamExecutionEnvironment

source, out, interval = sys.argv[1], sys.argv[2], int(sys.argv[3])
delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1


def slow(df):
    time.sleep(delay)  # once per batch, on the TaskManager
    return df


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(interval)
events = env.from_files(source, format="json", schema="url string, user long, ts long", name="events")
events.map(slow, name="slow").sink_to(FileSink(out, columns=("url", "user", "ts")), name="copy")
env.execute("parallel_copy")
