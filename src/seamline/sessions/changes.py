"""How a reader of the store (``seamline watch``) learns that it changed, so it reads again
at once rather than on the next tick.

A PostgreSQL store notifies ``seamline_sessions`` in the transaction of every write that
opens a session or changes its status (not of each usage figure), and the reader LISTENs
on a connection of its own (:func:`listen`, :func:`notified`, also what the durable
client's wake-up uses). An SQLite store has no channel: the reader asks ``PRAGMA
data_version``, which moves when another connection commits, a few times a second. Either
way a wake-up only says when to look: a lost one costs at most the reader's interval
(figures of a running turn are seen on that tick).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

from seamline.sessions.portable_store import SessionStore
from seamline.sessions.postgres import CHANNEL
from seamline.sessions.sqlite_store import SQLiteStore

__all__ = ["CHANNEL", "StoreChanges", "listen", "notified", "open_changes"]

_LOOK_S: Final = 0.2  # how often an SQLite reader asks whether the database changed


class StoreChanges:
    """Waits out the interval (a store that cannot tell)."""

    how: str = "interval"

    def __init__(self, interval: float) -> None:
        self.interval = interval

    async def wait(self) -> bool:
        """Return when the store may have changed, at the latest after ``interval`` seconds;
        True when it said so (a notification, a new ``data_version``)."""
        await asyncio.sleep(self.interval)
        return False

    async def close(self) -> None:
        return None


class _SQLiteChanges(StoreChanges):
    how = "data_version"

    def __init__(self, store: SQLiteStore, interval: float) -> None:
        super().__init__(interval)
        self.store = store
        self.version = store.data_version()

    async def wait(self) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + self.interval
        while (left := end - loop.time()) > 0:
            await asyncio.sleep(min(_LOOK_S, left))
            now = self.store.data_version()
            if now != self.version:
                self.version = now
                return True
        return False


class _PostgresChanges(StoreChanges):
    how = "listen/notify"

    def __init__(self, conn: Any, interval: float) -> None:
        super().__init__(interval)
        self.conn = conn

    async def wait(self) -> bool:
        return await notified(self.conn, timeout=self.interval)

    async def close(self) -> None:
        await self.conn.close()


async def listen(location: str, channel: str) -> Any:
    """A PostgreSQL connection of its own (``location``: the full address) LISTENing on
    ``channel``; the postgres extra is installed wherever a PostgreSQL store is open."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(location, autocommit=True, connect_timeout=10)
    await conn.execute(f"LISTEN {channel}")
    return conn


async def notified(
    conn: Any,
    *,
    timeout: float,
    wanted: Callable[[str], bool] | None = None,
    until: asyncio.Future[Any] | None = None,
) -> bool:
    """Wait for a notification on ``conn`` (one whose payload ``wanted`` accepts), for
    ``until`` to be done, or ``timeout`` seconds; whether a notification came."""
    heard = asyncio.ensure_future(_next_notification(conn, wanted))
    try:
        waiting = {heard} if until is None else {heard, until}
        done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not heard.done():
            heard.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await heard
    return heard in done and heard.exception() is None and bool(heard.result())


async def _next_notification(conn: Any, wanted: Callable[[str], bool] | None) -> bool:
    async for note in conn.notifies():
        if wanted is None or wanted(note.payload):
            return True
    return False


async def open_changes(store: SessionStore, location: str | None, *, interval: float) -> StoreChanges:
    """The way to hear of changes to ``store`` (``location``: its full address, password
    included, for a PostgreSQL store's own listening connection)."""
    if isinstance(store, SQLiteStore) and store.path != ":memory:":
        return _SQLiteChanges(store, interval)
    if store.dialect == "postgres" and location:
        return _PostgresChanges(await listen(location, CHANNEL), interval)
    return StoreChanges(interval)
