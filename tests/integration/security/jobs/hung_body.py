"""A job whose map body hangs in one long C call, which no cancel can interrupt:
`sluice run hung_body.py -- MARKER_DIR` (the body creates MARKER_DIR/entered first)."""

import os
import sys
import time

from sluice.api import StreamExecutionEnvironment

MARKER_DIR = sys.argv[1]


def hang(df):
    open(os.path.join(MARKER_DIR, "entered"), "w").close()
    time.sleep(3600)  # one C call: neither a cancel nor an asynchronous exception gets in
    return df


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([{"k": "a", "v": 1}]).map(hang, name="hang").print()
env.execute("hung_body")
