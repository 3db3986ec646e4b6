"""Headerless CSV `country,device,v` (malformed lines dropped), summed per (country, device)
and upserted into SQLite: the issue's day-one job.

    sluice run csv_totals_sqlite.py -- INPUT DB [CHECKPOINT_INTERVAL_MS]
"""

import sys

from sluice.api import SqliteSink, StreamExecutionEnvironment

input_dir, db = sys.argv[1], sys.argv[2]
interval = int(sys.argv[3]) if len(sys.argv) > 3 else 300

env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(interval)
rows = env.from_files(
    input_dir, format="csv", schema="country string, device string, v long", options={"mode": "DROPMALFORMED"}
)
totals = rows.key_by("country", "device").sum("v")
totals.sink_to(SqliteSink(db, "totals", key=("country", "device"), columns=("country", "device", "v")))
env.execute("csv_totals_sqlite")
