"""The raw log and the ledger are filed by the session's storage key (its creation time,
then its id): new sessions' rows go to the end of the tables, in the order the sessions
were made, while ids stay random. A store of the schema before, and a journal written
before, keep every row and figure."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from seamline.events import Complete
from seamline.sessions.journal import journal_dir
from seamline.sessions.portable_store import SessionStore, storage_key
from seamline.sessions.schema import migration_sql
from seamline.sessions.sqlite_store import SQLiteStore, open_store
from seamline.testing import scripted
from tests.sessions.conftest import fresh_database

_BEFORE = 7  # the schema the storage keys came after


def _old_store(location: str, dialect: str) -> None:
    """A store of schema 7 with two sessions, their rows and figures, and a row and a figure
    of a session that is not in the store."""
    statements = [s for number in range(1, _BEFORE + 1) for s in migration_sql(number, dialect)]  # type: ignore[arg-type]
    data = [
        "INSERT INTO sessions (id, provider, created_at, updated_at) VALUES ('newer', 'offline', 200.5, 200.5)",
        "INSERT INTO sessions (id, provider, created_at, updated_at) VALUES ('older', 'offline', 100.25, 100.25)",
        "INSERT INTO raw_log (session_id, seq, turn, direction, source, payload, created_at) VALUES"
        " ('newer', 1, 1, 'in', 'prompt', '\"second\"', 200.5), ('newer', 2, 1, 'out', 'event', '{}', 200.6),"
        " ('older', 1, 1, 'in', 'prompt', '\"first\"', 100.25), ('ghost', 1, 1, 'in', 'prompt', '\"boo\"', 1)",
        "INSERT INTO usage_ledger (session_id, n, turn, input_tokens, output_tokens, cache_read_tokens,"
        " cache_write_tokens, cost_usd, priced, model, created_at, journal_id) VALUES"
        " ('newer', 1, 1, 10, 1, 0, 0, 0.5, 1, 'm', 200.6, 'j.1'), ('newer', 2, 1, 20, 2, 0, 0, 0.25, 1, 'm', 200.7,"
        " 'j.2'), ('older', 1, 1, 5, 1, 0, 0, NULL, 0, 'm', 100.3, NULL), ('ghost', 1, 1, 3, 0, 0, 0, NULL, 0, 'm', 1,"
        " NULL)",
    ]
    if dialect == "sqlite":
        conn = sqlite3.connect(location)
        for statement in [*statements, *data]:
            conn.execute(statement)
        conn.execute("PRAGMA application_id = 1397050700")
        conn.execute(f"PRAGMA user_version = {_BEFORE}")
        conn.commit()
        conn.close()
        return
    import psycopg

    with psycopg.connect(location, autocommit=True) as pg:
        for statement in statements:
            pg.execute(statement)
        pg.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        pg.execute(f"INSERT INTO schema_version VALUES ({_BEFORE})")
        for statement in data:
            pg.execute(statement)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_store_of_the_schema_before_keeps_every_row_and_figure(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    location = (
        str(tmp_path / "old.db") if dialect == "sqlite" else fresh_database(request.getfixturevalue("postgres_url"))
    )
    _old_store(location, dialect)
    store = open_store(location)
    try:
        assert [(r.seq, r.payload) for r in store.raw_rows("newer")] == [(1, '"second"'), (2, "{}")]
        assert [r.session_id for r in store.raw_rows("newer")] == ["newer", "newer"]
        assert store.first_prompt("older") == "first"
        assert [r.payload for r in store.raw_rows("ghost")] == ['"boo"']  # no session: kept all the same
        assert [u.input_tokens for u in store.usage_rows("newer")] == [10, 20]
        assert [u.input_tokens for u in store.usage_rows("ghost")] == [3]
        assert store.totals("ghost").input_tokens == 3
        totals = store.totals("newer")
        assert (totals.input_tokens, totals.cost_usd, totals.priced) == (30, 0.75, 2)
        assert store.totals("older").unpriced == 1
        assert [e.content for e in store.transcript("older")] == ["first"]
        keys = dict(store._query("SELECT id, skey FROM sessions"))
        assert keys == {"older": storage_key("older", 100.25), "newer": storage_key("newer", 200.5)}
        assert keys["older"] < keys["newer"]
        # what is written now goes on after the rows that were there
        store.append_raw("newer", 2, "in", "prompt", '"third"')
        store.flush()
        assert [r.seq for r in store.raw_rows("newer")] == [1, 2, 3]
        store.delete_session("newer")
        assert list(store.raw_rows("newer")) == [] and store.usage_rows("newer") == []
        assert store.totals("older").input_tokens == 5
    finally:
        store.close()


async def _run(store: SessionStore, n: int) -> str:
    provider = scripted([{"text": f"answer {n}", "usage": {"input_tokens": n, "output_tokens": 1}}])
    session = await provider.open(store=store)
    try:
        events = [e async for e in session.send(f"question {n}")]
    finally:
        await provider.close(session)
    assert isinstance(events[-1], Complete)
    return session.session_id


def test_rows_are_filed_in_the_order_their_sessions_were_made(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        made = [asyncio.run(_run(store, n)) for n in range(1, 21)]
        assert sorted(made) != made  # the ids are random (users name sessions by their heads)
        store.flush()
        filed = [r[0] for r in store._query("SELECT DISTINCT substr(skey, 15) FROM raw_log ORDER BY skey")]
        ledger = [r[0] for r in store._query("SELECT substr(skey, 15) FROM usage_ledger ORDER BY skey, n")]
        assert filed == made and ledger == made
        assert [store.totals(sid).input_tokens for sid in made] == list(range(1, 21))
    finally:
        store.close()
    # By hand, as docs/sessions.md says: join on the key.
    with sqlite3.connect(tmp_path / "s.db") as conn:
        sources = conn.execute(
            "SELECT source FROM raw_log JOIN sessions ON sessions.skey = raw_log.skey WHERE sessions.id = ?"
            " ORDER BY seq",
            (made[3],),
        ).fetchall()
    assert [s for (s,) in sources][:2] == ["prompt", "event"]


def test_a_session_journaled_before_storage_keys_gets_one_from_its_id_and_time(tmp_path: Path) -> None:
    location = tmp_path / "s.db"
    SQLiteStore(location).close()
    folder = journal_dir(str(location))
    folder.mkdir(exist_ok=True)
    record = ["s", "old-run", "scripted", None, None, None, "agent", "{}", 300.125, 300.125, 1, "h", "{}"]
    lines = [
        {"seamline_usage_journal": 2, "pid": 1, "host": "h"},
        ["old-run", 1, 1, "in", "prompt", '"hello"', 300.2],
        ["u", "abcdabcdabcdabcd.1", "old-run", 1, 1, 4, 1, 0, 0, None, 0, "m", 300.3],
        ["e", "old-run", "completed", 300.4],
    ]
    lines.insert(1, record)
    (folder / "1-abcdabcdabcdabcd.journal").write_text("".join(json.dumps(x) + "\n" for x in lines))
    store = SQLiteStore(location)
    try:
        record_now = store.get("old-run")
        assert record_now is not None and record_now.status == "completed"
        assert store._query("SELECT skey FROM sessions WHERE id = 'old-run'")[0][0] == storage_key("old-run", 300.125)
        assert [r.payload for r in store.raw_rows("old-run")] == ['"hello"']
        assert [u.input_tokens for u in store.usage_rows("old-run")] == [4]
    finally:
        store.close()
