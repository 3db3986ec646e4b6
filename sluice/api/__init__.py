"""The job API: build a dataflow of PySpark bodies and submit it.

env = StreamExecutionEnvironment.get_execution_environment()
events = env.from_files("in/", format="json", schema="url string, user long, ts long")
events.key_by("url").count().sink_to(FileSink("out/"))
env.execute("page_views")
"""

from sluice.api.connectors import FileSink, SqliteSink
from sluice.api.datastream import DataStream, KeyedStream
from sluice.api.environment import JobExecutionResult, StreamExecutionEnvironment

__all__ = ["StreamExecutionEnvironment", "DataStream", "KeyedStream", "FileSink", "SqliteSink", "JobExecutionResult"]
