"""`sluice sql`: a streaming job from one SQL query, submitted as a DeclarativeJob.

    sluice sql "SELECT url, COUNT(*) AS count FROM events GROUP BY url" \\
        --source json:/abs/dir [--schema 'url string, user bigint, ts bigint'] --sink csv:/abs/out

--source takes json, csv, text or parquet; --sink csv, json, parquet, text (one column) or print.

The query is parsed with sqlglot (Spark dialect) and becomes the fields of a DeclarativeJob
(proto/sluice/v1/declarative.proto): WHERE a filter step, the SELECT list a select step or,
with GROUP BY, a key_by step with its aggregates (then a select step when the output's names or
order differ from the keys-then-aggregates the key_by emits). The one table in FROM is bound
to --source. Anything else — JOIN, a subquery, ORDER BY, LIMIT, HAVING, DISTINCT, UNION, a
window function, GROUP BY an expression — is refused here, naming the construct. The JobManager
checks the rest (columns, functions) exactly as it checks a job submitted over gRPC by any
client (jobmanager/declarative/; docs/declarative-jobs.md). `--dry-run` prints the request as
JSON, the form `grpcurl -d @ ... sluice.v1.JobManager/SubmitJob` takes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from sluice.client import JobFailed, JobManagerClient, SluiceError
from sluice.v1 import declarative_pb2, jobmanager_pb2

SOURCE_FORMATS = ("json", "csv", "text", "parquet")
SINK_FORMATS = ("csv", "json", "parquet", "text")  # file sinks; and print
_SUFFIXES = {"json": ".jsonl", "csv": ".csv", "text": "", "parquet": ".parquet"}
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# Select clauses a streaming query cannot have, by sqlglot's argument name: what the error calls them.
_UNSUPPORTED = {
    "with_": "WITH (a common table expression)",
    "distinct": "DISTINCT",
    "joins": "JOIN",
    "laterals": "LATERAL VIEW",
    "having": "HAVING",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "order": "ORDER BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "pivots": "PIVOT",
    "hint": "a hint",
    "into": "INTO",
    "sample": "TABLESAMPLE",
}
_AGGREGATES = {"Count": "count", "Sum": "sum", "Min": "min", "Max": "max", "Avg": "avg"}


class SqlError(SluiceError):
    """The query uses SQL `sluice sql` does not turn into a streaming job; the message names it."""


def sql_to_job(
    query: str,
    source: declarative_pb2.DeclarativeSource,
    sink: declarative_pb2.DeclarativeSink,
    name: str = "sql",
    parallelism: int = 0,
    config: dict[str, str] | None = None,
) -> declarative_pb2.DeclarativeJob:
    """The DeclarativeJob of `query` reading `source` (its one table) into `sink`."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    try:
        statements = [s for s in sqlglot.parse(query, read="spark") if s is not None]
    except (ParseError, TokenError) as exc:
        raise SqlError(f"the query does not parse as Spark SQL: {str(exc).strip().splitlines()[0][:300]}") from None
    except RecursionError:  # sqlglot recurses per nesting level (jobmanager/declarative/expressions.py)
        raise SqlError("the query nests too deeply to be parsed; write it with fewer nested parentheses") from None
    if len(statements) != 1:
        raise SqlError(f"give one query; this holds {len(statements)} statements")
    select = statements[0]
    if not isinstance(select, exp.Select):
        what = select.key.upper()
        raise SqlError(f"{what} is not supported: sluice sql takes one SELECT ... FROM table [WHERE] [GROUP BY]")
    for arg, label in _UNSUPPORTED.items():
        if select.args.get(arg):
            raise SqlError(
                f"{label} is not supported in a streaming query (sluice sql takes SELECT, FROM, WHERE, GROUP BY)"
            )
    for arg, value in select.args.items():
        if value and arg not in ("expressions", "from_", "where", "group", *_UNSUPPORTED):
            raise SqlError(f"{arg.upper()} is not supported (sluice sql takes SELECT, FROM, WHERE, GROUP BY)")
    table_names = _from_table(select, exp)
    for node in select.walk():
        if node is not select and isinstance(node, exp.Query | exp.Subquery):
            raise SqlError(f"subqueries are not supported: {node.sql(dialect='spark')[:120]}")
        if isinstance(node, exp.Window):
            raise SqlError(f"window functions (OVER) are not supported: {node.sql(dialect='spark')[:120]}")
        if isinstance(node, exp.Column) and node.table:
            if node.table not in table_names or node.args.get("db"):
                raise SqlError(
                    f"{node.sql(dialect='spark')}: unknown table {node.table!r}; FROM names {table_names[0]!r}"
                )
            node.set("table", None)

    steps: list[declarative_pb2.DeclarativeStep] = []
    where = select.args.get("where")
    if where is not None:
        steps.append(declarative_pb2.DeclarativeStep(filter={"condition": where.this.sql(dialect="spark")}))
    group = select.args.get("group")
    if group is None:
        columns = _plain_select(select, steps, exp)
    else:
        columns = _grouped_select(select, group, steps, exp)
    if sink.format in SINK_FORMATS and not sink.columns and columns:
        sink.columns.extend(columns)
    return declarative_pb2.DeclarativeJob(
        name=name, parallelism=parallelism, config=config or {}, source=source, steps=steps, sink=sink
    )


