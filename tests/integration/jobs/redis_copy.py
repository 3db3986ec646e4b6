"""An unbounded copy of the Redis streams matching a pattern into a Redis stream, with each
entry's id; streams created while it runs are found within a second:
`sluice run redis_copy.py -- URL OUT_STREAM CHECKPOINT_MS PATTERN` (runs until cancelled)."""

import sys

from sluice.api import StreamExecutionEnvironment
from sluice.connectors.redis_streams import RedisStreamSink, RedisStreamSource

url, out, interval, pattern = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(interval)
source = RedisStreamSource(url, pattern=pattern, discovery_interval_s=0.5, id_column="entry", types={"n": "int64"})
events = env.from_source(source, name="events")
events.select("entry", "n", "n * 2 AS twice").sink_to(RedisStreamSink(url, out), name="redis copy")
env.execute("redis_copy")
