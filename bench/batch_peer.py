"""The peer of bench/batch_bench.py's page-view part: plain Spark batch,
`spark.read.schema(...).json(dir).groupBy("url").count().write.csv(out)`, in one SparkSession of a
child process (this script run with `--child SPEC`), and the parent's side of it (`BatchPeer`).
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from bench_common import write_atomically
from paired_runs import RunError
from spark_peer import SPARK_SETTINGS, PeerSide, go_queries

SCHEMA = "url string, user long, ts long"  # examples/generate_page_views.py's events


def child_main(spec_path: str) -> int:
    """--child mode: a SparkSession (spark_peer.SPARK_SETTINGS, the spec's master), then for each go
    file `<dir>/go-NNNN.json` the batch count of its input written as CSV to its output, timed around
    the query alone (`done`: seconds), until a go file says exit."""
    from structured_streaming_child import child_spec, emit, spark_session

    spec = child_spec(spec_path)
    spark = spark_session("batch-bench-peer", spec["master"], SPARK_SETTINGS)
    for i, q in go_queries(spec["dir"]):
        spark.conf.set("spark.sql.shuffle.partitions", str(int(q["shuffle_partitions"])))
        t0 = time.monotonic()
        try:
            spark.read.schema(SCHEMA).json(q["input"]).groupBy("url").count().write.csv(q["out"])
        except Exception as exc:  # noqa: BLE001 — reported to the parent; the session serves the next query
            emit("done", query=i, error=f"{type(exc).__name__}: {exc}".split("\n")[0][:400])
        else:
            emit("done", query=i, seconds=time.monotonic() - t0)
    spark.stop()
    emit("exit")
    return 0


class BatchPeer(PeerSide):
    """The peer's child (spark_peer.PeerSide: spawn, start, roots, stop) serving batch queries."""

    script = os.path.abspath(__file__)

    def run_query(self, data: str, out: str, shuffle: int) -> dict:
        """One query: its time in the child, and the parent's go file -> `done` event."""
        i = self.next
        self.next += 1
        t0 = time.monotonic()
        q = {"input": data, "out": out, "shuffle_partitions": shuffle}
        write_atomically(self.go_file(i), json.dumps(q))
        done = self.child.wait_for("done", self.timeout, query=i)
        if done.get("error"):
            raise RunError(f"the peer's query failed: {done['error']}")
        return {"time": done["seconds"], "parent_time": time.monotonic() - t0}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--child":
        sys.exit("usage: batch_peer.py --child SPEC (started by bench/batch_bench.py)")
    sys.exit(child_main(sys.argv[2]))
