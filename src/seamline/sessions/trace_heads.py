"""The store's side of trace verification: each run's head hash and record count.

A trace's hash chain proves that no record was changed *within* the file, but someone
who rewrites the whole file can chain new records from the start. The head the writer
reached is therefore also kept in the session store (table ``trace_heads``), and
``trace verify`` compares the file's head with it.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from seamline.sessions.portable_store import SessionStore

__all__ = ["TraceHead", "anchor_head", "anchored_head"]


class TraceHead(NamedTuple):
    head_hash: str
    records: int


def anchor_head(store: SessionStore, run_id: str, head_hash: str, records: int) -> None:
    """Keep (or move forward) the head of ``run_id``'s trace."""
    store._execute(
        "INSERT INTO trace_heads (run_id, head_hash, records, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (run_id) DO UPDATE SET head_hash = excluded.head_hash, records = excluded.records, "
        "updated_at = excluded.updated_at",
        (run_id, head_hash, records, time.time()),
    )


def anchored_head(store: SessionStore, run_id: str) -> TraceHead | None:
    """The head kept for ``run_id``, or ``None`` when the store holds none."""
    rows = store._query("SELECT head_hash, records FROM trace_heads WHERE run_id = ?", (run_id,))
    return TraceHead(str(rows[0][0]), int(rows[0][1])) if rows else None
