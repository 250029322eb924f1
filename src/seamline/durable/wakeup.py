"""How the submitting client learns that workers wrote new events of its run.

A PostgreSQL store notifies (``NOTIFY seamline_durable_events, RUN_ID``) in the
transaction that writes a run's events; the client LISTENs on its own connection and
reads the store once woken. SQLite has no such channel: the client polls it. Either way
the store stays the only source of events; a wake-up only says when to look, so a lost
notification costs at most the fallback wait, never an event.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from seamline.sessions.changes import listen, notified
from seamline.sessions.portable_store import SessionStore

__all__ = ["CHANNEL", "StoreWakeup", "notify_sql", "open_wakeup"]

CHANNEL: Final = "seamline_durable_events"
_FALLBACK_S: Final = 1.0  # a PostgreSQL client still looks this often, in case a notification is lost


def notify_sql(store: SessionStore) -> str | None:
    """The statement that wakes listeners of a run (its id as the one parameter), or None
    where the store has no notification channel."""
    return f"SELECT pg_notify('{CHANNEL}', ?)" if store.dialect == "postgres" else None


class StoreWakeup:
    """Waits ``poll_s`` between looks at the store (SQLite)."""

    how: str = "polling"

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s

    async def wait(self, until: asyncio.Future[Any]) -> bool:
        """Return once there may be new events or ``until`` is done; True when woken by a
        notification (never, here)."""
        await asyncio.wait({until}, timeout=self.poll_s)
        return False

    async def close(self) -> None:
        return None


class _PostgresWakeup(StoreWakeup):
    """LISTENs on the store's database for notifications about one run."""

    how = "listen/notify"

    def __init__(self, conn: Any, run_id: str) -> None:
        super().__init__(_FALLBACK_S)
        self.conn = conn
        self.run_id = run_id

    async def wait(self, until: asyncio.Future[Any]) -> bool:
        return await notified(
            self.conn, timeout=self.poll_s, wanted=lambda payload: payload == self.run_id, until=until
        )

    async def close(self) -> None:
        await self.conn.close()


async def open_wakeup(store: SessionStore, url: str, run_id: str, *, poll_s: float) -> StoreWakeup:
    """LISTEN where the store is PostgreSQL (``url`` is its full location), else poll."""
    if store.dialect != "postgres":
        return StoreWakeup(poll_s)
    return _PostgresWakeup(await listen(url, CHANNEL), run_id)
