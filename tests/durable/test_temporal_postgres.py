"""A durable run whose store is a real PostgreSQL server: workers write the turns and
events there, the client is woken by LISTEN/NOTIFY and streams them back."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import msgspec
import pytest

from seamline.durable import RunLedger
from seamline.durable.wakeup import open_wakeup
from seamline.events import Text
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.sqlite_store import open_store
from tests.durable.conftest import DevServer, Processes
from tests.durable.pipelines import USAGE, fan_out_pipeline
from tests.sessions.conftest import fresh_database, postgres_url

__all__ = ["postgres_url"]  # the session-scoped server fixture, shared with the store tests

pytestmark = pytest.mark.real


@pytest.fixture
def pg_store(postgres_url: str) -> str:
    pytest.importorskip("psycopg")
    return fresh_database(postgres_url)


def test_a_pipeline_runs_on_a_worker_with_the_store_on_postgresql(
    pg_store: str, dev_server: DevServer, processes: Processes, tmp_path: Path, seamline_cmd: list[str]
) -> None:
    processes.env["SEAMLINE_TRACES"] = str(tmp_path / "traces")
    definition = fan_out_pipeline(tmp_path, ["a", "b"])
    processes.worker(dev_server.target, "q-pg")
    client = processes.client(
        ["--temporal", dev_server.target, "--task-queue", "q-pg", "--store", pg_store, "--workspace", str(tmp_path),
         "--pipeline", str(definition), "--json", "go"]
    )  # fmt: skip
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, err.decode()
    events = [json.loads(line) for line in out.decode().splitlines()]
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"
    texts = [e["text"] for e in events if e["type"] == "complete"]
    assert "answer of a" in texts and "answer of b" in texts and "answer of summary" in texts
    run_id = err.decode().split("seamline: run ", 1)[1].split()[0]
    kept = open_store(pg_store)
    try:
        turns = RunLedger(kept).turns(run_id)
        assert sorted(turns) == ["fan/a/1/1", "fan/b/1/1", "sum/summary/1/1"]
        assert all(t["status"] == "finished" and t["starts"] == 1 for t in turns.values())
        assert RunLedger(kept).spent_usd(run_id) == pytest.approx(3 * USAGE["cost_usd"])
        assert RunLedger(kept).report(run_id) is not None
    finally:
        kept.close()
    verify = subprocess.run(
        [*seamline_cmd, "trace", "verify", run_id, "--store", pg_store],
        capture_output=True, text=True, env=processes.env, timeout=60,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "head in store    yes" in verify.stdout


def test_the_client_is_woken_by_a_notification_when_a_worker_writes_its_run(pg_store: str) -> None:
    async def scenario() -> tuple[str, bool, bool]:
        listening = open_store(pg_store)
        writer = open_store(pg_store)  # another connection, as a worker's
        wakeup = await open_wakeup(listening, pg_store, "mine", poll_s=0.05)
        try:
            wakeup.poll_s = 600.0  # a test that waited this long fails by its timeout, not by chance
            never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            RunLedger(writer).publish("mine", "fan/a/1/1", 1, Text(text="hello"))
            woken = await asyncio.wait_for(wakeup.wait(never), timeout=120)
            # Another run's events do not wake this client; its own do, after them.
            RunLedger(writer).publish("other", "fan/a/1/1", 1, Text(text="not yours"))
            RunLedger(writer).publish("mine", "fan/a/1/1", 1, Text(text="again"))
            woken_again = await asyncio.wait_for(wakeup.wait(never), timeout=120)
            return wakeup.how, woken, woken_again
        finally:
            await wakeup.close()
            listening.close()
            writer.close()

    how, woken, woken_again = asyncio.run(scenario())
    assert (how, woken, woken_again) == ("listen/notify", True, True)
    kept = open_store(pg_store)
    try:
        rows = RunLedger(kept).events_after("mine", 0)
        assert [msgspec.json.decode(e)["text"] for _, _, e in rows] == ["hello", "again"]
    finally:
        kept.close()


def test_a_sqlite_store_is_polled(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, bool]:
        store = open_store(tmp_path / "s.db")
        wakeup = await open_wakeup(store, str(tmp_path / "s.db"), "r", poll_s=0.01)
        try:
            never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            return wakeup.how, await wakeup.wait(never)
        finally:
            await wakeup.close()
            store.close()

    assert asyncio.run(scenario()) == ("polling", False)


def test_event_ids_of_a_run_grow_in_commit_order_on_postgresql(pg_store: str) -> None:
    # PostgreSQL hands out ids at insert: a write that commits later must not carry a
    # smaller id than one a reader has already seen, or the reader would skip it.
    first, second, reader = open_store(pg_store), open_store(pg_store), open_store(pg_store)
    # Ledgers first: making one creates its tables and index, which waits for open writes.
    writing, racing, reading = RunLedger(first), RunLedger(second), RunLedger(reader)
    try:
        with first._transaction():
            writing.publish("r", "fan/a/1/1", 1, Text(text="one"))  # not committed yet
            later = threading.Thread(target=racing.publish, args=("r", "fan/b/1/1", 1, Text(text="two")), daemon=True)
            later.start()
            deadline = time.monotonic() + 60
            while not _waiting_on_a_lock(reader):  # the second writer waits for the first to commit
                assert later.is_alive(), "the second write did not wait for the first"
                assert time.monotonic() < deadline, "the second write never waited"
                time.sleep(0.02)  # polling the server's view of its sessions, not waiting for a result
            assert reading.events_after("r", 0) == []
        later.join(timeout=60)
        rows = reading.events_after("r", 0)
        assert [msgspec.json.decode(e)["text"] for _, _, e in rows] == ["one", "two"]
        assert rows[0][0] < rows[1][0]
    finally:
        for store in (first, second, reader):
            store.close()


def _waiting_on_a_lock(store: SessionStore) -> bool:
    rows = store._query(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    return int(rows[0][0]) > 0


def test_opening_a_ledger_does_not_wait_for_a_write_in_progress(pg_store: str) -> None:
    writer, other = open_store(pg_store), open_store(pg_store)
    try:
        RunLedger(writer)  # the tables exist from here on
        with writer._transaction():
            RunLedger(writer).publish("r", "fan/a/1/1", 1, Text(text="one"))  # a worker mid-write
            opening = threading.Thread(target=RunLedger, args=(other,), daemon=True)
            opening.start()
            opening.join(timeout=30)
            blocked = opening.is_alive()
        opening.join(timeout=60)
        assert not blocked, "opening a ledger waited for another connection's write to commit"
    finally:
        writer.close()
        other.close()
