"""State handles in acknowledgements (jobmanager/checkpoint/state_handles.py): only
keyed state files inside the checkpoint's own directory, only the task's operators,
key-group ranges in bounds; anything else is InvalidStateHandle naming the field."""

from __future__ import annotations

import json
import os

import pytest

from jobmanager.checkpoint.state_handles import MAX_STATE_HANDLE_BYTES, InvalidStateHandle, parse

OPS = ("1-source", "2-map")


@pytest.fixture
def chk(tmp_path):
    directory = tmp_path / "job" / "chk-3"
    (directory / "2-map").mkdir(parents=True)
    return str(directory)


def handle(path: str, op: str = "2-map", key_groups=(0, 63), **extra) -> bytes:
    keyed = {op: {"path": path, "key_groups": list(key_groups), "rows": 4, "size": 100, **extra}}
    return json.dumps({"operators": {"1-source": {"offset": 7}}, "keyed": keyed}).encode()


def check(raw: bytes, chk: str, resolve=os.path.realpath) -> dict:
    return parse(raw, chk, OPS, 128, resolve)


def test_a_handle_inside_its_checkpoint_is_kept_as_it_is(chk):
    raw = handle(f"{chk}/2-map/0.arrow")
    assert check(raw, chk) == json.loads(raw)
    assert check(b"{}", chk) == {}
    assert check(b'{"operators": {}, "keyed": {}}', chk) == {"operators": {}, "keyed": {}}


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "{chk}/../chk-2/2-map/0.arrow",  # another checkpoint of the same job
        "{chk}/../../other-job/chk-3/0.arrow",
        "{chk}-evil/0.arrow",  # a sibling whose name starts with the directory's
        "{chk}",
        "relative/0.arrow",
        "{chk}/2-map/\0.arrow",
    ],
)
def test_a_path_outside_the_checkpoint_directory_is_refused(chk, path):
    with pytest.raises(InvalidStateHandle, match=r"state_handle.keyed.2-map.path: .* is not inside the checkpoint"):
        check(handle(path.format(chk=chk)), chk)


def test_a_symlink_out_of_the_directory_is_refused(chk, tmp_path):
    secret = tmp_path / "secret.arrow"
    secret.write_bytes(b"x")
    os.symlink(secret, f"{chk}/2-map/0.arrow")
    with pytest.raises(InvalidStateHandle, match="not inside the checkpoint"):
        check(handle(f"{chk}/2-map/0.arrow"), chk)


def test_object_store_paths_fold_dot_dot():
    chk = "bucket/ckpt/job/chk-3"
    assert parse(handle(f"{chk}/2-map/0.arrow"), chk, OPS, 128, os.path.normpath)
    with pytest.raises(InvalidStateHandle, match="not inside"):
        parse(handle(f"{chk}/2-map/../../../x.arrow"), chk, OPS, 128, os.path.normpath)


@pytest.mark.parametrize(
    "raw,message",
    [
        (b"not json", "not a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "not a JSON object"),  # deeper than the parser's stack
        (b"[]", "expected an object"),
        (b'{"operators": {}, "evil": 1}', "expected an object"),
        (b'{"operators": []}', "must be objects"),
        (b'{"operators": {"9-other": {}}}', r"'9-other' is not an operator of this task"),
        (b'{"operators": {"1-source": 5}}', r"operators.1-source: expected an object"),
        (b'{"keyed": {"2-map": {"key_groups": [0, 1]}}}', "expected an object with a path"),
    ],
)
def test_malformed_handles_name_what_is_wrong(chk, raw, message):
    with pytest.raises(InvalidStateHandle, match=message):
        check(raw, chk)


@pytest.mark.parametrize("groups", [(0, 128), (-1, 3), (5, 4), (0,), ("0", 3), (True, 3)])
def test_key_groups_lie_in_bounds(chk, groups):
    with pytest.raises(InvalidStateHandle, match=r"key_groups: expected \[lo, hi\] with 0 <= lo <= hi < 128"):
        check(handle(f"{chk}/2-map/0.arrow", key_groups=groups), chk)


def test_counts_are_not_negative(chk):
    with pytest.raises(InvalidStateHandle, match="rows: expected a count >= 0"):
        check(handle(f"{chk}/2-map/0.arrow", rows=-1), chk)


def test_an_oversized_handle_is_refused_before_parsing(chk):
    with pytest.raises(InvalidStateHandle, match=f"more than {MAX_STATE_HANDLE_BYTES}"):
        check(b" " * (MAX_STATE_HANDLE_BYTES + 1), chk)