def _from_table(select: Any, exp: Any) -> list[str]:
    """The FROM table's name and alias; SqlError unless FROM names exactly one table."""
    from_ = select.args.get("from_")
    if from_ is None:
        raise SqlError("the query has no FROM; name the source table, e.g. FROM events (bound to --source)")
    table = from_.this
    if isinstance(table, exp.Subquery):
        raise SqlError("subqueries are not supported: FROM (SELECT ...)")
    if not isinstance(table, exp.Table) or not table.name or table.args.get("joins"):
        raise SqlError(f"FROM takes one table name (bound to --source), got {table.sql(dialect='spark')[:120]}")
    if table.args.get("db"):
        raise SqlError(f"FROM takes a plain table name (bound to --source), got {table.sql(dialect='spark')}")
    return [table.name, *([table.alias] if table.alias else [])]


def _plain_select(select: Any, steps: list[declarative_pb2.DeclarativeStep], exp: Any) -> list[str]:
    """SELECT without GROUP BY: a select step (none for SELECT *); the output column names."""
    items = select.expressions
    if len(items) == 1 and isinstance(items[0], exp.Star):
        return []
    out: list[declarative_pb2.SelectItem] = []
    for item in items:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise SqlError("* is supported only alone (SELECT *); list the columns")
        aggregate = next(iter(item.find_all(exp.AggFunc)), None)
        if aggregate is not None:
            raise SqlError(
                f"the aggregate {aggregate.sql(dialect='spark')} needs GROUP BY: a stream is aggregated per key "
                "(a global aggregate is not supported)"
            )
        expr, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, "")
        if not alias and not isinstance(expr, exp.Column):
            raise SqlError(f"name the computed column {expr.sql(dialect='spark')[:120]} with AS")
        out.append(declarative_pb2.SelectItem(expr=expr.sql(dialect="spark"), alias=alias))
    steps.append(declarative_pb2.DeclarativeStep(select={"items": out}))
    return [i.alias or _unquoted(i.expr) for i in out]


