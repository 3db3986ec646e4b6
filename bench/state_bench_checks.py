"""bench/state_bench.py's expected answers and output checks (pure): per user the first event within
the TTL (`expected_firsts`, vectorized, and the plain loop it is tested against), Sluice's dedup
checked exactly, the peer's dedup against Spark's own guarantee, both joins exactly against
examples/generate_clicks.py's expected pairs. A check is a `Check`: what broke which rule, or what
an output that passed satisfied."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

DEDUP_COLUMNS = ["user", "ts", "url"]
JOIN_COLUMNS = ["imp_id", "ad", "ts", "ts_right"]


def expected_firsts_plain(events: Iterable[tuple[int, int, str]], ttl_ms: int) -> set[tuple[int, int, str]]:
    """tests/integration/test_user_state.py's expected_firsts over (user, ts, url) events: per user,
    events in (ts, url) order; an event is kept when the user's last kept one is at least `ttl_ms`
    older. Plain Python: the reference `expected_firsts` is tested against."""
    by_user: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for user, ts, url in events:
        by_user[int(user)].append((int(ts), str(url)))
    kept = set()
    for user, evs in by_user.items():
        last = None
        for ts, url in sorted(evs):
            if last is None or ts >= last + ttl_ms:
                kept.add((user, ts, url))
                last = ts
    return kept


def expected_firsts(frame: Any, ttl_ms: int) -> Any:
    """`expected_firsts_plain` vectorized: `frame` has columns user, ts, url (one row per event); the
    kept events as a DataFrame (user, ts, url) sorted by (user, ts, url). Each round advances every
    user at once to its next kept event: the first event (in (ts, url) order) at or after its last
    kept one + ttl, found with one searchsorted over (user, ts) keys; as many rounds as the most
    events any user keeps."""
    import numpy as np
    import pandas as pd

    if ttl_ms <= 0:
        raise ValueError(f"ttl_ms must be > 0, got {ttl_ms}")
    f = pd.DataFrame(
        {
            "user": np.asarray(frame["user"], dtype=np.int64),
            "ts": np.asarray(frame["ts"], dtype=np.int64),
            "url": np.asarray(frame["url"]).astype(str),
        }
    )
    f = f.sort_values(["user", "ts", "url"], kind="stable", ignore_index=True)
    n = len(f)
    if n == 0:
        return f
    t = f["ts"].to_numpy() - int(f["ts"].min())
    _, code = np.unique(f["user"].to_numpy(), return_inverse=True)  # 0, 1, ... in user order (sorted)
    span = int(t.max()) + ttl_ms + 1  # a user's keys: code * span + [0, span)
    if int(code.max()) + 1 > (2**62) // span:
        raise ValueError("too many users x too wide a time span for 64-bit keys")
    key = code.astype(np.int64) * span + t
    cur = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])  # each user's first event
    kept = [cur]
    while len(cur):
        nxt = np.searchsorted(key, key[cur] + ttl_ms, side="left")
        inside = nxt < n
        nxt, cur = nxt[inside], cur[inside]
        cur = nxt[code[nxt] == code[cur]]  # beyond the user's last event: the next user's band
        kept.append(cur)
    return f.iloc[np.sort(np.concatenate(kept))].reset_index(drop=True)


@dataclass
class Check:
    """What an output check found. `problems`: (count, what) of every rule (a count above 0 breaks
    it); `summary`: what an output that passed satisfied."""

    rows: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    summary: str = ""
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.rows > 0 and not any(n for n, _what in self.problems)

    def describe(self) -> str:
        if self.error:
            return f"VIOLATION: {self.error}"
        if not self.ok:
            parts = [f"{n:,} {what}" for n, what in self.problems if n] or ["no output"]
            return "VIOLATION: " + ", ".join(parts) + (f"; e.g. {'; '.join(self.samples[:3])}" if self.samples else "")
        return self.summary


def _typed(got: Any, columns: Sequence[str], ints: Sequence[str], check: Check) -> Any:
    """`got` (a DataFrame of strings or tuples in `columns` order) with `ints` as int64; malformed lines
    (a number that does not parse, a missing field) counted in `check` and dropped."""
    import pandas as pd

    frame = got if isinstance(got, pd.DataFrame) else pd.DataFrame(list(got), columns=list(columns))
    frame = frame.copy()
    check.rows = len(frame)
    for c in ints:
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    bad = frame[list(columns)].isna().any(axis=1)
    for c in columns:
        if c not in ints:
            bad |= frame[c].astype(str) == ""  # a missing field (read with keep_default_na=False)
    n_bad = int(bad.sum())
    check.problems.append((n_bad, "malformed lines"))
    if n_bad:
        check.samples.append(f"malformed line {','.join(map(str, frame[bad].iloc[0].tolist()))}")
    frame = frame[~bad].astype({c: "int64" for c in ints})
    for c in columns:
        if c not in ints:
            frame[c] = frame[c].astype(str)
    return frame.reset_index(drop=True)


def _line(row: Any, columns: Sequence[str]) -> str:
    return ",".join(str(row[c]) for c in columns)


def _dedup_rows(got: Any, other: Any) -> tuple[Check, Any, Any, Any]:
    """A dedup check's start: `got` and `other` (user, ts, url) typed, the malformed lines and the lines
    of `got` committed twice counted; (the check, got, other, the twice-committed mask of got)."""
    c = Check()
    got = _typed(got, DEDUP_COLUMNS, ("user", "ts"), c)
    other = _typed(other, DEDUP_COLUMNS, ("user", "ts"), Check())
    dup = got.duplicated(DEDUP_COLUMNS, keep="first")
    c.problems.append((int(dup.sum()), "lines committed twice"))
    if dup.any():
        c.samples.append(f"twice: {_line(got[dup].iloc[0], DEDUP_COLUMNS)}")
    return c, got, other, dup


def check_dedup_exact(got: Any, expected: Any) -> Check:
    """Sluice's dedup output `got` (user, ts, url) against `expected` (`expected_firsts`): every
    expected event once, none missing, none unexpected, no line twice."""
    c, got, exp, _dup = _dedup_rows(got, expected)
    m = got.drop_duplicates(DEDUP_COLUMNS).merge(exp.drop_duplicates(DEDUP_COLUMNS), how="outer", indicator=True)
    unexpected, missing = m[m["_merge"] == "left_only"], m[m["_merge"] == "right_only"]
    c.problems.append((len(unexpected), "events kept that should not be"))
    c.problems.append((len(missing), "expected events missing"))
    if len(unexpected):
        c.samples.append(f"not expected: {_line(unexpected.iloc[0], DEDUP_COLUMNS)}")
    if len(missing):
        c.samples.append(f"missing: {_line(missing.iloc[0], DEDUP_COLUMNS)}")
    users = got["user"].nunique()
    c.stats = {"users": int(users), "expected": len(exp)}
    c.summary = f"exact: all {len(exp):,} expected events once ({users:,} users)"
    return c


def check_dedup_peer(got: Any, events: Any, delay_ms: int) -> Check:
    """The peer's dropDuplicatesWithinWatermark output `got` (user, ts, url) against the input
    `events` (user, ts, url): every row an input event, no row twice, every input user at least
    once, and no two rows of a user less than `delay_ms` apart (Spark's guarantee: events closer than
    the watermark delay are duplicates)."""
    import numpy as np

    c, got, ev, dup = _dedup_rows(got, events)
    got = got[~dup]
    m = got.merge(ev.drop_duplicates(DEDUP_COLUMNS), how="left", indicator=True)
    foreign = m[m["_merge"] == "left_only"]
    c.problems.append((len(foreign), "rows that are no input event"))
    if len(foreign):
        c.samples.append(f"no such input event: {_line(foreign.iloc[0], DEDUP_COLUMNS)}")
    absent = np.setdiff1d(ev["user"].unique(), got["user"].unique())
    c.problems.append((len(absent), "input users never emitted"))
    if len(absent):
        c.samples.append(f"user {int(absent[0])} never emitted")
    s = got.sort_values(["user", "ts"], kind="stable")
    u, t = s["user"].to_numpy(), s["ts"].to_numpy()
    close = (u[1:] == u[:-1]) & (t[1:] - t[:-1] < delay_ms)
    c.problems.append((int(close.sum()), f"pairs of a user's rows less than {delay_ms:,} ms apart"))
    if close.any():
        i = int(np.flatnonzero(close)[0])
        c.samples.append(f"user {int(u[i])}: ts {int(t[i])} and {int(t[i + 1])}")
    per_user = got.groupby("user").size()
    users = int(ev["user"].nunique())
    c.stats = {"users": users, "max_per_user": int(per_user.max()) if len(per_user) else 0}
    c.summary = (
        f"sane: {len(got):,} rows, each an input event, none twice, all {users:,} users, "
        f"no two of a user within {delay_ms:,} ms (at most {c.stats['max_per_user']} per user)"
    )
    return c


def check_join(got: Any, expected: collections.Counter, ads: dict[int, str]) -> Check:
    """Joined rows `got` (imp_id, ad, ts, ts_right) against `expected` (a Counter of (imp_id, impression
    ts, click ts), generate_clicks.expected_joins): the same multiset exactly, and each row's ad its
    impression's (`ads`: imp_id -> ad)."""
    c = Check()
    got = _typed(got, JOIN_COLUMNS, ("imp_id", "ts", "ts_right"), c)
    have = collections.Counter(zip(got["imp_id"].tolist(), got["ts"].tolist(), got["ts_right"].tolist(), strict=True))
    extra, missing = have - expected, expected - have
    c.problems.append((sum(extra.values()), "lines not expected (or more often than expected)"))
    c.problems.append((sum(missing.values()), "expected pairs missing"))
    if extra:
        c.samples.append(f"not expected: {next(iter(extra))}")
    if missing:
        c.samples.append(f"missing: {next(iter(missing))}")
    wrong = [(i, a) for i, a in zip(got["imp_id"].tolist(), got["ad"].tolist(), strict=True) if ads.get(i) != a]
    c.problems.append((len(wrong), "rows with another impression's ad"))
    if wrong:
        c.samples.append(f"imp_id {wrong[0][0]} with ad {wrong[0][1]}, its impression's is {ads.get(wrong[0][0])}")
    total = sum(expected.values())
    c.stats = {"expected": total}
    c.summary = f"exact: all {total:,} expected pairs, each as often as expected, ads right"
    return c
