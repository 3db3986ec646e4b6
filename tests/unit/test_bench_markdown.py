"""bench/markdown.py: the one writer of the benchmark reports' Markdown."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import markdown

FACTS = {"commit": "abc1234", "cores": 2, "cpu": "x86", "ram": "24 GiB", "python": "3.11", "java": "Java 17",
         "pyspark": "4.3.0", "load": "0.10"}  # fmt: skip


def test_a_table_renders_its_cells_aligns_its_columns_and_pads_short_rows():
    lines = markdown.table(["system", "events/s", "ratio"], [["Sluice", 1234.5, None], ["peer"]], align="lr")
    assert lines == [
        "| system | events/s | ratio |",
        "| :--- | ---: | --- |",
        "| Sluice | 1234.50 | — |",
        "| peer |  |  |",
    ]


def test_a_cell_cannot_break_its_table():
    [_h, _r, row] = markdown.table(["error"], [["a | b\nsecond line"]])
    assert row == "| a \\| b second line |"


def test_a_float_cell_follows_the_tables_spec():
    assert markdown.table(["x"], [[1234567.891]], spec=",.0f")[2] == "| 1,234,568 |"


@pytest.mark.parametrize(("header", "rows", "align"), [([], [], ""), (["a"], [[1, 2]], ""), (["a"], [], "x")])
def test_a_malformed_table_is_refused(header, rows, align):
    with pytest.raises(ValueError):
        markdown.table(header, rows, align=align)


def test_notes_close_a_section_only_when_there_are_some():
    assert markdown.notes_lines([]) == []
    assert markdown.notes_lines(["took 3 s", "one run failed"]) == ["Notes:", "", "- took 3 s", "- one run failed", ""]


def test_a_section_is_its_head_its_blocks_and_its_notes():
    text = markdown.section(
        "page views",
        "python bench/x.py --quick",
        FACTS,
        [markdown.paragraph("One run", "per system."), [], markdown.table(["a"], [[1]])],
        ["the peer ran first"],
        when=0,
    )
    assert text == (
        "## 1970-01-01 00:00 UTC — page views\n\n"
        "Command: `python bench/x.py --quick` at commit abc1234\n\n"
        "Machine: 2 cores (x86), 24 GiB RAM, Python 3.11, Java 17, pyspark 4.3.0, load average at start 0.10.\n\n"
        "One run per system.\n\n"
        "| a |\n| --- |\n| 1 |\n\n"
        "Notes:\n\n- the peer ran first\n"
    )