def _grouped_select(select: Any, group: Any, steps: list[declarative_pb2.DeclarativeStep], exp: Any) -> list[str]:
    """SELECT ... GROUP BY columns: a key_by step, then a select step when the output differs from
    the keys followed by the aggregates; the output column names."""
    for arg, value in group.args.items():
        if value and arg != "expressions":
            raise SqlError(f"GROUP BY {arg.upper().replace('_', ' ')} is not supported; group by columns")
    keys = []
    for g in group.expressions:
        if not isinstance(g, exp.Column):
            raise SqlError(
                f"GROUP BY {g.sql(dialect='spark')[:120]}: group by column names; compute the column in a "
                "declarative select step first (docs/declarative-jobs.md)"
            )
        keys.append(str(g.name))
    aggregates: list[declarative_pb2.Aggregate] = []
    wanted: list[tuple[str, str]] = []  # (column the key_by emits, output name)
    for item in select.expressions:
        expr, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, "")
        if isinstance(expr, exp.Column):
            if expr.name not in keys:
                raise SqlError(f"column {expr.name!r} is neither in GROUP BY nor aggregated")
            wanted.append((expr.name, alias or expr.name))
            continue
        fn = _AGGREGATES.get(type(expr).__name__)
        if fn is None:
            inner = next(iter(expr.find_all(exp.AggFunc)), None) if isinstance(expr, exp.Expression) else None
            if isinstance(expr, exp.AggFunc):
                what = f"the aggregate {expr.sql(dialect='spark')[:80]} is not supported"
            elif inner is not None:
                what = f"{expr.sql(dialect='spark')[:80]}: an aggregate inside an expression is not supported"
            else:
                what = f"{expr.sql(dialect='spark')[:80]} is neither a GROUP BY column nor an aggregate"
            raise SqlError(f"{what}; use COUNT(*), SUM(col), MIN(col), MAX(col) or AVG(col)")
        arg = expr.this
        if fn == "count":
            if expr.args.get("distinct") or isinstance(arg, exp.Distinct):
                raise SqlError("COUNT(DISTINCT ...) is not supported")
            if not (isinstance(arg, exp.Star) or (isinstance(arg, exp.Literal) and arg.this == "1")):
                raise SqlError(
                    f"{expr.sql(dialect='spark')}: COUNT counts rows here: write COUNT(*) "
                    "(and WHERE col IS NOT NULL to count non-null values)"
                )
            column, default = "*", "count"
        else:
            if isinstance(arg, exp.Distinct):
                raise SqlError(f"{fn.upper()}(DISTINCT ...) is not supported")
            if not isinstance(arg, exp.Column):
                raise SqlError(
                    f"{expr.sql(dialect='spark')[:80]}: aggregate a column by name, e.g. {fn.upper()}(bytes)"
                )
            column, default = str(arg.name), f"{fn}_{arg.name}"
        name = alias or default
        aggregates.append(declarative_pb2.Aggregate(function=fn, column=column, name=name))
        wanted.append((name, name))
    if not aggregates:
        raise SqlError("GROUP BY without an aggregate; add COUNT(*), SUM(col), ... to the SELECT list")
    steps.append(declarative_pb2.DeclarativeStep(key_by={"keys": keys, "aggregates": aggregates}))
    emitted = [*keys, *(a.name for a in aggregates)]
    if [w[1] for w in wanted] != emitted:  # renamed, reordered or a key left out: one more projection
        items = [declarative_pb2.SelectItem(expr=col, alias=out if out != col else "") for col, out in wanted]
        steps.append(declarative_pb2.DeclarativeStep(select={"items": items}))
    return [out for _col, out in wanted]


def _unquoted(expr: str) -> str:
    return expr[1:-1].replace("``", "`") if expr.startswith("`") and expr.endswith("`") else expr


# -- the command --------------------------------------------------------------------------------
def _location(value: str, flag: str, formats: tuple[str, ...]) -> tuple[str, str]:
    fmt, sep, where = value.partition(":")
    if not sep or fmt not in formats or not where:
        raise SluiceError(f"{flag} takes FORMAT:PATH with FORMAT one of {', '.join(formats)}, got {value!r}")
    if not _URI.match(where):
        where = os.path.abspath(os.path.expanduser(where))  # the cluster resolves it: never relative
    return fmt, where


def _source(args: argparse.Namespace) -> declarative_pb2.DeclarativeSource:
    from sluice import schema as schemas
    from sluice import schema_inference as inference

    fmt, path = _location(args.source, "--source", SOURCE_FORMATS)
    options = dict(_pairs(args.source_option, "--source-option"))
    suffix = args.suffix if args.suffix is not None else _SUFFIXES[fmt]
    source = declarative_pb2.DeclarativeSource(
        format=fmt,
        path=path,
        options=options,
        suffix=args.suffix or "",
        monitor_interval_ms=args.monitor_interval or 0,
    )
    if fmt == "text":
        if args.schema:
            raise SluiceError("--schema: a text source has one column, value string")
        return source
    try:
        checked = inference.check_options(fmt, options)
    except inference.ReaderOptionError as exc:
        raise SluiceError(f"--source-option {exc.field.removeprefix('options.')}: {exc.message}") from None
    ddl = args.schema
    if not ddl:  # as `sluice run` does for from_files without a schema: from a sample (Parquet: the footer)
        try:
            ddl = inference.infer_schema(path, fmt, checked, suffix)
        except (inference.SchemaInferenceError, OSError) as exc:
            raise SluiceError(
                f"--source {path}: cannot infer the schema ({exc}); give --schema 'col type, ...'"
            ) from None
    try:
        parsed = schemas.parse(ddl)
    except ValueError as exc:
        raise SluiceError(f"--schema: {exc}") from None
    source.schema.extend(declarative_pb2.SchemaField(name=f.name, type=f.type) for f in parsed)
    return source


def _sink(value: str) -> declarative_pb2.DeclarativeSink:
    if value == "print":
        return declarative_pb2.DeclarativeSink(format="print")
    fmt, path = _location(value, "--sink", SINK_FORMATS)
    return declarative_pb2.DeclarativeSink(format=fmt, path=path)


