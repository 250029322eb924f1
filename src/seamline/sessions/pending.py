"""Permission requests that wait for a person, kept in the session store.

``seamline serve`` writes one row per request while it waits for an answer (table
``pending_permissions``, SQLite and PostgreSQL alike, through the store's own connection)
and removes it once the request is answered, denied, cancelled or its run ends. A server
killed outright (``kill -9``) leaves its rows; the next server on the store takes them
(:meth:`PendingPermissions.adopt`) and lists the requests again.

>>> from seamline.sessions.sqlite_store import SQLiteStore
>>> from seamline.events import PermissionRequest
>>> store = SQLiteStore(":memory:")
>>> pending = PendingPermissions(store)
>>> asked = PermissionRequest(request_id="perm-c1", call_id="c1", tool="shell", arguments={"command": "make"})
>>> pending.add("run1", "s1", {"prompt": "build"}, asked)
>>> [(r.run_id, r.request.tool) for r in pending.rows()]
[('run1', 'shell')]
>>> pending.remove("run1", "perm-c1")
>>> pending.rows()
[]
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from seamline.events import PermissionRequest, encode_event
from seamline.sessions.portable_store import SessionStore

__all__ = ["PendingPermissions", "PendingRow"]

_HOST: Final = socket.gethostname()
_COLUMNS: Final = "run_id, request_id, session_id, run, request, owner_pid, owner_host, created_at"


@dataclass(frozen=True, slots=True)
class PendingRow:
    """One stored request: its run, the run's own facts (prompt, who started it, its
    limits) and the ``permission_request`` as it was announced."""

    run_id: str
    request_id: str
    session_id: str | None
    run: dict[str, Any]
    request: PermissionRequest
    owner_pid: int | None
    owner_host: str | None
    created_at: float


class PendingPermissions:
    """The ``pending_permissions`` table of one open store (shared, not closed here)."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    def add(self, run_id: str, session_id: str | None, run: Mapping[str, Any], request: PermissionRequest) -> None:
        """Store a request that now waits, owned by this process. What the run queued for
        the store before it (its prompt, the model's tool call) is written first, so the
        row never points at a transcript that a crash would lose."""
        self.store.flush()
        with self.store._transaction():
            self.store._execute(
                f"INSERT INTO pending_permissions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (run_id, request_id) DO NOTHING",
                (
                    run_id,
                    request.request_id,
                    session_id,
                    json.dumps(dict(run), sort_keys=True),
                    encode_event(request).decode(),
                    os.getpid(),
                    _HOST,
                    time.time(),
                ),
            )

    def remove(self, run_id: str, request_id: str) -> None:
        """The request is answered (or will never be): it waits no more."""
        with self.store._transaction():
            self.store._execute(
                "DELETE FROM pending_permissions WHERE run_id = ? AND request_id = ?", (run_id, request_id)
            )

    def remove_run(self, run_id: str) -> None:
        with self.store._transaction():
            self.store._execute("DELETE FROM pending_permissions WHERE run_id = ?", (run_id,))

    def rows(self) -> list[PendingRow]:
        """Every stored request, oldest first."""
        found = self.store._query(f"SELECT {_COLUMNS} FROM pending_permissions ORDER BY created_at, request_id")
        return [_row(r) for r in found]

    def adopt(self) -> list[PendingRow]:
        """The rows whose server on this host is gone, now this process's (claimed in one
        transaction each, so two servers started together do not both take one run).
        Rows of another host are left alone: whether their server lives cannot be told
        from here."""
        taken: list[PendingRow] = []
        for row in self.rows():
            if row.owner_host != _HOST or row.owner_pid is None or _alive(row.owner_pid):
                continue
            with self.store._transaction():
                claimed = self.store._query(
                    "UPDATE pending_permissions SET owner_pid = ?, owner_host = ? WHERE run_id = ?"
                    " AND request_id = ? AND owner_pid = ? AND owner_host = ? RETURNING run_id",
                    (os.getpid(), _HOST, row.run_id, row.request_id, row.owner_pid, _HOST),
                )
            if claimed:
                taken.append(row)
        return taken


def _row(found: tuple[Any, ...]) -> PendingRow:
    run_id, request_id, session_id, run, request, pid, host, created_at = found
    return PendingRow(
        run_id=str(run_id),
        request_id=str(request_id),
        session_id=None if session_id is None else str(session_id),
        run=dict(json.loads(run)),
        request=msgspec.json.decode(request, type=PermissionRequest),
        owner_pid=None if pid is None else int(pid),
        owner_host=None if host is None else str(host),
        created_at=float(created_at),
    )


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
