"""A map body that selects a column the data does not have: Spark's analysis fails the same way
on every attempt, so the job fails at once without restarting."""

from sluice.api import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([{"k": "a", "v": 1}]).map(lambda df: df.select("no_such_column"), name="pick").print()
env.execute("missing_column")
