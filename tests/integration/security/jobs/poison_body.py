"""A job whose map body kills the process that runs it (its TaskManager), as a crash in
native code would: `sluice run poison_body.py`."""

import os

from sluice.api import StreamExecutionEnvironment


def poison(df):
    os._exit(1)


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([{"k": "a", "v": 1}]).map(poison, name="poison").print()
env.execute("poison_body")
