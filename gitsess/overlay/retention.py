"""How much of its history a delta keeps: the audit log's events (the oldest go, their runs
summarised first), and where its bytes go, by kind.

`gitsess.checkpoints.keep` (200) and `.maxAge` (30 days) drop the oldest checkpoints and every
save of an epoch below the oldest kept (`overlay/history.py`); `gitsess.log.maxEvents` (200,000)
and `.maxAge` (30 days) drop the oldest audit events, their runs summarised first in
`run_summaries`. `gc` trims an unmounted session, a mounted one's daemon trims itself (op
`trim`), and what was freed is given back at once. Where the bytes go is `overlay/usage.py`'s
(`bytes_by_kind`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import apsw

from gitsess.overlay.usage import Bytes as Bytes
from gitsess.store.sqlvalue import integer


@dataclass(frozen=True)
class RunSummary:
    """What the events a trim dropped said about one run (run 0: events of no run)."""

    run_id: int
    events: int
    first_ns: int
    last_ns: int
    bytes: int
    ops: dict[str, int]


def summaries(conn: apsw.Connection) -> dict[int, RunSummary]:
    """The runs some of whose events a trim dropped, by run id."""
    out = {}
    for row in conn.execute(
        "SELECT run_id, events, first_ns, last_ns, bytes, ops FROM run_summaries"
    ):
        run_id, n, first, last, size = (int(v) for v in row[:5])
        out[run_id] = RunSummary(run_id, n, first, last, size, json.loads(str(row[5])))
    return out


def trim_log(
    conn: apsw.Connection, max_events: int, before_ns: int, keep_processes: Collection[int] = ()
) -> int:
    """Drop the events older than `before_ns` and all but the newest `max_events`, adding what
    they said about their runs to `run_summaries` first, and the processes no event is left
    of, but for `keep_processes` (a live daemon's, which it will refer to again). Returns how
    many events went."""
    rows = conn.execute("SELECT min(id), max(id) FROM events").fetchall()
    low, high = rows[0]
    if low is None:
        return 0
    assert isinstance(low, int) and isinstance(high, int)
    cut = max(high - max_events, 0)
    old = conn.execute(
        "SELECT coalesce(max(id), 0) FROM events WHERE time_ns < ?", (before_ns,)
    ).fetchall()[0][0]
    cut = max(cut, integer(old))
    if cut < low:
        return 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        runs: dict[int, list[int]] = {}
        ops: dict[int, Counter[str]] = {}
        for run_id, op, time_ns, size in conn.execute(
            "SELECT coalesce(run_id, 0), op, time_ns, coalesce(bytes, 0) FROM events WHERE id <= ?",
            (cut,),
        ):
            assert isinstance(run_id, int) and isinstance(time_ns, int) and isinstance(size, int)
            s = runs.setdefault(run_id, [0, time_ns, time_ns, 0])
            s[0] += 1
            s[1], s[2], s[3] = min(s[1], time_ns), max(s[2], time_ns), s[3] + size
            ops.setdefault(run_id, Counter())[str(op)] += 1
        for run_id, (n, first, last, size) in runs.items():
            had = conn.execute(
                "SELECT events, first_ns, last_ns, bytes, ops FROM run_summaries WHERE run_id = ?",
                (run_id,),
            ).fetchall()
            counts = ops[run_id]
            if had:
                e, f, last_had, b, o = (int(v) if isinstance(v, int) else v for v in had[0])
                assert isinstance(e, int) and isinstance(f, int) and isinstance(b, int)
                assert isinstance(last_had, int)
                n, size = n + e, size + b
                first, last = min(first, f), max(last, last_had)
                counts.update(json.loads(str(o)))
            conn.execute(
                "INSERT OR REPLACE INTO run_summaries (run_id, events, first_ns, last_ns, bytes,"
                " ops) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, n, first, last, size, json.dumps(dict(sorted(counts.items())))),
            )
        conn.execute("DELETE FROM events WHERE id <= ?", (cut,))
        conn.execute(
            "DELETE FROM processes WHERE id NOT IN"
            " (SELECT process FROM events WHERE process IS NOT NULL)"
            " AND id NOT IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(keep_processes)),),
        )
        conn.execute("COMMIT")
    except BaseException:
        if not conn.getautocommit():
            conn.execute("ROLLBACK")
        raise
    return sum(r[0] for r in runs.values())
