"""sluice/schema.py: DDL strings parsed and formatted back, StructTypes read without a
SparkSession, and the derivation rules the client applies operator by operator."""

from __future__ import annotations

import datetime
import decimal

import pytest
from pyspark.sql import types as T

from sluice import schema as S
from sluice.schema import Field, Schema, SchemaError


def names_types(s: Schema | None) -> list[tuple[str, str]] | None:
    return None if s is None else [(f.name, f.type) for f in s]


# -- parse and format ---------------------------------------------------------------------------
def test_parse_the_readme_schema_and_format_it_back():
    s = S.parse("url string, user long, ts bigint")
    assert names_types(s) == [("url", "string"), ("user", "bigint"), ("ts", "bigint")]
    assert s.ddl() == "url string, user bigint, ts bigint"
    assert S.parse(s.ddl()) == s
    assert s.names == ["url", "user", "ts"] and "url" in s and "URL" not in s
    assert s.type_of("ts") == "bigint" and s.type_of("nope") is None


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("string", "string"),
        ("STRING", "string"),
        ("int", "int"),
        ("integer", "int"),
        ("long", "bigint"),
        ("BigInt", "bigint"),
        ("short", "smallint"),
        ("byte", "tinyint"),
        ("double", "double"),
        ("float", "float"),
        ("real", "float"),
        ("boolean", "boolean"),
        ("date", "date"),
        ("timestamp", "timestamp"),
        ("timestamp_ntz", "timestamp_ntz"),
        ("binary", "binary"),
        ("decimal", "decimal(10,0)"),
        ("decimal(12)", "decimal(12,0)"),
        ("DECIMAL(10, 2)", "decimal(10,2)"),
        ("numeric(38,38)", "decimal(38,38)"),
        ("array<string>", "array<string>"),
        ("map<string, array<int>>", "map<string, array<int>>"),
        ("struct<a:int, b:string>", "struct<a:int, b:string>"),
        ("unknown", "unknown"),
    ],
)
def test_supported_types_are_canonicalised(written, canonical):
    s = S.parse(f"c {written}")
    assert names_types(s) == [("c", canonical)]
    assert S.parse(s.ddl()) == s


def test_nested_types_do_not_split_the_columns():
    s = S.parse("m map<string, int>, d decimal(10, 2), a array<struct<x:int,y:string>>")
    assert s.names == ["m", "d", "a"]


def test_quoted_names_constraints_and_comments():
    s = S.parse("`odd name` int NOT NULL, `a``b` string COMMENT 'the, comment', c:long")
    assert names_types(s) == [("odd name", "int"), ("a`b", "string"), ("c", "bigint")]
    assert s.ddl() == "`odd name` int, `a``b` string, c bigint"
    assert S.parse(s.ddl()) == s


def test_struct_type_strings_parse_as_their_fields():
    assert names_types(S.parse("struct<url:string,n:bigint>")) == [("url", "string"), ("n", "bigint")]


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("", "the schema is empty"),
        ("   ", "the schema is empty"),
        ("url", "column 'url' has no type"),
        ("url strng", "column 'url': unknown type 'strng'; supported: string, int, bigint (long)"),
        ("a int,, b int", "an empty column"),
        ("a int,", "an empty column"),
        ("d decimal(40,2)", "column 'd': bad decimal"),
        ("d decimal(5,6)", "column 'd': bad decimal"),
        ("`open int", "unterminated backtick"),
    ],
)
def test_bad_schemas_name_the_column_or_the_problem(ddl, message):
    with pytest.raises(SchemaError) as info:
        S.parse(ddl)
    assert message in str(info.value)


def test_a_struct_type_is_read_through_its_fields_without_spark():
    struct = T.StructType(
        [
            T.StructField("url", T.StringType()),
            T.StructField("n", T.LongType()),
            T.StructField("i", T.IntegerType()),
            T.StructField("price", T.DecimalType(10, 2)),
            T.StructField("tags", T.ArrayType(T.StringType())),
            T.StructField("odd name", T.DoubleType()),
        ]
    )
    s = S.to_schema(struct, "map(output_schema=...)")
    assert names_types(s) == [
        ("url", "string"),
        ("n", "bigint"),
        ("i", "int"),
        ("price", "decimal(10,2)"),
        ("tags", "array<string>"),
        ("odd name", "double"),
    ]
    assert s.ddl() == "url string, n bigint, i int, price decimal(10,2), tags array<string>, `odd name` double"


def test_to_schema_names_what_was_given():
    with pytest.raises(SchemaError, match=r"map\(output_schema=...\): column 'x': unknown type 'nope'"):
        S.to_schema("x nope", "map(output_schema=...)")
    with pytest.raises(TypeError, match=r"from_generator\(schema=...\): a schema is a DDL string"):
        S.to_schema(42, "from_generator(schema=...)")
    assert S.to_schema(S.of(("a", "int")), "x") == S.of(("a", "int"))


