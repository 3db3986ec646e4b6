"""A job on the user's own connectors (line_connectors.py): words counted from the text
files of a directory, watched for new files, into CSV parts committed at checkpoints:
`sluice run custom_connector.py -- INPUT_DIR OUTPUT_DIR CHECKPOINT_MS`."""

import sys
import time

from line_connectors import CsvCommitSink, WordFileSource

from sluice.api import StreamExecutionEnvironment


def slow(df):
    time.sleep(0.2)  # so that a TaskManager can be killed while the job runs
    return df


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(int(sys.argv[3]))
words = env.from_source(WordFileSource(sys.argv[1], interval_s=0.5), name="words")
words.map(slow, name="slow").key_by("word").count().sink_to(CsvCommitSink(sys.argv[2]), name="csv parts")
env.execute("custom_connector")
