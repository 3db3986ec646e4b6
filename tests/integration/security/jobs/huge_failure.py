"""A job whose body fails with a ~700 KB error text: more than a ZooKeeper node holds."""

from sluice.api import StreamExecutionEnvironment


def explode(df):
    raise ValueError("bad record in explode(): " + "x" * 700_000)


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([{"k": "a", "v": 1}]).map(explode, name="explode").print()
env.execute("huge_failure")
