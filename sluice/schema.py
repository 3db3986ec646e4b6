"""Schemas known before running: a small model of a stream's columns.

A `Schema` is an ordered list of `Field(name, type)`. The client derives each
operator's output schema from the source schemas through the operators
(`StreamExecutionEnvironment.get_job_graph`, sluice/api/environment.py) and
carries it as a Spark DDL string in `OperatorSpec.output_schema`; the
JobManager checks key, aggregate and sink columns against it
(`sluice.graph.validate`). Nothing here needs Spark: a pyspark `StructType` is
read through its `.fields` (duck-typed), never through a `SparkSession`.

Types, as written in a DDL string (`"url string, user long, ts bigint"`):

- recognised and canonicalised: `string`; `int`/`integer` → `int`;
  `long`/`bigint` → `bigint`; `smallint`/`short`; `tinyint`/`byte`; `double`;
  `float`/`real` → `float`; `boolean`; `date`; `timestamp`; `timestamp_ntz`;
  `binary`; `decimal(p,s)` (also `decimal`, `decimal(p)`, `dec`, `numeric`);
- kept as written (opaque; only their names are checked): `array<...>`,
  `map<...>`, `struct<...>`;
- `unknown`: Sluice's own marker for a column whose name is known but whose
  type is not (e.g. `select("a * 2 AS b")`); it never reaches Spark;
- anything else is a `SchemaError` naming the column and the type.

An operator whose output names cannot be derived has no schema at all (None
here, an empty `output_schema` on the wire), and every check against it is
skipped: a derived schema may be incomplete in its types, never wrong in its
names. Names are matched exactly (case-sensitively), as the Arrow code of the
keyed aggregate and the file sink does.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

UNKNOWN = "unknown"

_CANONICAL = {
    "string": "string",
    "int": "int",
    "integer": "int",
    "long": "bigint",
    "bigint": "bigint",
    "smallint": "smallint",
    "short": "smallint",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "double": "double",
    "float": "float",
    "real": "float",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
    UNKNOWN: UNKNOWN,
}
_NESTED = ("array", "map", "struct")
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
EVENT_TIME_TYPES = (*_INTEGRAL, "timestamp", "timestamp_ntz", "date")  # epoch ms or a time (docs/event-time.md)
SUPPORTED = (
    "string, int, bigint (long), smallint, tinyint, double, float, boolean, date, timestamp, "
    "decimal(p,s), binary, array<...>, map<...>, struct<...>"
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DECIMAL = re.compile(r"(?:decimal|dec|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\Z", re.IGNORECASE)


class SchemaError(ValueError):
    """A schema that cannot be parsed: the message names the column or the position."""


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    type: str  # canonical (see the module docstring), or UNKNOWN

    def ddl(self) -> str:
        return f"{quote(self.name)} {self.type}"


@dataclasses.dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def type_of(self, name: str) -> str | None:
        """The type of column `name` (UNKNOWN when only its name is known), None without such a column."""
        for f in self.fields:
            if f.name == name:
                return f.type
        return None

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.fields)

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def ddl(self) -> str:
        """The Spark DDL string (`"url string, count bigint"`); parse(s.ddl()) == s."""
        return ", ".join(f.ddl() for f in self.fields)

    def __str__(self) -> str:
        return self.ddl()

    def missing(self, name: str) -> str:
        """The message for a reference to a column this schema lacks."""
        return f"no column {name!r}; columns are: {', '.join(self.names)}"


def of(*fields: tuple[str, str]) -> Schema:
    """A schema from (name, type) pairs; the types are canonicalised."""
    return Schema(tuple(Field(n, canonical_type(t, n)) for n, t in fields))


def quote(name: str) -> str:
    """A column name as DDL writes it: bare when an identifier, else in backticks."""
    return name if _IDENT.match(name) else "`" + name.replace("`", "``") + "`"


def canonical_type(text: str, column: str = "?") -> str:
    """The canonical name of a DDL type (SchemaError for one outside the supported set)."""
    t = text.strip()
    low = t.lower()
    if low in _CANONICAL:
        return _CANONICAL[low]
    m = _DECIMAL.match(t)
    if m:
        precision = int(m.group(1)) if m.group(1) else 10
        scale = int(m.group(2)) if m.group(2) else 0
        if not 1 <= precision <= 38 or scale > precision:
            raise SchemaError(
                f"column {column!r}: bad decimal {t!r}; precision must be in 1..38, scale in 0..precision"
            )
        return f"decimal({precision},{scale})"
    for nested in _NESTED:
        if low.startswith(nested) and t[len(nested) :].lstrip().startswith("<") and t.endswith(">"):
            return t
    raise SchemaError(f"column {column!r}: unknown type {t!r}; supported: {SUPPORTED}")


def is_numeric(type_: str) -> bool:
    return type_ in (*_INTEGRAL, "double", "float") or type_.startswith("decimal(")


# -- parse ------------------------------------------------------------------------------------
def parse(ddl: str) -> Schema:
    """Parse a Spark DDL schema: `"a string, b long"`, `"`odd name` int NOT NULL COMMENT 'x'"`,
    or a struct type string `"struct<a:string,b:bigint>"` (StructType.simpleString)."""
    if not isinstance(ddl, str):
        raise SchemaError(f"a schema is a DDL string such as 'url string, n bigint', got {type(ddl).__name__}")
    text = ddl.strip()
    if not text:
        raise SchemaError("the schema is empty; write it as 'name type, ...', e.g. 'url string, n bigint'")
    low = text.lower()
    if low.startswith("struct") and text[6:].lstrip().startswith("<") and text.endswith(">"):
        text = text[text.index("<") + 1 : -1]
        if not text.strip():
            raise SchemaError("the schema has no columns")
    fields = []
    for part in _split_top(text, ","):
        fields.append(_parse_column(part))
    return Schema(tuple(fields))


def _parse_column(part: str) -> Field:
    s = part.strip()
    if not s:
        raise SchemaError("an empty column (two commas in a row, or a trailing comma)")
    if s.startswith("`"):
        name, i = [], 1
        while True:
            if i >= len(s):
                raise SchemaError(f"unterminated backtick in {s!r}")
            if s[i] == "`":
                if s[i + 1 : i + 2] == "`":
                    name.append("`")
                    i += 2
                    continue
                break
            name.append(s[i])
            i += 1
        col, rest = "".join(name), s[i + 1 :]
    else:
        m = re.match(r"([^\s:`<>(),]+)(.*)\Z", s, re.DOTALL)
        if m is None:
            raise SchemaError(f"cannot read a column name in {s!r}")
        col, rest = m.group(1), m.group(2)
    rest = rest.strip()
    if rest.startswith(":"):
        rest = rest[1:].strip()
    if not col:
        raise SchemaError(f"an empty column name in {s!r}")
    if not rest:
        raise SchemaError(f"column {col!r} has no type; write it as '{col} string' (supported: {SUPPORTED})")
    type_text = _strip_constraints(rest)
    return Field(col, canonical_type(type_text, col))


def _strip_constraints(rest: str) -> str:
    """The type part of `type [NOT NULL] [COMMENT '...']` (constraints outside brackets only)."""
    depth, i = 0, 0
    while i < len(rest):
        c = rest[i]
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c.isspace() and depth == 0:
            tail = rest[i:].strip()
            if re.match(r"(NOT\s+NULL|COMMENT\s)", tail, re.IGNORECASE):
                return rest[:i]
        i += 1
    return rest


def _split_top(text: str, sep: str) -> list[str]:
    """Split on `sep` outside <...>, (...), backticks and quotes."""
    parts, depth, quote_char, start = [], 0, "", 0
    for i, c in enumerate(text):
        if quote_char:
            if c == quote_char:
                quote_char = ""
        elif c in "`'\"":
            quote_char = c
        elif c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def from_struct(struct: Any) -> Schema:
    """A pyspark `StructType` (duck-typed: `.fields` of objects with `.name` and `.dataType`)."""
    fields = []
    for f in struct.fields:
        dt = f.dataType
        text = dt.simpleString() if hasattr(dt, "simpleString") else str(dt)
        fields.append(Field(str(f.name), canonical_type(text, str(f.name))))
    return Schema(tuple(fields))


def to_schema(value: Any, what: str) -> Schema:
    """A schema given to the API: a DDL string, a pyspark StructType or a Schema.
    Errors name `what` (e.g. `map(output_schema=...)`)."""
    try:
        if isinstance(value, Schema):
            return value
        if isinstance(value, str):
            return parse(value)
        if hasattr(value, "fields"):
            return from_struct(value)
    except SchemaError as exc:
        raise SchemaError(f"{what}: {exc}") from None
    raise TypeError(
        f"{what}: a schema is a DDL string ('url string, n bigint') or a pyspark StructType, got {type(value).__name__}"
    )


def parse_or_none(ddl: Any) -> Schema | None:
    """A schema the runtime reads (a source's): None when it is absent or outside this model,
    so that derivation stops there instead of rejecting what Spark may accept."""
    if ddl is None or (isinstance(ddl, str) and not ddl.strip()):
        return None
    try:
        return to_schema(ddl, "schema")
    except (SchemaError, TypeError):
        return None


# -- derivation rules -------------------------------------------------------------------------
def from_rows(rows: Sequence[Mapping[str, Any]]) -> Schema | None:
    """The schema of `pa.Table.from_pylist(rows)` (the collection source): the first row's keys,
    each typed from every row's value (UNKNOWN when all are None or they disagree)."""
    if not rows:
        return None
    names = list(rows[0])
    if not all(isinstance(n, str) for n in names):
        return None
    return Schema(tuple(Field(n, _python_type(r.get(n) for r in rows)) for n in names))


def _python_type(values: Iterable[Any]) -> str:
    kinds = set()
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int):
            kinds.add("bigint")
        elif isinstance(v, float):
            kinds.add("double")
        elif isinstance(v, str):
            kinds.add("string")
        elif isinstance(v, datetime.datetime):
            kinds.add("timestamp")
        elif isinstance(v, datetime.date):
            kinds.add("date")
        elif isinstance(v, (bytes, bytearray)):
            kinds.add("binary")
        else:  # Decimal (Arrow infers its precision from the values), lists, dicts...
            return UNKNOWN
    if kinds == {"bigint", "double"}:
        return "double"
    return kinds.pop() if len(kinds) == 1 else UNKNOWN


