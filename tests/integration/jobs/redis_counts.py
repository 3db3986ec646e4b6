"""Counts per user from Redis streams into a Redis stream, exactly once:
`sluice run redis_counts.py -- URL OUT_STREAM CHECKPOINT_MS IN_STREAM...`.
The input is read up to the last entry each stream had when its reader got it (bounded)."""

import sys
import time

from sluice.api import StreamExecutionEnvironment
from sluice.connectors.redis_streams import RedisStreamSink, RedisStreamSource


def slow(df):
    time.sleep(0.2)  # so that a TaskManager can be killed while the job runs
    return df


url, out, interval, streams = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(interval)
events = env.from_source(RedisStreamSource(url, streams, bounded=True, batch_size=400), name="events")
counts = events.map(slow, name="slow").key_by("user").count()
counts.sink_to(RedisStreamSink(url, out), name="redis counts")
env.execute("redis_counts")