def test_a_source_schema_outside_the_model_is_unknown_not_an_error():
    assert S.parse_or_none(None) is None
    assert S.parse_or_none("") is None
    assert S.parse_or_none("a interval day") is None  # Spark may take it; we just cannot check
    assert S.parse_or_none("a int") == S.of(("a", "int"))


def test_missing_message_lists_the_columns():
    assert S.of(("k", "string"), ("v", "bigint")).missing("sum") == "no column 'sum'; columns are: k, v"


# -- derivation rules ------------------------------------------------------------------------------
def test_rows_infer_as_arrow_from_pylist_does():
    rows = [
        {"s": "a", "n": 1, "x": 1, "f": 0.5, "b": True, "none": None, "d": datetime.date(2024, 1, 1)},
        {"s": "b", "n": 2, "x": 2.5, "f": 1.0, "b": False, "none": None, "extra": 1},
    ]
    assert names_types(S.from_rows(rows)) == [
        ("s", "string"),
        ("n", "bigint"),
        ("x", "double"),  # ints and floats: double
        ("f", "double"),
        ("b", "boolean"),
        ("none", "unknown"),
        ("d", "date"),
    ]  # the first row's keys, as pa.Table.from_pylist
    assert S.from_rows([]) is None
    assert names_types(S.from_rows([{"t": datetime.datetime(2024, 1, 1), "m": decimal.Decimal("1.5")}])) == [
        ("t", "timestamp"),
        ("m", "unknown"),
    ]
    assert names_types(S.from_rows([{"a": 1}, {"a": "x"}])) == [("a", "unknown")]


def test_select_plain_columns_star_and_aliases():
    s = S.parse("url string, user bigint, ts bigint")
    assert names_types(S.select(s, ["url", "user * 2 AS u2", "ts t", "`user` AS `the user`"])) == [
        ("url", "string"),
        ("u2", "unknown"),
        ("t", "bigint"),
        ("the user", "bigint"),
    ]
    assert S.select(s, ["*"]) == s
    assert names_types(S.select(s, ["cast(ts AS double) AS secs", "upper(url) as U"])) == [
        ("secs", "unknown"),
        ("U", "unknown"),
    ]


@pytest.mark.parametrize(
    "expr",
    [
        "upper(url)",  # Spark makes the name up
        "user + 1",
        "cast(ts AS double)",
        "NOT flag",
        "nope",  # not a column: Spark fails or resolves another case
        "URL",
        "concat(url, ' AS x')",
        "url AS",
    ],
)
def test_select_of_what_cannot_be_named_leaves_the_output_unknown(expr):
    assert S.select(S.parse("url string, user bigint, ts bigint, flag boolean"), [expr]) is None


def test_select_after_an_unknown_input_keeps_the_names_it_can_tell():
    assert names_types(S.select(None, ["a", "b AS c", "d e"])) == [("a", "unknown"), ("c", "unknown"), ("e", "unknown")]
    assert S.select(None, ["*"]) is None
    assert S.select(None, ["current_date"]) is None


def test_union_keeps_agreeing_names_and_unknowns_disagreeing_types():
    a, b = S.parse("k string, v bigint"), S.parse("k string, v double")
    assert S.union([a, a]) == a
    assert names_types(S.union([a, b])) == [("k", "string"), ("v", "unknown")]
    assert S.union([a, S.parse("v bigint, k string")]) is None
    assert S.union([a, None]) is None


def test_aggregate_output_is_the_keys_then_the_outputs_with_their_types():
    s = S.parse("country string, device string, v bigint, i int, x double, f float, d decimal(10,2), ts timestamp")
    aggs = {
        "count": ("count", "*"),
        "v": ("sum", "v"),
        "i_sum": ("sum", "i"),
        "x_sum": ("sum", "x"),
        "f_sum": ("sum", "f"),
        "d_sum": ("sum", "d"),
        "lo": ("min", "ts"),
        "hi": ("max", "d"),
        "mean": ("avg", "v"),
    }
    assert S.aggregate(s, ["country", "device"], aggs).ddl() == (
        "country string, device string, count bigint, v bigint, i_sum bigint, x_sum double, f_sum double, "
        "d_sum decimal(38,2), lo timestamp, hi decimal(10,2), mean double"
    )


def test_aggregate_of_an_unknown_input_still_names_its_columns():
    out = S.aggregate(None, ["k"], {"n": ("count", "*"), "v": ("sum", "v"), "m": ("avg", "v")})
    assert names_types(out) == [("k", "unknown"), ("n", "bigint"), ("v", "unknown"), ("m", "double")]


def test_numeric_types():
    assert all(S.is_numeric(t) for t in ("int", "bigint", "smallint", "tinyint", "double", "float", "decimal(5,2)"))
    assert not any(S.is_numeric(t) for t in ("string", "boolean", "date", "timestamp", "unknown", "array<int>"))


def test_fields_format_with_backticks_only_when_needed():
    assert Field("a_1", "int").ddl() == "a_1 int"
    assert Field("1a", "int").ddl() == "`1a` int"
    assert Field("a-b", "int").ddl() == "`a-b` int"
