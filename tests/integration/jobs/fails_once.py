"""A map body that fails in the first attempt only (a marker file, argv[1], remembers it):
the job restarts once and finishes; `status` keeps why it restarted."""

import os
import sys

from sluice.api import StreamExecutionEnvironment

MARKER = os.path.abspath(sys.argv[1])


def flaky(df):
    if not os.path.exists(MARKER):
        open(MARKER, "w").close()
        raise ValueError("first attempt fails")
    return df


env = StreamExecutionEnvironment.get_execution_environment()
env.set_config("restart-strategy.fixed-delay.delay", "100ms")
env.from_collection([{"k": "a", "v": 1}]).map(flaky, name="flaky").print()
env.execute("fails_once")
