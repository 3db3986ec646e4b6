"""Reading a file sink's committed output: the names FileSinkWriter commits sort in commit
order (across a restore too), `sluice.read_output` replays them or keeps the last line of
each key, and `sluice output` prints the same."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pyarrow as pa
import pytest

from sluice.cli.main import main
from sluice.graph import OperatorKind
from sluice.output import committed_parts, read_output
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.registry import make_operator
from taskmanager.operators.sinks import FileSinkWriter
from taskmanager.spark_engine import Batch

JOB = "c0ffee00" + "0" * 24
COMMITTED = re.compile(r"part-(\d{12})-(\d{5})-c0ffee00-[0-9a-f]{6}\.csv")


def writer(out, subtask: int = 0, restored: int = 0, checkpointing: bool = True) -> FileSinkWriter:
    ctx = OperatorContext("sink", subtask, 2, JOB, restored, checkpointing)
    op = make_operator(OperatorKind.SINK_FILE, {"path": str(out), "columns": ["k", "v"]}, ctx)
    assert isinstance(op, FileSinkWriter)
    return op


def rows(*kv: tuple[str, int]) -> Batch:
    return Batch(engine=None, table=pa.table({"k": [k for k, _ in kv], "v": pa.array([v for _, v in kv], pa.int64())}))


def write_parts(directory, parts: dict[str, str]) -> None:
    directory.mkdir(exist_ok=True)
    for name, text in parts.items():
        (directory / name).write_text(text)


# -- names -----------------------------------------------------------------------------------------
def test_committed_names_carry_the_checkpoint_and_sort_in_commit_order_across_a_restore(tmp_path):
    out = tmp_path / "out"
    a = writer(out)
    a.process(rows(("x", 1), ("y", 10)))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    a.process(rows(("x", 2)))
    a.snapshot(2)  # checkpoint 2 is aborted; its part commits with 3
    a.process(rows(("y", -5)))  # a sum may go down: the last value counts, not the largest
    state = a.snapshot(3)  # 3 completes, the TaskManager dies before the rename
    other = writer(out, subtask=1)
    other.process(rows(("z", 7)))
    other.snapshot(3)
    other.notify_checkpoint_complete(3)

    b = writer(out, restored=3)  # the next attempt restores from checkpoint 3
    b.restore(OperatorSnapshot(inline=state.inline))  # commits 2 and 3, which the crash left pending
    b.process(rows(("x", 3), ("y", -7)))
    b.snapshot(5)
    b.notify_checkpoint_complete(5)

    names = [p.split("/")[-1] for p in committed_parts(str(out))]
    assert all(COMMITTED.fullmatch(n) for n in names), names
    assert [(int(m[1]), int(m[2])) for m in map(COMMITTED.fullmatch, names) if m] == [
        (1, 0),
        (2, 0),
        (3, 0),
        (3, 1),
        (5, 0),
    ]
    stream = read_output(str(out), columns=["k", "v"])
    assert list(zip(stream.k, stream.v, strict=True)) == [
        ("x", 1),
        ("y", 10),
        ("x", 2),
        ("y", -5),
        ("z", 7),
        ("x", 3),
        ("y", -7),
    ]
    final = read_output(str(out), final=True, columns=["k", "v"])
    assert dict(zip(final.k, final.v, strict=True)) == {"x": 3, "y": -7, "z": 7}


def test_without_checkpointing_a_part_commits_at_the_end_of_the_input_as_checkpoint_zero(tmp_path):
    out = tmp_path / "out"
    op = writer(out, subtask=3, checkpointing=False)
    op.process(rows(("x", 1)))
    assert committed_parts(str(out)) == []
    op.end_input()
    (name,) = [p.split("/")[-1] for p in committed_parts(str(out))]
    match = COMMITTED.fullmatch(name)
    assert match and (match[1], match[2]) == ("000000000000", "00003")


# -- read_output -----------------------------------------------------------------------------------
def crafted(tmp_path):
    out = tmp_path / "out"
    write_parts(
        out,
        {
            "part-000000000001-00000-c0ffee00-aaaaaa.csv": "/a,ios,1\n/b,web,1\n",
            "part-000000000001-00001-c0ffee00-bbbbbb.csv": '"/c,d",ios,4\n',
            "part-000000000002-00000-c0ffee00-aaaaaa.csv": "/a,ios,3\n/a,web,2\n/b,web,-2\n",
            "part-000000000003-00001-c0ffee00-cccccc.csv": '"/c,d",ios,\n',
            ".part-0-c0ffee00-dddddd-000000.inprogress": "/a,ios,99\n",
            "_SUCCESS": "",
        },
    )
    return out


def values(frame) -> list[tuple]:
    """The rows of a DataFrame as tuples, pandas' NA as None."""
    import pandas as pd

    return [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]