def union(inputs: Sequence[Schema | None]) -> Schema | None:
    """Batches of every input pass through as they are: the names must agree; a type that
    differs between inputs becomes UNKNOWN."""
    if not inputs or any(s is None for s in inputs):
        return None
    known = [s for s in inputs if s is not None]
    first = known[0]
    if any(s.names != first.names for s in known[1:]):
        return None
    return Schema(
        tuple(
            Field(f.name, f.type if all(s.fields[i].type == f.type for s in known) else UNKNOWN)
            for i, f in enumerate(first.fields)
        )
    )


_ALIAS = re.compile(
    r"(?P<expr>.+?)\s+AS\s+(?P<alias>[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)\Z", re.IGNORECASE | re.DOTALL
)
_COLUMN = r"[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`"
_COL_ALIAS = re.compile(rf"(?P<expr>{_COLUMN})\s+(?P<alias>{_COLUMN})\Z", re.DOTALL)


# Words that make "a b" something other than "column alias" (or that are functions, not columns).
_KEYWORDS = frozenset(
    "all and as between case cast distinct else end exists from in interval is like not null or rlike "
    "then true false when where".split()
)
_NILADIC = frozenset(
    "current_date current_timestamp current_user current_catalog current_database current_schema "
    "current_timezone localtimestamp now session_user user".split()
)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def select(schema: Schema | None, exprs: Sequence[str]) -> Schema | None:
    """The output of `selectExpr(*exprs)` where it can be told without Spark: `*`, a plain
    column, `expr AS alias` and `col alias`. Anything else (`upper(url)`, whose name Spark
    makes up) leaves the output unknown (None)."""
    fields: list[Field] = []
    for raw in exprs:
        e = raw.strip()
        if e == "*":
            if schema is None:
                return None
            fields.extend(schema.fields)
            continue
        if re.fullmatch(_COLUMN, e):
            name = _unquote(e)
            if schema is not None and name not in schema:
                return None  # Spark would fail, or resolve it case-insensitively: say nothing
            if schema is None and e.lower() in _NILADIC:
                return None  # current_date is a function: Spark names it current_date()
            fields.append(Field(name, _type_in(schema, name)))
            continue
        m = _COL_ALIAS.match(e) or _ALIAS.match(e)
        if m is None or not _balanced(m.group("expr")):
            return None
        expr, alias = m.group("expr").strip(), _unquote(m.group("alias"))
        if m.group("alias").lower() in _KEYWORDS or expr.lower() in _KEYWORDS:
            return None  # "NOT x", "x AS": not an aliased column
        if re.fullmatch(_COLUMN, expr) and schema is not None and _unquote(expr) in schema:
            fields.append(Field(alias, _type_in(schema, _unquote(expr))))
        else:
            fields.append(Field(alias, UNKNOWN))
    return Schema(tuple(fields))


