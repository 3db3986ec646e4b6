"""taskmanager/operators/malformed_checks.py: which columns a CSV or JSON file source makes
Spark parse in every row, which it checks for undecodable bytes, and the reader options it adds."""

from __future__ import annotations

import pytest

from taskmanager.operators.malformed_checks import READER_OPTIONS, UNDECODABLE, malformed_checks

FIELDS = [("url", "string"), ("user", "bigint"), ("ts", "timestamp"), ("note", "STRING")]


def test_csv_parses_every_column_checks_string_columns_for_undecodable_bytes_and_counts_every_field():
    checks = malformed_checks("csv", FIELDS, "__sluice_corrupt_record")
    assert checks.parsed == ("url", "user", "ts", "note")
    assert checks.undecodable == ("url", "note")  # numbers and times do not parse with U+FFFD in them
    assert checks.separator == ","
    assert dict(checks.reader_options) == {"columnPruning": "false"} == dict(READER_OPTIONS)
    assert UNDECODABLE == "\ufffd"


def test_the_users_corrupt_record_column_is_neither_parsed_nor_checked():
    checks = malformed_checks("csv", [*FIELDS, ("_corrupt", "string")], "_corrupt")
    assert "_corrupt" not in checks.parsed
    assert "_corrupt" not in checks.undecodable


@pytest.mark.parametrize(
    ("given", "separator"), [(None, ","), ("", ","), (";", ";"), ("\\t", "\t"), ("\t", "\t"), ("||", "||")]
)
def test_the_separator_joins_the_fields_of_a_row_as_spark_reads_the_option(given, separator):
    assert malformed_checks("csv", FIELDS, "c", given).separator == separator


def test_json_parses_every_column_and_adds_no_check_of_its_own():
    checks = malformed_checks("json", FIELDS, "__sluice_corrupt_record")
    assert checks.parsed == ("url", "user", "ts", "note")  # a body's df.count() reads more than the corrupt column
    assert checks.undecodable == ()  # Spark's JSON parser refuses invalid UTF-8 itself
    assert dict(checks.reader_options) == {}


@pytest.mark.parametrize("format", ["text", "parquet", "orc"])
def test_formats_without_malformed_rows_are_refused(format):
    with pytest.raises(ValueError, match=format):
        malformed_checks(format, FIELDS, "c")


def test_a_schema_of_the_corrupt_record_column_alone_is_refused():
    with pytest.raises(ValueError, match="no column besides"):
        malformed_checks("csv", [("_corrupt", "string")], "_corrupt")


def test_json_checking_the_read_columns_parses_only_the_first_column_itself():
    checks = malformed_checks("json", [("_corrupt", "string"), *FIELDS], "_corrupt", columns="read")
    assert checks.parsed == ("url",)  # Spark adds the columns the job reads; never the corrupt column alone
    assert checks.undecodable == () and dict(checks.reader_options) == {}


def test_csv_checks_every_field_whichever_columns_are_asked_for():
    assert malformed_checks("csv", FIELDS, "c", columns="read") == malformed_checks("csv", FIELDS, "c")


def test_an_unknown_choice_of_columns_is_refused():
    with pytest.raises(ValueError, match="all or read"):
        malformed_checks("json", FIELDS, "c", columns="some")
