"""sluice/storage.py: a local directory listed without pyarrow gives the same files, times and
sizes as pyarrow's listing of the same directory as a file:// URI, and the same errors."""

from __future__ import annotations

import os

import pytest

from sluice.storage import list_file_infos


@pytest.fixture
def directory(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for name, text in [
        ("b.jsonl", "1\n"),
        ("a.jsonl", "22\n"),
        ("c.csv", "333\n"),
        (".hidden.jsonl", "x"),
        ("_tmp.jsonl", "y"),
    ]:
        (d / name).write_text(text)
    (d / "sub.jsonl").mkdir()  # a directory is never a file
    os.symlink(d / "a.jsonl", d / "link.jsonl")  # a link to a file is the file
    os.symlink(tmp_path, d / "dirlink.jsonl")  # a link to a directory is not
    os.symlink(tmp_path / "gone", d / "dangling.jsonl")  # nor is a link to nothing
    return d


@pytest.mark.parametrize("suffix", ["", ".jsonl", ".csv"])
def test_a_local_directory_lists_as_pyarrow_lists_it(directory, suffix):
    local = list_file_infos(str(directory), suffix)
    assert local == list_file_infos(f"file://{directory}", suffix)
    names = [os.path.basename(f.path) for f in local]
    expected = {"": ["a.jsonl", "b.jsonl", "c.csv", "link.jsonl"], ".jsonl": ["a.jsonl", "b.jsonl", "link.jsonl"]}
    assert names == expected.get(suffix, ["c.csv"])
    assert [f.size for f in local][:1] == [os.path.getsize(directory / names[0])]
    assert all(f.mtime_ms > 0 and os.path.isabs(f.path) for f in local)


def test_a_missing_directory_or_a_file_is_refused_naming_it(directory):
    with pytest.raises(FileNotFoundError, match="input directory .*nothing.* does not exist"):
        list_file_infos(str(directory / "nothing"))
    with pytest.raises(FileNotFoundError, match="output path .*b.jsonl.* is not a directory"):
        list_file_infos(str(directory / "b.jsonl"), what="output")
    for uri in (f"file://{directory / 'nothing'}", f"file://{directory / 'b.jsonl'}"):
        with pytest.raises(FileNotFoundError):
            list_file_infos(uri)