def test_the_update_stream_is_every_visible_line_in_file_name_order(tmp_path):
    out = crafted(tmp_path)
    frame = read_output(str(out))
    assert list(frame.columns) == ["_c0", "_c1", "_c2"]
    assert values(frame) == [
        ("/a", "ios", 1),
        ("/b", "web", 1),
        ("/c,d", "ios", 4),
        ("/a", "ios", 3),
        ("/a", "web", 2),
        ("/b", "web", -2),
        ("/c,d", "ios", None),
    ]
    assert str(frame["_c2"].dtype) == "Int64"  # an empty field is a null, the column stays integer


def test_final_keeps_the_last_line_of_each_key(tmp_path):
    out = crafted(tmp_path)
    by_first = read_output(str(out), final=True, columns=["url", "device", "n"])
    assert list(by_first.columns) == ["url", "device", "n"]
    assert values(by_first) == [("/a", "web", 2), ("/b", "web", -2), ("/c,d", "ios", None)]
    by_both = read_output(str(out), final=True, key=["url", "device"], columns=["url", "device", "n"])
    assert values(by_both) == [("/a", "ios", 3), ("/a", "web", 2), ("/b", "web", -2), ("/c,d", "ios", None)]
    as_text = read_output(str(out), final=True, key="_c0", dtype=str)
    assert values(as_text) == [("/a", "web", "2"), ("/b", "web", "-2"), ("/c,d", "ios", None)]


def test_bad_arguments_and_missing_or_empty_directories(tmp_path):
    out = crafted(tmp_path)
    with pytest.raises(ValueError, match="have 3 fields; columns names 2"):
        read_output(str(out), columns=["url", "n"])
    with pytest.raises(ValueError, match="key: no column nope"):
        read_output(str(out), final=True, key="nope")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_output(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    empty = read_output(str(tmp_path / "empty"), final=True, columns=["url", "n"])
    assert list(empty.columns) == ["url", "n"] and len(empty) == 0


def test_importing_sluice_stays_light_and_exports_read_output():
    code = (
        "import sys, sluice; assert 'pandas' not in sys.modules and 'pyarrow' not in sys.modules;"
        "from sluice import read_output; import sluice.output; assert read_output is sluice.output.read_output"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- sluice output ---------------------------------------------------------------------------------
def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["output", *args])
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


def test_sluice_output_prints_the_stream_or_the_final_values(tmp_path, capsys):
    out = str(crafted(tmp_path))
    code, text, _ = run_cli(capsys, out)
    assert code == 0
    lines = ["/a,ios,1", "/b,web,1", '"/c,d",ios,4', "/a,ios,3", "/a,web,2", "/b,web,-2", '"/c,d",ios,']
    assert text.splitlines() == lines  # the committed text as it is
    code, text, _ = run_cli(capsys, out, "--final", "--key", "_c0,_c1")
    assert text.splitlines() == ["/a,ios,3", "/a,web,2", "/b,web,-2", '"/c,d",ios,']
    code, text, _ = run_cli(capsys, out, "--final", "--format", "json", "--columns", "url, device, n")
    assert [json.loads(line) for line in text.splitlines()] == [
        {"url": "/a", "device": "web", "n": 2},
        {"url": "/b", "device": "web", "n": -2},
        {"url": "/c,d", "device": "ios", "n": None},
    ]


def test_sluice_output_reports_errors_with_exit_code_1(tmp_path, capsys):
    code, text, err = run_cli(capsys, str(tmp_path / "missing"))
    assert code == 1 and text == "" and "does not exist" in err
    code, _, err = run_cli(capsys, str(crafted(tmp_path)), "--final", "--key", "url")
    assert code == 1 and "key: no column url" in err
