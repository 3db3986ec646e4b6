"""A job whose map body raises: the job must end FAILED with the traceback."""

from sluice.api import StreamExecutionEnvironment


def explode(df):
    raise ValueError("bad record in explode(): cannot parse 'x'")


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([{"k": "a", "v": 1}, {"k": "b", "v": 2}]).map(explode, name="explode").print()
env.execute("failing_body")
