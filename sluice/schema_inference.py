"""Reader options and submit-time schema inference of file sources (`env.from_files`).

Reader options (`from_files(..., options={...})`) go to Spark's reader as they
are (`spark.read.options(...)`, taskmanager/operators/sources.py): the
defaults are Spark's, so CSV `header` is false. Keys are matched
case-insensitively, as Spark does; values are str, bool, int or float.
`check_options` rejects what would break Sluice's file splitting or
exactly-once replay (`REJECTED` says why for each key), a `mode` outside
PERMISSIVE, DROPMALFORMED and FAILFAST, and a boolean option that is not
true or false.

Inference: a CSV or JSON source without a schema gets one here, once, in the
client (`from_files`), and the job graph carries it as the source's fixed
schema: every subtask, every batch and every restore reads the same columns.
The sample is the first `SAMPLE_BYTES` of each of the first `SAMPLE_FILES`
files (sorted by name, decompressed by extension), read with pyarrow only:

- CSV: `pyarrow.csv.read_csv` honouring `header`, `sep`/`delimiter`, `quote`,
  `escape`, `comment`, `nullValue`, `encoding` and `lineSep`. With a header
  the names are the first file's header made safe as Spark makes them (an
  empty name becomes `_c<i>`, a name repeated without regard to case gets
  its index appended); without one they are Spark's `_c0, _c1, ...`. Types:
  integers `bigint`, decimals `double`, true/false `boolean`, ISO-8601
  dates `date` and timestamps `timestamp`, anything else `string` (as
  Spark's `inferSchema` would; `inferSchema=False` keeps every column a
  `string`, as Spark reads CSV without it). Rows of the wrong width in the
  sample are left out of the inference.
- JSON (one object per line): `pyarrow.json.read_json` over the sample's
  lines that parse as objects. Fields are sorted by name and strings stay
  `string`, as Spark's JSON inference does; integers `bigint`, numbers
  `double`, `boolean`, nested objects `struct<...>`, arrays `array<...>`, a
  field that is null in the whole sample `string`; `primitivesAsString=True`
  makes every scalar a string. A field whose values disagree in the sample
  (a number and a string) cannot be inferred: give a schema.
- text: always `value string` (no inference).
- Parquet: no sample: the schema written in the footer of the first file
  (by name), read with `pyarrow.parquet.read_schema` and mapped to Spark's
  types as Spark reads them (`parquet_ddl`, sluice/parquet_schema.py): int8/16/32/64 `tinyint`,
  `smallint`, `int`, `bigint`; float `float`, double `double`; strings
  `string`; binaries `binary`; date `date`; a timestamp with a time zone
  (adjusted to UTC) `timestamp`, without one `timestamp_ntz`; decimals,
  lists, maps and structs likewise. A nanosecond timestamp, an unsigned
  64-bit integer or a time of day has no Spark type Sluice can promise and
  is an error naming the column. A schema given for Parquet files is
  checked against that footer (`check_parquet_schema`, sluice/parquet_schema.py): each column it
  names must be in the file with the same type (a subset, in any order, is
  fine: Spark reads only those columns).

Malformed rows (`from_files(..., on_error=...)`, resolved by `error_policy`):
a row is malformed when any column of the schema does not parse as its type
(taskmanager/operators/malformed_checks.py). In JSON a number, boolean or date column takes only
a value of that type (`"7"`, `7.5`, `true` or an overflowing integer in a
`bigint` column make the row malformed), while a `string` column takes any
JSON value as its text (`5` becomes "5", an object its JSON); a line that is
not a JSON object (binary garbage, `[1, 2]`) is malformed, but one that starts
with a whole object reads as that object (`{}` and then garbage: a row of
nulls, which key_by drops as a null key). In CSV every field is text and a typed
column's field must parse (`5.5` is not a `bigint`); a row with too few or too many
fields, or undecodable bytes (U+FFFD) in a string column, is malformed. `on_error` and Spark's
`mode` option say the same thing in two vocabularies, so a source takes one
policy from both (`POLICIES`):

| on_error | mode | malformed rows |
|---|---|---|
| (none) | (none) | `drop`: dropped and counted (`records_malformed`, `records_dropped`) |
| `"drop"` | (none) or DROPMALFORMED | `drop` |
| `"fail"` | (none) or FAILFAST | `fail`: the job fails at once, naming the file and the line |
| `"dead_letter:DIR"` | (none) | `dead_letter`: each line as it was, with its file, to a file sink at DIR |
| (none) | DROPMALFORMED, FAILFAST | `drop`, `fail` |
| (none) | (none), with `columnNameOfCorruptRecord` | `keep` (below) |
| (none) | PERMISSIVE | `keep`: the row goes on with nulls, as in Spark, and is counted |

`keep` leaves a malformed row's text in the `columnNameOfCorruptRecord`
column when the schema has one.

Any other pair contradicts itself and is an error at submit. Text sources
have no malformed lines: `on_error` is not an option of theirs.

Parquet files have no malformed rows either (every value is typed in the
file), but a file can be unreadable: not Parquet, truncated, or with a
column missing or of another type than the source's schema. The source
checks each file's footer before Spark reads it, and such a file fails the
job at once (not restarted: the same file fails the same way), naming the
file and what to fix (`PARQUET_FAILURE`). So `on_error` takes only `"fail"`
(the default) for Parquet: skipping a file silently would lose its rows,
and `"drop"` and `"dead_letter:DIR"` are refused at submit. Parquet reader
options are limited to `PARQUET_OPTIONS` (the CSV/JSON ones, `mode` and
`mergeSchema` mean nothing with a fixed schema and are refused).

File sinks (`FileSink(format=...)`, taskmanager/operators/sinks.py) write
csv, json, parquet or text parts, named with the extension of
`SINK_FORMATS`; sluice/output.py reads them back by that extension.

A sample may miss what later rows hold (a column that is numeric in the
first files and not later): such rows are then malformed, so declare the
schema when the input varies. `columnNameOfCorruptRecord` in the options adds
that column (`string`) to an inferred schema.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sluice import schema as schemas

FORMATS = ("json", "csv", "text", "parquet")
# A file sink's formats and the extension of its committed parts (docs/file-formats.md)
SINK_FORMATS = {"csv": ".csv", "json": ".jsonl", "parquet": ".parquet", "text": ".txt"}
# The reader options a Parquet source takes (lower-cased); every other one is refused
PARQUET_OPTIONS = ("datetimerebasemode", "int96rebasemode")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
SAMPLE_FILES = 8  # the first files (by name) sampled for inference
SAMPLE_BYTES = 128 * 1024  # from the start of each, decompressed
INTERNAL_PREFIX = "__sluice"  # column names Sluice adds while reading (taskmanager/operators/sources.py)
CORRUPT_COLUMN = f"{INTERNAL_PREFIX}_corrupt_record"  # a malformed row's text
FILE_COLUMN = f"{INTERNAL_PREFIX}_file"  # on_error="dead_letter:DIR": the file a malformed row came from
# Starts the error of a source with on_error="fail" (a task that raises it fails NON_RECOVERABLE)
MALFORMED_FAILURE = "malformed record (on_error='fail')"
# Starts the error of a Parquet source meeting a file it cannot read as its schema says (not restarted)
PARQUET_FAILURE = "unreadable Parquet input"

OptionValue = str | bool | int | float

# What a file source does with malformed rows (the table in the module docstring).
POLICIES = ("drop", "fail", "dead_letter", "keep")
DEAD_LETTER = "dead_letter:"  # on_error="dead_letter:DIR"
_POLICY_OF_MODE = {"DROPMALFORMED": "drop", "FAILFAST": "fail", "PERMISSIVE": "keep"}
_MODE_OF_POLICY = {"drop": "DROPMALFORMED", "fail": "FAILFAST"}

# Options whose effect would break what Sluice guarantees, lower-cased (Spark matches keys without
# regard to case), with the reason the error gives.
REJECTED: dict[str, str] = {
    "path": "Sluice reads the files it lists under from_files' path; give the directory as path",
    "paths": "Sluice reads the files it lists under from_files' path; give the directory as path",
    "recursivefilelookup": (
        "a split is one file directly under path (Sluice lists the directory itself and its offsets count "
        "those files); put the files in one directory or use one source per directory"
    ),
    "pathglobfilter": "Sluice chooses the files by name itself: use suffix=... (files not starting with '.' or '_')",
    "modifiedbefore": (
        "it filters files by their modification time, so a replay after a restore could read other files "
        "than the first run (exactly-once needs the same input)"
    ),
    "modifiedafter": (
        "it filters files by their modification time, so a replay after a restore could read other files "
        "than the first run (exactly-once needs the same input)"
    ),
    "ignorecorruptfiles": (
        "it skips a whole file silently, possibly differently on a replay; malformed rows are handled "
        "by mode (PERMISSIVE, DROPMALFORMED, FAILFAST) and counted"
    ),
    "ignoremissingfiles": (
        "it skips a listed file that disappeared, silently and differently on a replay; an input file "
        "must stay until the job is done with it"
    ),
    "basepath": "partition discovery would add columns that are not in the source's fixed schema",
}
# Options Sluice reads itself (inference, malformed rows): they must be true or false.
BOOLEAN_OPTIONS = ("header", "inferSchema", "multiLine", "enforceSchema", "primitivesAsString", "wholetext")
_PER_FORMAT = {  # options that make no sense for a format
    "text": ("mode", "columnNameOfCorruptRecord"),
}


class ReaderOptionError(ValueError):
    """A bad reader option; `field` is `options.<key>` (or `options`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SchemaInferenceError(ValueError):
    """No schema could be inferred from the input; the message says what to give instead."""


# -- options ----------------------------------------------------------------------------------
def check_options(format: str, options: object) -> dict[str, OptionValue]:
    """A validated copy of a source's reader options (ReaderOptionError otherwise)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ReaderOptionError(
            "options", f"expected a dict of reader options, e.g. {{'header': True}}, got {type(options).__name__}"
        )
    out: dict[str, OptionValue] = {}
    seen: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key:
            raise ReaderOptionError("options", f"option names are non-empty strings, got {key!r}")
        field = f"options.{key}"
        low = key.lower()
        if low in seen:
            raise ReaderOptionError(field, f"given twice (as {seen[low]!r} too); option names ignore case")
        seen[low] = key
        if not isinstance(value, (str, bool, int, float)):
            raise ReaderOptionError(field, f"a value is a str, bool, int or float, got {type(value).__name__}")
        if low in REJECTED:
            raise ReaderOptionError(field, f"not supported: {REJECTED[low]}")
        if format == "parquet" and low not in PARQUET_OPTIONS:
            raise ReaderOptionError(
                field,
                "not an option of parquet files: Sluice reads them with the source's fixed schema and "
                "takes only datetimeRebaseMode and int96RebaseMode",
            )
        if low in (k.lower() for k in _PER_FORMAT.get(format, ())):
            raise ReaderOptionError(field, f"not an option of {format} files: a line of text is never malformed")
        if low in (k.lower() for k in BOOLEAN_OPTIONS) and _bool(value) is None:
            raise ReaderOptionError(field, f"must be true or false, got {value!r}")
        if low == "mode" and (not isinstance(value, str) or value.upper() not in MODES):
            raise ReaderOptionError(field, f"must be one of {', '.join(MODES)}, got {value!r}")
        if low == "columnnameofcorruptrecord" and (
            not isinstance(value, str) or not value or value.startswith(INTERNAL_PREFIX)
        ):
            raise ReaderOptionError(
                field, f"must be a column name (not starting with {INTERNAL_PREFIX!r}), got {value!r}"
            )
        out[key] = value
    return out


def option(options: Mapping[str, OptionValue], key: str) -> OptionValue | None:
    """The value of option `key` (any case), or None."""
    low = key.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return None


def flag(options: Mapping[str, OptionValue], key: str, default: bool = False) -> bool:
    value = _bool(option(options, key))
    return default if value is None else value


def error_policy(format: str, options: Mapping[str, OptionValue], on_error: object) -> tuple[str, str | None]:
    """(policy, dead-letter directory or None) of a source from its `on_error` and its reader
    options' `mode` (the table in the module docstring); ReaderOptionError (field `on_error`) when
    `on_error` is not one Sluice knows or contradicts `mode`."""
    if format == "parquet":  # no malformed rows; an unreadable file fails (module docstring)
        if on_error in (None, "fail"):
            return "fail", None
        raise ReaderOptionError(
            "on_error",
            f"parquet files take only on_error='fail' (the default), got {on_error!r}: a Parquet value is typed "
            "in the file, so no row is malformed, and a file that cannot be read fails the job naming it",
        )
    mode = option(options, "mode")
    mode = str(mode).upper() if mode is not None else None
    if on_error is None:
        if mode is None:  # a corrupt-record column asks to see the malformed rows: Spark's PERMISSIVE
            return ("keep" if corrupt_column_of(options) is not None else "drop"), None
        return _POLICY_OF_MODE[mode], None
    accepted = f'"drop", "fail" or "{DEAD_LETTER}DIR" (a directory for the malformed lines)'
    if not isinstance(on_error, str):
        raise ReaderOptionError("on_error", f"expected {accepted}, got {on_error!r}")
    if format == "text":
        raise ReaderOptionError("on_error", "not an option of text files: a line of text is never malformed")
    directory: str | None = None
    if on_error.startswith(DEAD_LETTER):
        directory = on_error[len(DEAD_LETTER) :].strip()
        if not directory:
            raise ReaderOptionError("on_error", f'"{DEAD_LETTER}" needs a directory, e.g. "{DEAD_LETTER}/data/bad"')
        policy = "dead_letter"
    elif on_error in ("drop", "fail"):
        policy = on_error
    else:
        raise ReaderOptionError("on_error", f"expected {accepted}, got {on_error!r}")
    if mode is not None and _MODE_OF_POLICY.get(policy) != mode:
        agrees = _MODE_OF_POLICY.get(policy)
        raise ReaderOptionError(
            "on_error",
            f"{on_error!r} contradicts the reader option mode={mode!r}: "
            + (f"leave mode out (or set it to {agrees})" if agrees else "leave mode out")
            + "; on_error says what happens to malformed rows",
        )
    return policy, directory


def mode_of(options: Mapping[str, OptionValue]) -> str:
    """The malformed-row mode: PERMISSIVE (Spark's default), DROPMALFORMED or FAILFAST."""
    value = option(options, "mode")
    return str(value).upper() if value is not None else "PERMISSIVE"


def corrupt_column_of(options: Mapping[str, OptionValue]) -> str | None:
    value = option(options, "columnNameOfCorruptRecord")
    return str(value) if value is not None else None


def spark_options(options: Mapping[str, OptionValue]) -> dict[str, str]:
    """The options as Spark's reader takes them: booleans as true/false, numbers as written."""
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in options.items()}


def check_corrupt_column(schema: str | None, options: Mapping[str, OptionValue]) -> None:
    """`columnNameOfCorruptRecord` must name a string column of the schema (when the schema is one
    Sluice can read: sluice/schema.py); Spark would otherwise ignore it silently."""
    name = corrupt_column_of(options)
    parsed = schemas.parse_or_none(schema)
    if name is None or parsed is None:
        return
    key = next(k for k in options if k.lower() == "columnnameofcorruptrecord")
    if name not in parsed:
        raise ReaderOptionError(
            f"options.{key}",
            f"column {name!r} is not in the schema ({parsed.ddl()}); add '{schemas.quote(name)} string' "
            "to the schema to keep each malformed row's text there",
        )
    if parsed.type_of(name) != "string":
        raise ReaderOptionError(f"options.{key}", f"column {name!r} must be a string, not {parsed.type_of(name)}")


def _bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


# -- inference ---------------------------------------------------------------------------------
def infer_schema(path: str, format: str, options: Mapping[str, OptionValue], suffix: str = "") -> str:
    """The Spark DDL schema of the files under `path` (a directory, local or a pyarrow.fs URI) ending
    in `suffix`, inferred from a sample. SchemaInferenceError when there is nothing to infer from."""
    from sluice.storage import list_files, resolve  # local: pyarrow.fs is heavy for the API import

    if format == "text":
        return "value string"
    files = list_files(path, suffix)  # FileNotFoundError for a missing directory
    if format == "parquet" and files:
        from sluice.parquet_schema import parquet_schema  # it builds on this module

        fs, _ = resolve(path)
        return parquet_schema(fs, files[0]).ddl()
    if not files:
        raise SchemaInferenceError(
            f"no files ending in {suffix!r} under {path!r} to infer a schema from; give the schema, "
            "e.g. schema='url string, user bigint'"
        )
    if flag(options, "multiLine") and format == "json":
        raise SchemaInferenceError("a multiLine JSON source needs a schema (the sample is read line by line)")
    fs, _ = resolve(path)
    samples = [_read_sample(fs, f, options) for f in files[:SAMPLE_FILES]]
    inferred = infer_csv(samples, options) if format == "csv" else infer_json(samples, options)
    corrupt = corrupt_column_of(options)
    if corrupt is not None and corrupt not in inferred:
        inferred = schemas.Schema((*inferred.fields, schemas.Field(corrupt, "string")))
    return inferred.ddl()


def _read_sample(fs: Any, path: str, options: Mapping[str, OptionValue]) -> str:
    """The first SAMPLE_BYTES of a file (decompressed by its extension) as text, cut after its last
    whole line when the file is longer."""
    with fs.open_input_stream(path, compression="detect") as f:
        raw = f.read(SAMPLE_BYTES + 1)
    truncated = len(raw) > SAMPLE_BYTES
    encoding = str(option(options, "encoding") or option(options, "charset") or "utf-8")
    if encoding.lower().replace("-", "") == "utf8":
        encoding = "utf-8-sig"  # a byte order mark is not part of the first column's name
    try:
        text = raw[:SAMPLE_BYTES].decode(encoding, errors="replace")
    except LookupError:
        raise SchemaInferenceError(f"unknown encoding {encoding!r}") from None
    sep = option(options, "lineSep")
    if isinstance(sep, str) and sep and sep not in ("\n", "\r\n", "\r"):
        text = text.replace(sep, "\n")
    if truncated:
        text = text[: text.rfind("\n") + 1]
    return text


def infer_csv(samples: Sequence[str], options: Mapping[str, OptionValue]) -> schemas.Schema:
    """The schema of CSV samples (one per file, in file order), as the module docstring says."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    header = flag(options, "header")
    comment = option(options, "comment")
    delimiter = _unescape(str(option(options, "sep") or option(options, "delimiter") or ","))
    lines: list[str] = []
    for i, sample in enumerate(samples):
        kept = sample.splitlines()
        if isinstance(comment, str) and comment:
            kept = [line for line in kept if not line.startswith(comment)]
        if header and i > 0:  # every file has its header line; the first file's names the columns
            kept = kept[1:]
        lines += kept
    if len(delimiter) != 1:  # Spark takes a several-character separator; pyarrow one character
        lines = [line.replace(delimiter, "\x1f") for line in lines]
        delimiter = "\x1f"
    if not any(line.strip() for line in lines):
        raise SchemaInferenceError("the sampled CSV files are empty: give the schema")
    quote = option(options, "quote")
    escape = option(options, "escape")
    null_value = option(options, "nullValue")
    try:
        # One thread: the samples are small, and with pyarrow's reader threads calling the Python row
        # handler below, about one process in seven aborted at exit ("terminate called without an
        # active exception") under load: a user's job script, after its job was submitted.
        table = pacsv.read_csv(
            io.BytesIO("\n".join(lines).encode() + b"\n"),
            read_options=pacsv.ReadOptions(autogenerate_column_names=not header, use_threads=False),
            parse_options=pacsv.ParseOptions(
                delimiter=delimiter,
                quote_char=str(quote) if isinstance(quote, str) and quote else ('"' if quote is None else False),
                escape_char=str(escape) if isinstance(escape, str) and escape else ("\\" if escape is None else False),
                newlines_in_values=flag(options, "multiLine"),
                invalid_row_handler=lambda _row: "skip",  # a malformed row at run time too
            ),
            convert_options=pacsv.ConvertOptions(
                null_values=["" if null_value is None else str(null_value)],
                strings_can_be_null=True,
                true_values=["true", "True", "TRUE"],
                false_values=["false", "False", "FALSE"],
            ),
        )
    except pa.ArrowInvalid as exc:
        raise SchemaInferenceError(f"could not read the sampled CSV files ({exc}): give the schema") from None
    names = _safe_header(table.column_names, null_value) if header else [f"_c{i}" for i in range(table.num_columns)]
    typed = flag(options, "inferSchema", default=True)
    return schemas.Schema(
        tuple(
            schemas.Field(n, _ddl_type(f.type, strings=False) if typed else "string")
            for n, f in zip(names, table.schema, strict=True)
        )
    )


def _unescape(sep: str) -> str:
    """Spark's way of writing a tab (`\\t`) and other escaped separators."""
    return {"\\t": "\t", "\\n": "\n", "\\r": "\r", "\\\\": "\\"}.get(sep, sep)


def _safe_header(names: Sequence[str], null_value: OptionValue | None) -> list[str]:
    """Header names made unique and non-empty the way Spark's CSV reader does (case-insensitively):
    an empty name (or the null value) becomes `_c<index>`, a repeated one gets its index appended."""
    null = "" if null_value is None else str(null_value)
    lowered = [n.lower() for n in names if n]
    duplicates = {n for n in lowered if lowered.count(n) > 1}
    out = []
    for i, n in enumerate(names):
        if not n or n == null:
            out.append(f"_c{i}")
        elif n.lower() in duplicates:
            out.append(f"{n}{i}")
        else:
            out.append(n)
    return out


def infer_json(samples: Sequence[str], options: Mapping[str, OptionValue]) -> schemas.Schema:
    """The schema of newline-delimited JSON samples, as the module docstring says. Lines that are
    not JSON objects are left out (they are malformed rows at run time too)."""
    import pyarrow as pa
    import pyarrow.json as pajson

    objects = []
    for sample in samples:
        for line in sample.splitlines():
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                objects.append(line)
    if not objects:
        raise SchemaInferenceError("the sampled JSON files hold no JSON object lines: give the schema")
    try:
        table = pajson.read_json(io.BytesIO("\n".join(objects).encode() + b"\n"))
    except pa.ArrowInvalid as exc:
        raise SchemaInferenceError(
            f"cannot infer one type per field from the sampled JSON lines ({exc}): give the schema"
        ) from None
    strings = flag(options, "primitivesAsString")
    fields = sorted(table.schema, key=lambda f: f.name)  # Spark's JSON inference sorts fields by name
    return schemas.Schema(
        tuple(schemas.Field(f.name, _ddl_type(f.type, strings=True, all_strings=strings)) for f in fields)
    )


def _ddl_type(t: Any, strings: bool, all_strings: bool = False) -> str:
    """The Spark DDL type of an inferred Arrow type. `strings`: dates and timestamps stay strings
    (JSON: Spark infers them only when asked); `all_strings`: every scalar is a string."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        fields = sorted((t.field(i) for i in range(t.num_fields)), key=lambda f: f.name)
        inner = ",".join(f"{schemas.quote(f.name)}:{_ddl_type(f.type, strings, all_strings)}" for f in fields)
        return f"struct<{inner}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{_ddl_type(t.value_type, strings, all_strings)}>"
    if all_strings:
        return "string"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "bigint"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_date(t) and not strings:
        return "date"
    if pa.types.is_timestamp(t) and not strings:
        return "timestamp"
    return "string"  # strings, nulls (a column empty in the whole sample), times of day, binaries
