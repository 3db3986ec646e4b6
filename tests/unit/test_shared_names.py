"""Shared state files carry the checkpoint id they were uploaded for, and a restored attempt's
start finds the orphans among them: uploads of an id handed out before the attempt that the
restored checkpoint does not reference. A name without an id, a path outside the job's shared
directory and anything of a newer id are never orphans (docs/checkpoints.md, retention)."""

from __future__ import annotations

from jobmanager.checkpoint.shared_registry import orphaned
from sluice.checkpoints.shared_names import checkpoint_of, new_shared_name

SHARED = "/ck/job/shared"


def test_a_new_name_carries_its_checkpoint_id_and_is_unique():
    a, b = new_shared_name(7, ".sst"), new_shared_name(7, ".sst")
    assert a != b and a.endswith(".sst") and a.startswith("7-")
    assert checkpoint_of(f"{SHARED}/counts/{a}") == 7
    assert checkpoint_of(new_shared_name(123456, ".arrow")) == 123456


def test_names_without_an_id_carry_none():
    for name in (
        "0123456789abcdef0123456789abcdef.sst",  # written before names carried the id
        "7-xyz.sst",
        "7-0123456789abcdef0123456789abcdef",  # no suffix
        "-1-0123456789abcdef0123456789abcdef.sst",
        "7-0123456789ABCDEF0123456789ABCDEF.sst",
        "",
    ):
        assert checkpoint_of(f"{SHARED}/op/{name}") is None, name


def test_orphans_are_older_unreferenced_uploads_inside_the_shared_directory():
    restored = f"{SHARED}/counts/{new_shared_name(4, '.sst')}"  # the restored checkpoint's
    earlier = f"{SHARED}/counts/{new_shared_name(2, '.sst')}"  # an earlier upload it still references
    never_acked = f"{SHARED}/counts/{new_shared_name(5, '.sst')}"
    aborted_chain = f"{SHARED}/agg/{new_shared_name(3, '.arrow')}"
    new_attempt = f"{SHARED}/counts/{new_shared_name(9, '.sst')}"  # id >= upper: the new attempt's
    legacy = f"{SHARED}/counts/0123456789abcdef0123456789abcdef.sst"
    elsewhere = f"/ck/other-job/shared/counts/{new_shared_name(1, '.sst')}"
    escaping = f"{SHARED}/../x/{new_shared_name(1, '.sst')}"
    paths = [restored, earlier, never_acked, aborted_chain, new_attempt, legacy, elsewhere, escaping]
    kept = frozenset({restored, earlier})
    assert orphaned(paths, kept, upper=9, shared_dir=SHARED) == sorted([never_acked, aborted_chain])
    assert orphaned(paths, kept, upper=5, shared_dir=SHARED + "/") == [aborted_chain]
    assert orphaned([], kept, upper=9, shared_dir=SHARED) == []
