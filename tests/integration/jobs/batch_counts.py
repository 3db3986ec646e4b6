"""Page-view counts per url in BATCH mode, with a slow first stage and, optionally, one
straggling subtask.

    sluice run batch_counts.py -- INPUT_DIR OUTPUT_DIR SECONDS_PER_BATCH [STRAGGLER_MARKER STRAGGLER_SECONDS]
                                  [--speculative]

With a marker path, the first attempt of a source subtask to create that file (atomically)
sleeps STRAGGLER_SECONDS once, as a task on a slow machine would; every other attempt,
a speculative backup of that subtask included, runs at the normal pace.
"""

import os
import sys
import time

from sluice.api import FileSink, StreamExecutionEnvironment

args = [a for a in sys.argv[1:] if a != "--speculative"]
source, out, delay = args[0], args[1], float(args[2])
marker = args[3] if len(args) > 3 else None
straggle = float(args[4]) if len(args) > 4 else 0.0


def slow(df):
    time.sleep(delay)  # once per batch, on the TaskManager
    if marker is not None:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return df
        time.sleep(straggle)  # this attempt took the marker: it is the straggler
    return df


env = StreamExecutionEnvironment.get_execution_environment()
env.set_runtime_mode("BATCH")
if "--speculative" in sys.argv:
    env.set_config("execution.batch.speculative.enabled", "true")
events = env.from_files(source, format="json", schema="url string, user long, ts long", name="events")
counts = events.map(slow, name="slow").key_by("url").count()
counts.sink_to(FileSink(out, columns=("url", "count")), name="counts sink")
env.execute("batch_counts")
