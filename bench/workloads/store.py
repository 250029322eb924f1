"""Store: raw-log appends per second (durable: committed in batches of one model call's
rows) and the time to load a session of 10,000 events (raw log and transcript), on SQLite
and, when SEAMLINE_TEST_POSTGRES_URL names a server, on PostgreSQL."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from seamline.events import Text, ToolCall, ToolResult, encode_event
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.sqlite_store import open_store

BATCH = 5  # rows per commit: about what one model call writes


def _payloads(n: int) -> list[str]:
    events = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            events.append(ToolCall(call_id=f"c{i}", name="read_file", arguments={"path": f"f{i}.txt"}))
        elif kind == 1:
            events.append(ToolResult(call_id=f"c{i - 1}", output="x" * 200))
        else:
            events.append(Text(text="answer " * 20))
    return [encode_event(e).decode() for e in events]


def _measure(store: SessionStore, n: int) -> dict[str, float]:
    sid = uuid.uuid4().hex
    store.create_session(sid, provider="bench", model=None)
    payloads = _payloads(n)
    started = time.perf_counter()
    for i, payload in enumerate(payloads):
        store.append_raw(sid, 1 + i // 50, "out", "event", payload)
        if i % BATCH == BATCH - 1:
            store.flush()
    store.flush()
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    rows = list(store.raw_rows(sid))
    load_raw_s = time.perf_counter() - started
    started = time.perf_counter()
    entries = store.transcript(sid)  # first read derives and stores it
    derive_s = time.perf_counter() - started
    started = time.perf_counter()
    again = store.transcript(sid)
    load_transcript_s = time.perf_counter() - started
    assert len(rows) == n and len(entries) == n and len(again) == n
    return {
        "appends_per_s": n / append_s,
        "load_raw_ms": load_raw_s * 1000,
        "derive_transcript_ms": derive_s * 1000,
        "load_transcript_ms": load_transcript_s * 1000,
    }


def _run_store(location: str, n: int, reps: int) -> dict[str, Any]:
    samples: list[dict[str, float]] = []
    store = open_store(location)
    try:
        for _ in range(reps):
            samples.append(_measure(store, n))
    finally:
        store.close()
    return {k: round(statistics.median(s[k] for s in samples), 1) for k in samples[0]}


def run(*, quick: bool = False) -> dict[str, Any]:
    n = 1_000 if quick else 10_000
    reps = 1 if quick else 3
    result: dict[str, Any] = {"events": n, "rows_per_commit": BATCH}
    with tempfile.TemporaryDirectory() as tmp:
        result["sqlite"] = _run_store(str(Path(tmp) / "bench.db"), n, reps)
    url = os.environ.get("SEAMLINE_TEST_POSTGRES_URL")
    if url:
        import psycopg

        name = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        try:
            result["postgres"] = _run_store(url.rsplit("/", 1)[0] + f"/{name}", n, reps)
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE {name}")
    else:
        result["postgres"] = "skipped: set SEAMLINE_TEST_POSTGRES_URL (scripts/pg-test-server start DIR)"
    for store in ("sqlite", "postgres"):
        figures = result[store]
        if isinstance(figures, dict):
            result[f"{store}_appends_per_s"] = figures["appends_per_s"]
            result[f"{store}_load_ms_10k" if not quick else f"{store}_load_ms"] = figures["load_transcript_ms"]
    return result
