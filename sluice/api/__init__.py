"""The job API: build a dataflow of PySpark bodies and submit it.

env = StreamExecutionEnvironment.get_execution_environment()
events = env.from_files("in/", format="json", schema="url string, user long, ts long")
events.key_by("url").count().sink_to(FileSink("out/"))
env.execute("page_views")
"""

from sluice.api.connectors import FileSink, SqliteSink
from sluice.api.datastream import DataStream, KeyedStream
from sluice.api.environment import JobExecutionResult, StreamExecutionEnvironment
from sluice.api.windowing import WindowedStream
from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.eventtime.windows import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

__all__ = [
    "StreamExecutionEnvironment",
    "DataStream",
    "KeyedStream",
    "WindowedStream",
    "FileSink",
    "SqliteSink",
    "JobExecutionResult",
    "WatermarkStrategy",
    "TumblingEventTimeWindows",
    "SlidingEventTimeWindows",
    "EventTimeSessionWindows",
    "TumblingProcessingTimeWindows",
]
