"""An unbounded copy of Redis streams into a Redis stream, with each entry's id:
`sluice run redis_copy.py -- URL OUT_STREAM CHECKPOINT_MS IN_STREAM...` (runs until cancelled)."""

import sys

from sluice.api import StreamExecutionEnvironment
from sluice.connectors.redis_streams import RedisStreamSink, RedisStreamSource

url, out, interval, streams = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(interval)
events = env.from_source(RedisStreamSource(url, streams, id_column="entry", types={"n": "int64"}), name="events")
events.select("entry", "n", "n * 2 AS twice").sink_to(RedisStreamSink(url, out), name="redis copy")
env.execute("redis_copy")
