# syntax=docker/dockerfile:1
#
# Sluice: one image for JobManagers, TaskManagers and the `sluice` CLI.
#
#   docker build -t sluice:0.1.0 .
#   docker run --rm sluice:0.1.0 --help
#   docker run sluice:0.1.0 jobmanager  --zookeeper zk:2181 --host 0.0.0.0 --port 6123 --advertised-host jm-1
#   docker run sluice:0.1.0 taskmanager --zookeeper zk:2181 --host 0.0.0.0 --port 6122 --advertised-host auto
#   docker run sluice:0.1.0 jobmanager --config /etc/sluice/sluice.yaml --check   # validate, print, exit
#
# Configuration: /etc/sluice/sluice.yaml (mount it; --config or SLUICE_CONFIG
# names it), SLUICE_* environment variables, flags -- see docs/deployment.md.
#
# Debian bookworm is pinned: it carries openjdk-17 (Spark 4 needs Java 17+);
# newer Debian releases dropped the openjdk-17 packages.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYARROW_IGNORE_TIMEZONE=1

# Java for Spark (the JVM that PySpark starts in every TaskManager). The man
# directory must exist for the JRE's postinst on slim images. procps gives
# Spark's scripts and people `ps`.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps; \
    rm -rf /var/lib/apt/lists/*; \
    java -version

# Non-root user; /var/lib/sluice is where the shared checkpoint/HA volume is
# mounted, /etc/sluice/tls the certificates (docs/security.md); both owned by the
# user, so a fresh named volume inherits the ownership.
RUN set -eux; \
    groupadd --system --gid 10001 sluice; \
    useradd --system --uid 10001 --gid 10001 --home-dir /home/sluice --create-home --shell /usr/sbin/nologin sluice; \
    mkdir -p /var/lib/sluice/checkpoints /etc/sluice/tls; \
    chown -R sluice:sluice /var/lib/sluice /etc/sluice/tls; \
    chmod 0700 /etc/sluice/tls

# Dependencies first (their layer survives source changes): install the
# project's requirements from pyproject.toml with empty packages, then the
# real sources without dependencies.
WORKDIR /src
COPY pyproject.toml ./
RUN set -eux; \
    for pkg in sluice jobmanager taskmanager; do mkdir -p "$pkg" && touch "$pkg/__init__.py"; done; \
    pip install .; \
    pip uninstall -y sluice; \
    rm -rf /src/*
COPY pyproject.toml ./
COPY sluice/ sluice/
COPY jobmanager/ jobmanager/
COPY taskmanager/ taskmanager/
RUN set -eux; \
    pip install --no-deps .; \
    cd /; rm -rf /src; \
    sluice --help >/dev/null; \
    python -c "import jobmanager.server, taskmanager.server"

# The Spark JVM's class-data sharing archive (/usr/local/share/sluice/spark-<version>.jsa, ~160 MB):
# a TaskManager's JVM maps it at start instead of loading its classes from the jars
# (taskmanager/spark_cds.py; spark.cds-archive=auto finds it).
RUN python -m taskmanager.spark_cds build

USER 10001:10001
WORKDIR /home/sluice

# 6123: JobManager gRPC, 6122: TaskManager gRPC (TaskExecutor + DataExchange), both mutual TLS;
# 9123 / 9122: their plaintext health-only ports (rpc.health-port) in docker-compose.yml and k8s/;
# 8081: the JobManager REST API and dashboard (rest.port), 9249: Prometheus metrics (metrics.port).
EXPOSE 6123 6122 9123 9122 8081 9249

# `docker run IMAGE jobmanager ...`, `... taskmanager ...`, or any sluice command.
ENTRYPOINT ["sluice"]
CMD ["--help"]
