"""`seamline watch` reads again when the store says it changed, not on the next tick: a run
written by another process shows, finished, in a view whose interval is an hour (LISTEN/
NOTIFY on PostgreSQL, ``data_version`` on SQLite: :mod:`seamline.sessions.changes`)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("textual")

from seamline.cli.watch_app import FleetApp
from seamline.cli.watch_sources import StoreSource
from seamline.sessions.sqlite_store import open_store
from tests.cli.test_watch_app import SIZE, until
from tests.conftest import ROOT
from tests.sessions.conftest import postgres_url, store_location

__all__ = ["postgres_url", "store_location"]  # the store fixtures: SQLite and PostgreSQL
_HOUR = 3600.0


def test_a_run_of_another_process_shows_at_once(store_location: str) -> None:
    store = open_store(store_location)
    source = StoreSource(store, location=store_location, interval=_HOUR)
    app = FleetApp(source, interval=_HOUR)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: source._changes is not None, "the view to listen")
            assert app.rows == {}
            other = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "seamline", "run", "--store", store_location, "--json", "hello there",
                cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                _, err = await asyncio.wait_for(other.communicate(), timeout=120)
            finally:
                if other.returncode is None:  # pragma: no cover - only on a hang
                    other.kill()
                    await other.wait()
            assert other.returncode == 0, err
            await until(
                pilot,
                lambda: [row["status"] for row in app.rows.values()] == ["completed"],
                "the other process's run, finished, in the table",
            )
            assert source.woken >= 1  # the store said so: the hour-long tick never came

    try:
        asyncio.run(drive())
    finally:
        store.close()


def test_a_highlight_that_arrives_once_the_table_is_gone_is_ignored(tmp_path: Path) -> None:
    """The last refresh's highlight may reach the app while it closes, its table removed:
    it failed the whole `seamline watch` with NoMatches('#runs')."""
    from typing import Any, cast

    location = str(tmp_path / "s.db")
    store = open_store(location)
    source = StoreSource(store, location=location, interval=_HOUR)
    app = FleetApp(source, interval=_HOUR)

    async def drive() -> None:
        async with app.run_test(size=SIZE):
            await app.query_one("#runs").remove()
            app.on_data_table_row_highlighted(cast(Any, None))
            assert not app.query("#runs")

    try:
        asyncio.run(drive())
    finally:
        store.close()
