"""A job as wide as Sluice allows (run with --parallelism 32768): it waits for slots."""

from sluice.api import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_max_parallelism(32768)
env.from_collection([{"k": "a", "v": 1}]).map(lambda df: df, name="identity").print()
env.execute("wide")
