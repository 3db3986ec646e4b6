"""What makes a CSV or JSON row malformed, beyond what Spark's parser reports (pure core of
`FileFormatReader._plan`, taskmanager/operators/file_reader.py; the rules are in README.md, "Reading
files", and docs/file-formats.md).

Spark reads a CSV or JSON file PERMISSIVE with a corrupt-record column and sets that column
for a row it could not parse. Left alone it parses only the columns a query reads, so:

- a CSV row with too few or too many fields, or a field that does not parse as its column's
  type, passes as data when the job does not read that column: Spark's CSV parser then counts
  only the fields it selects, and never converts the others. So every column of the schema is
  `parsed` (referenced by the source's per-batch metric, which makes Spark parse it in every
  row), and CSV is read with `READER_OPTIONS` (`columnPruning` off: the field count is checked
  against the whole schema);
- a query that reads no column but the corrupt-record one (a body's `df.count()`) is refused by
  Spark (`QUERY_ONLY_CORRUPT_RECORD_COLUMN`): referencing `parsed` prevents that too;
- Spark decodes CSV text with replacement: a byte that is not valid in the file's encoding
  becomes U+FFFD (`UNDECODABLE`) and the row parses, so binary garbage with the right number
  of separators would be a row of invented strings. A CSV row with U+FFFD in a `string`
  column (`undecodable`) is malformed too; its text, for samples and dead letters, is its
  fields joined by the `separator` (Spark does not keep the line of a row it parsed).
  A CSV value that really holds U+FFFD is therefore dropped and counted as well.

A JSON source of a job with `execution.source.malformed-columns: read` references only the
schema's first column (`parsed`): Spark then parses that one and the columns the job reads,
and a bad value in any other column goes unseen, as it does in Spark and Flink. Checking every
column costs ~20 % of a page-views call's Spark time (bench/README.md, "Where a page-views
job's time goes"). A line that is not JSON at all is malformed either way (Spark's parser
reads each line whole).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

UNDECODABLE = "\ufffd"  # what a decoder puts for bytes it cannot decode
# CSV: count every field of a row against the whole schema, whichever columns the job reads
READER_OPTIONS: Mapping[str, str] = {"columnPruning": "false"}
_ESCAPED = {"\\t": "\t", "\\n": "\n", "\\r": "\r", "\\\\": "\\"}  # Spark's way of writing a tab and others


@dataclasses.dataclass(frozen=True)
class MalformedChecks:
    """The checks of one source (`malformed_checks`)."""

    parsed: tuple[str, ...]  # every schema column but the corrupt-record one: Spark parses each in every row
    undecodable: tuple[str, ...]  # CSV: string columns in which UNDECODABLE makes the row malformed
    separator: str  # CSV: joins such a row's fields into its text
    reader_options: Mapping[str, str]  # added to the reader's options, after the user's


def malformed_checks(
    format: str,
    fields: Sequence[tuple[str, str]],
    corrupt: str,
    separator: str | None = None,
    columns: str = "all",
) -> MalformedChecks:
    """The checks of a `format` ("csv" or "json") source whose schema is `fields` ((name, type)
    pairs, types as Spark writes them, e.g. "string", "bigint") and whose corrupt-record column
    is `corrupt` (in `fields` or not); `separator` is the CSV `sep`/`delimiter` option as given
    (None: a comma); `columns`: "all", or "read" (JSON: only the first column is `parsed`, see the
    module docstring). ValueError for another format or a schema with no column to parse."""
    if format not in ("csv", "json"):
        raise ValueError(f"malformed rows are checked in csv and json sources, not {format!r}")
    parsed = tuple(name for name, _type in fields if name != corrupt)
    if not parsed:
        raise ValueError(f"the schema has no column besides the corrupt-record column {corrupt!r}")
    if columns not in ("all", "read"):
        raise ValueError(f"columns checked: all or read, not {columns!r}")
    if format == "json":  # Spark's JSON parser already refuses invalid UTF-8 and checks every field it parses
        return MalformedChecks(
            parsed=parsed if columns == "all" else parsed[:1], undecodable=(), separator=",", reader_options={}
        )
    undecodable = tuple(name for name, type_ in fields if name != corrupt and type_.strip().lower() == "string")
    sep = "," if separator is None or separator == "" else _ESCAPED.get(separator, separator)
    return MalformedChecks(parsed=parsed, undecodable=undecodable, separator=sep, reader_options=READER_OPTIONS)
