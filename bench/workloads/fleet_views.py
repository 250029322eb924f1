"""The fleet views with 200 runs in the store (issue 44): one refresh of ``seamline watch``
(its rows: :func:`seamline.cli.watch_rows.fleet`, what the table and the TUI redraw each
second, 20 rows by default, all 200 too) and one refresh of the page's runs list
(``GET /v1/sessions`` of ``seamline serve``, through the whole ASGI application, with
its guard), beside the bare store listing they start from (``list_sessions``: the floor).

The store is filled through ``seamline.run`` (the scripted provider, one tool call and a
usage record a run, as a user's runs leave it), so each row carries what a real one does.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import seamline
from seamline.cli.watch_rows import fleet
from seamline.server.app import create_app
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted

RUNS = 200
_SCRIPT = [
    {"text": "Let me look.", "tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]},
    {"text": "Done.", "usage": {"input_tokens": 1200, "output_tokens": 80, "cost_usd": 0.001}},
]


def _fill(store_path: Path, workspace: Path, runs: int) -> None:
    async def go() -> None:
        for k in range(runs):
            result = await seamline.run(
                f"task {k}: tidy the readme", provider=scripted(_SCRIPT), store=str(store_path), workspace=workspace
            )
            if result.outcome != "completed":
                raise RuntimeError(f"run {k} ended {result.outcome}")

    asyncio.run(go())


async def _get(app: Any, path: str) -> tuple[int, bytes]:
    """One request through the ASGI application, as uvicorn would make it."""
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1:8765")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def _timed(fn: Callable[[], object], reps: int) -> list[float]:
    out: list[float] = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def run(*, quick: bool = False) -> dict[str, Any]:
    runs = 20 if quick else RUNS
    reps = 5 if quick else 30
    with tempfile.TemporaryDirectory(prefix="seamline-bench-fleet-") as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        store_path = root / "store.db"
        started = time.perf_counter()
        _fill(store_path, root / "ws", runs)
        filled = time.perf_counter() - started
        store = SQLiteStore(store_path)
        try:
            listed = store.list_sessions(limit=runs)
            if len(listed) != runs:
                raise RuntimeError(f"the store lists {len(listed)} runs, not {runs}")
            floor = _timed(lambda: store.list_sessions(limit=runs), reps)
            rows20 = _timed(lambda: fleet(store, limit=20), reps)
            rows_all = _timed(lambda: fleet(store, limit=runs), reps)
            if len(fleet(store, limit=runs)) != runs:
                raise RuntimeError("watch shows fewer rows than runs")
            app = create_app(store)
            loop = asyncio.new_event_loop()
            try:
                status, body = loop.run_until_complete(_get(app, f"/v1/sessions?limit={runs}"))
                page = json.loads(body)
                if status != 200 or len(page["sessions"]) != runs or not page["sessions"][0]["title"]:
                    raise RuntimeError(f"GET /v1/sessions answered {status} with {body[:200]!r}")
                page_default = _timed(lambda: loop.run_until_complete(_get(app, "/v1/sessions")), reps)
                page_all = _timed(lambda: loop.run_until_complete(_get(app, f"/v1/sessions?limit={runs}")), reps)
            finally:
                loop.close()
        finally:
            store.close()
    floor_ms = _ms(floor)
    result: dict[str, Any] = {
        "runs": runs,
        "reps": reps,
        "fill_s": round(filled, 1),
        "floor_list_sessions_ms": floor_ms,
        "watch_refresh_20_rows_ms": _ms(rows20),
        "watch_refresh_all_rows_ms": _ms(rows_all),
        "page_runs_list_default_ms": _ms(page_default),
        "page_runs_list_all_ms": _ms(page_all),
    }
    for key in ("watch_refresh_20_rows_ms", "watch_refresh_all_rows_ms", "page_runs_list_all_ms"):
        result[key.removesuffix("_ms") + "_vs_floor"] = round(result[key] / floor_ms, 1) if floor_ms else None
    return result
