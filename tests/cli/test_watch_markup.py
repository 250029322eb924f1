"""`seamline watch` shows a run's title and the other text it did not write itself as
text, never as Rich markup: `fix [bug] in parser` showed as `fix  in parser` (the bracketed
word taken for a style), and `[red]` in a branch or a diff heading would have styled it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable

from seamline.cli.watch_app import FleetApp
from seamline.cli.watch_sources import StoreSource
from seamline.sessions.sqlite_store import open_store
from tests.cli.test_watch_app import until

TITLE = "fix [bug] in [b]parser[/b] and [red]x"


def test_a_title_with_brackets_is_shown_as_written(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "done"}]))
    made = subprocess.run(
        [sys.executable, "-m", "seamline", "run", "--store", str(store_path), "-p", "scripted",
         "-o", f"script={script}", TITLE],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    store = open_store(store_path, read_only=True)

    async def drive() -> list[str]:
        app = FleetApp(StoreSource(store, location=str(store_path), interval=0.2), interval=0.2)
        async with app.run_test(size=(400, 20)) as pilot:
            table = app.query_one(DataTable)
            await until(pilot, lambda: table.row_count == 1, "the run in the table")
            await pilot.pause(0.2)
            return [table.render_line(y).text for y in range(table.row_count + 1)]

    try:
        lines = asyncio.run(drive())
    finally:
        store.close()
    assert any(TITLE in line for line in lines), lines
