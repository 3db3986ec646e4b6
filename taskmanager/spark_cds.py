"""Class-data sharing (CDS) for the TaskManager's Spark JVM: an archive of the
classes a SparkSession and its warm-up load, dumped once at install time and
mapped by every TaskManager's JVM at start (docs/deployment.md "TaskManager
start").

A fresh Spark JVM spends most of its start loading, verifying and linking
~20k classes from 280 jars. A dynamic CDS archive (JDK 13+,
`-XX:ArchiveClassesAtExit`) holds them pre-parsed: measured here, one
TaskManager's Spark start and warm-up went from 14.8 s wall / 24.6 s JVM CPU
to 9.2 s / 16.0 s (bench/README.md "TaskManager start").

    python -m taskmanager.spark_cds build [--path P] [--force]

`make install` runs `build`; the Docker image runs it at build time. The
archive belongs to one pyspark and one JVM build: its name carries pyspark's
version, and a sidecar `.json` records the JVM that dumped it, so a
TaskManager can tell a stale archive (`check`). A stale, missing or corrupt
archive never stops a TaskManager: the JVM runs without it (`-Xshare:auto`)
and the TaskManager logs why.

The option `spark.cds-archive` (process option, TaskManagers) says which
archive: `auto` (this interpreter's, when `make install` built it), `off`,
or a path."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("sluice.taskmanager.spark")

AUTO = "auto"
OFF = "off"


def pyspark_version() -> str:
    from pyspark.version import __version__

    return str(__version__)


def default_archive(prefix: str = sys.prefix, version: str | None = None) -> str:
    """Where `build` writes and `auto` looks: under this interpreter's prefix (the venv, or
    /usr/local in the image), one file per pyspark version."""
    return os.path.join(prefix, "share", "sluice", f"spark-{version or pyspark_version()}.jsa")


def resolve(setting: str | None, prefix: str = sys.prefix, version: str | None = None) -> str | None:
    """The archive a TaskManager's JVM maps, or None. `auto` is this interpreter's archive
    when it exists (a missing one is not an error: the JVM starts without); an explicit
    path must exist, so that a typo is not a silent 10 s per start."""
    value = (setting or AUTO).strip()
    if value.lower() == OFF:
        return None
    if value.lower() == AUTO:
        path = default_archive(prefix, version)
        return path if os.path.isfile(path) else None
    if not os.path.isfile(value):
        raise ValueError(
            f"spark.cds-archive: no file {value!r}; build one with `python -m taskmanager.spark_cds build "
            f"--path {value}`, or set it to auto or off"
        )
    return value


def java_options(archive: str) -> str:
    """The Spark driver's JVM options that map `archive`. -Xshare:auto: a stale or broken
    archive is reported on the JVM's stdout (the TaskManager's log) and ignored."""
    return f"-Xshare:auto -XX:SharedArchiveFile={archive}"


def dump_options(archive: str) -> str:
    # the classes it cannot archive (signed jars, JFR events, old class files) are expected: no warnings
    return f"-XX:ArchiveClassesAtExit={archive} -Xlog:cds=error,cds+dynamic=error"


def with_java_options(conf: dict[str, str], options: str) -> dict[str, str]:
    """`conf` with `options` added to spark.driver.defaultJavaOptions (Spark prepends these
    to spark.driver.extraJavaOptions, which stays the user's own)."""
    key = "spark.driver.defaultJavaOptions"
    existing = conf.get(key, "").strip()
    return {**conf, key: f"{existing} {options}".strip()}


@dataclass(frozen=True)
class Stamp:
    """What the sidecar records about the JVM that dumped an archive."""

    pyspark: str
    java_vm_version: str
    java_home: str

    def mismatch(self, other: Stamp) -> str | None:
        """Why an archive stamped `self` does not fit a JVM described by `other`, or None."""
        for field in ("pyspark", "java_vm_version", "java_home"):
            ours, theirs = getattr(self, field), getattr(other, field)
            if ours != theirs:
                return f"built for {field} {ours}, this JVM has {theirs}"
        return None


def sidecar(archive: str) -> str:
    return archive + ".json"


def read_stamp(archive: str) -> Stamp | None:
    try:
        with open(sidecar(archive)) as f:
            data = json.load(f)
        return Stamp(str(data["pyspark"]), str(data["java_vm_version"]), str(data["java_home"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def jvm_stamp(spark: Any) -> Stamp:
    """The running Spark JVM's stamp (py4j calls, ~ms)."""
    system = spark._jvm.java.lang.System
    return Stamp(pyspark_version(), str(system.getProperty("java.vm.version")), str(system.getProperty("java.home")))


def java_stamp(java: str | None = None) -> Stamp:
    """The stamp of the JVM Spark would start (JAVA_HOME's, else `java` on PATH), read
    without Spark: `java -XshowSettings:properties -version` (~0.1 s)."""
    if java is None:
        home = os.environ.get("JAVA_HOME")
        java = os.path.join(home, "bin", "java") if home else "java"
    out = subprocess.run(
        [java, "-XshowSettings:properties", "-version"], capture_output=True, text=True, timeout=60, check=True
    ).stderr
    props = dict((k.strip(), v.strip()) for k, _, v in (line.partition("=") for line in out.splitlines()) if _ == "=")
    return Stamp(pyspark_version(), props.get("java.vm.version", "?"), props.get("java.home", "?"))


def check(spark: Any, archive: str) -> str | None:
    """After the session started with `archive`: None when the JVM mapped an archive that
    fits it, else why not (for the TaskManager's log)."""
    system = spark._jvm.java.lang.System
    if "sharing" not in str(system.getProperty("java.vm.info")):
        return "the JVM runs without class-data sharing (a corrupt archive?)"
    stamp = read_stamp(archive)
    if stamp is None:
        return f"no readable {sidecar(archive)}"
    return stamp.mismatch(jvm_stamp(spark))


# -- building ---------------------------------------------------------------------------
def build(path: str, force: bool = False) -> bool:
    """Dump the archive of a SparkSession's start and warm-up to `path` (atomically: a
    temporary file renamed at the end). False when an archive that fits is already there."""
    from taskmanager.spark_engine import SparkEngine

    stamp = read_stamp(path) if os.path.isfile(path) else None
    if not force and stamp is not None and stamp.mismatch(java_stamp()) is None:
        return False
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".spark-cds-", suffix=".jsa", dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    os.unlink(tmp)  # the JVM creates it at exit
    engine = SparkEngine(1, conf=with_java_options({}, dump_options(tmp)), app_name="sluice-cds-dump")
    try:
        engine.start()
        stamp = jvm_stamp(engine.spark)
    finally:
        engine.stop()
    _wait_for_jvm_exit()
    if not os.path.isfile(tmp):
        raise RuntimeError(f"the Spark JVM exited without writing {tmp}; its output above says why")
    os.replace(tmp, path)
    with open(sidecar(path) + ".tmp", "w") as f:
        json.dump(stamp.__dict__, f)
    os.replace(sidecar(path) + ".tmp", sidecar(path))
    return True


def _wait_for_jvm_exit(timeout: float = 300.0) -> None:
    """The archive is written when the JVM exits: close pyspark's gateway (its stdin
    ends, so the JVM exits) and wait for the process."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 — the process is what we wait on
        pass
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taskmanager.spark_cds", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="dump the Spark JVM's class-data sharing archive")
    b.add_argument("--path", default=None, help="archive to write (default: this interpreter's, as `auto` finds it)")
    b.add_argument("--force", action="store_true", help="rebuild even if an archive for this pyspark exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    path = args.path or default_archive()
    if build(path, force=args.force):
        print(f"wrote {path} ({os.path.getsize(path) // (1 << 20)} MiB)")
    else:
        print(f"{path} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
