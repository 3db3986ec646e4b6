"""Parquet inputs: a file's Spark schema from its footer, and a given schema checked against it.

No sample: the schema of a Parquet source without one is the one written in the footer of
its first file (by name), read with `pyarrow.parquet.read_schema` and mapped to Spark's types
as Spark reads them (`parquet_ddl`; sluice/schema_inference.py's docstring has the table). A
schema given for Parquet files is checked against that footer (`check_parquet_schema`) at
submit (`check_parquet_input`), and the file source checks every file's footer as it reads
it (taskmanager/operators/sources.py).
"""

from __future__ import annotations

from typing import Any

from sluice import schema as schemas
from sluice.schema_inference import SchemaInferenceError


class ParquetSchemaError(SchemaInferenceError):
    """A Parquet file's footer does not give (or does not match) the source's schema."""


def check_parquet_input(path: str, suffix: str, declared: str) -> None:
    """At submit: a schema given for Parquet files against the footer of the first of them (by
    name; none yet: nothing to check). The source checks every file as it reads it."""
    from sluice.storage import list_files, resolve  # local: pyarrow.fs is heavy for the API import

    try:
        files = list_files(path, suffix)
    except FileNotFoundError:
        return  # validation names the missing directory (graph.validate)
    if files:
        fs, _ = resolve(path)
        check_parquet_schema(declared, parquet_schema(fs, files[0]), files[0])


def parquet_schema(fs: Any, path: str) -> schemas.Schema:
    """The Spark schema of the Parquet file `path` on `fs`, from its footer (the module docstring
    says how types map). ParquetSchemaError for a file that is not Parquet or has a column of a
    type Spark does not read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        arrow_schema = pq.read_schema(path, filesystem=fs)
    except (pa.ArrowException, OSError) as exc:
        raise ParquetSchemaError(f"{path} is not a readable Parquet file ({exc})") from None
    fields = []
    for f in arrow_schema:
        try:
            fields.append(schemas.Field(f.name, parquet_ddl(f.type)))
        except ValueError as exc:
            raise ParquetSchemaError(f"{path}: column {f.name!r}: {exc}") from None
    return schemas.Schema(tuple(fields))


def parquet_ddl(t: Any) -> str:
    """The Spark DDL type Spark reads a Parquet column of Arrow type `t` as (ValueError when none)."""
    import pyarrow as pa

    simple = {
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.uint8(): "smallint",
        pa.uint16(): "int",
        pa.uint32(): "bigint",
        pa.uint64(): "decimal(20,0)",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.string_view(): "string",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
        pa.date32(): "date",
        pa.date64(): "date",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_dictionary(t):
        return parquet_ddl(t.value_type)
    if pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        if t.unit == "ns":
            raise ValueError(
                "a nanosecond timestamp, which Spark does not read; write it in microseconds "
                "(pyarrow: coerce_timestamps='us')"
            )
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"array<{parquet_ddl(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{parquet_ddl(t.key_type)},{parquet_ddl(t.item_type)}>"
    if pa.types.is_struct(t):
        inner = ",".join(
            f"{schemas.quote(t.field(i).name)}:{parquet_ddl(t.field(i).type)}" for i in range(t.num_fields)
        )
        return f"struct<{inner}>"
    raise ValueError(f"type {t} has no Spark type Sluice reads; convert it (e.g. to string or bigint) when writing")


def check_parquet_schema(declared: str, found: schemas.Schema, path: str) -> None:
    """ParquetSchemaError unless every column of the `declared` schema (Spark DDL) is a column of the
    Parquet file `path` (schema `found`, from its footer) of the same type. Names match exactly
    (a name differing only in case is named in the error). A DDL Sluice's parser does not model
    is not checked here (Spark checks it as it reads)."""
    wanted = schemas.parse_or_none(declared)
    if wanted is None:
        return
    for field in wanted:
        have = found.type_of(field.name)
        if have is None:
            alike = [n for n in found.names if n.lower() == field.name.lower()]
            hint = f" (it has {alike[0]!r}: names match exactly)" if alike else ""
            raise ParquetSchemaError(
                f"{path} has no column {field.name!r}{hint}; its columns are {found.ddl()}. Give a schema of "
                "columns every file has, or none to take the first file's"
            )
        if not _same_type(field.type, have):
            raise ParquetSchemaError(
                f"{path}: column {field.name!r} is {have} in the file, the schema says {field.type}; declare it "
                f"as {have} (Spark reads a Parquet column as the type it was written with)"
            )


def _same_type(declared: str, found: str) -> bool:
    """Types equal as Sluice models them: nested types by their kind only (their text is kept as
    written, so `array<long>` and `array<bigint>` would differ)."""
    if declared == schemas.UNKNOWN:
        return True
    nested = ("array", "map", "struct")
    if declared.startswith(nested) or found.startswith(nested):
        return declared.split("<", 1)[0].strip().lower() == found.split("<", 1)[0].strip().lower()
    return declared == found