def _pairs(values: list[str] | None, flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values or []:
        key, sep, value = v.partition("=")
        if not sep or not key:
            raise SluiceError(f"{flag} takes KEY=VALUE, got {v!r}")
        out.append((key, value))
    return out


def build_job(args: argparse.Namespace) -> declarative_pb2.DeclarativeJob:
    if args.parallelism is not None and args.parallelism < 1:
        raise SluiceError(f"--parallelism must be at least 1, got {args.parallelism}")
    if args.checkpoint_interval < 0:
        raise SluiceError("--checkpoint-interval is a number of ms >= 0 (0: no checkpoints)")
    config = dict(_pairs(args.config, "--config"))
    if args.checkpoint_interval:
        config.setdefault("execution.checkpointing.interval", str(args.checkpoint_interval))
    return sql_to_job(args.query, _source(args), _sink(args.sink), args.name, args.parallelism or 0, config)


def cmd_sql(args: argparse.Namespace, context: Callable[[argparse.Namespace], dict[str, Any]]) -> int:
    from google.protobuf import json_format

    from sluice.states import JobStatus, from_proto

    job = build_job(args)
    request = jobmanager_pb2.SubmitJobRequest(declarative=job)
    if args.dry_run:
        print(json.dumps(json_format.MessageToDict(request, preserving_proto_field_name=True), indent=2))
        return 0
    client = JobManagerClient.from_context(context(args))
    try:
        reply: jobmanager_pb2.SubmitJobResponse = client._call(
            f"SubmitJob {job.name!r}", lambda s: s.SubmitJob(request, timeout=30)
        )
        if args.detach:
            print(reply.job_id, flush=True)
            return 0
        print(f"Submitted job {job.name} ({reply.job_id})", file=sys.stderr, flush=True)
        info = client.wait(reply.job_id, progress=True)
        state = from_proto(JobStatus, info.state)
        if state != JobStatus.FINISHED:
            raise JobFailed(f"job {reply.job_id} ended {state}" + (f":\n{info.failure}" if info.failure else ""))
        return 0
    finally:
        client.close()


def add_sql_command(
    sub: Any,
    client_options: Callable[[argparse.ArgumentParser], None],
    context: Callable[[argparse.Namespace], dict[str, Any]],
) -> None:
    """Register `sluice sql` on the `sluice` command's subparsers."""
    p = sub.add_parser(
        "sql",
        help="run one SQL query over files as a streaming job (docs/declarative-jobs.md)",
        description="Run SELECT ... FROM table [WHERE ...] [GROUP BY cols] over the files of --source as a "
        "streaming job writing to --sink; submitted as a DeclarativeJob (docs/declarative-jobs.md).",
    )
    p.add_argument("query", help="SELECT ... FROM <table> [WHERE ...] [GROUP BY col, ...]; the table is --source")
    p.add_argument("--source", required=True, metavar="FORMAT:PATH", help="json|csv|text|parquet:DIRECTORY (or a URI)")
    p.add_argument(
        "--schema",
        default=None,
        metavar="DDL",
        help="the source's columns, e.g. 'url string, user bigint' (default: inferred here from a sample; "
        "parquet: the first file's footer)",
    )
    p.add_argument("--source-option", action="append", metavar="KEY=VALUE", help="a Spark reader option; repeatable")
    p.add_argument(
        "--suffix", default=None, help="file name suffix read (default .jsonl, .csv, .parquet, every file for text)"
    )
    p.add_argument("--monitor-interval", type=int, default=0, metavar="MS", help="> 0: keep reading new files")
    p.add_argument(
        "--sink",
        required=True,
        metavar="FORMAT:PATH|print",
        help="csv|json|parquet|text:DIRECTORY: exactly-once files (text: a query of one column), or print",
    )
    p.add_argument("--name", default="sql", help="the job's name (default sql)")
    p.add_argument("--parallelism", "-p", type=int, default=None, help="the job's parallelism (default 1)")
    p.add_argument(
        "--checkpoint-interval", type=int, default=1000, metavar="MS", help="ms between checkpoints; 0: none"
    )
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="a job option; repeatable")
    p.add_argument("--detach", "-d", action="store_true", help="print the job id on the last line and return")
    p.add_argument("--dry-run", action="store_true", help="print the SubmitJob request as JSON; submit nothing")
    client_options(p)
    p.set_defaults(handler=lambda args: cmd_sql(args, context))