def _type_in(schema: Schema | None, name: str) -> str:
    t = schema.type_of(name) if schema is not None else None
    return t or UNKNOWN


def _balanced(expr: str) -> bool:
    depth, quote_char = 0, ""
    for c in expr:
        if quote_char:
            if c == quote_char:
                quote_char = ""
        elif c in "'\"`":
            quote_char = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0 and not quote_char


def aggregate_type(fn: str, input_type: str | None) -> str:
    """The output type of a keyed aggregate over a column of `input_type` (as the runtime computes
    it with Arrow: taskmanager/operators/keyed_aggregate.py)."""
    t = input_type or UNKNOWN
    if fn == "count":
        return "bigint"
    if fn == "avg":
        return "double"
    if fn == "sum":
        if t in _INTEGRAL:
            return "bigint"
        if t in ("double", "float"):
            return "double"
        if t.startswith("decimal("):
            return f"decimal(38,{t[len('decimal(') : -1].split(',')[1]})"
        return UNKNOWN
    if fn in ("min", "max"):
        return t
    return UNKNOWN


def aggregate(schema: Schema | None, keys: Sequence[str], aggs: Mapping[str, tuple[str, str]]) -> Schema:
    """Every key column in key order, then one column per aggregate, named as its output.
    Known even when the input is not (then only count's type is)."""
    fields = [Field(k, _type_in(schema, k)) for k in keys]
    for out, (fn, col) in aggs.items():
        fields.append(Field(out, aggregate_type(fn, None if fn == "count" else _type_in(schema, col))))
    return Schema(tuple(fields))
