"""Packs of the raw log: a turn's events are written as one row, and read back one row per
event, each as it was written (its text to the character, its seq, its time to the
microsecond). Other raw rows keep a row each; a resumed session numbers on after a pack;
a journal replayed over rows already packed in the store adds nothing twice."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import seamline.sessions.sqlite_store as store_module
from seamline.sessions.journal import journal_dir
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.raw_packs import packed_rows, unpacked
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools import Toolset, tool
from tests.sessions.conftest import StoreFactory, scripted_turn

_TRICKY = 'ü "quoted", [bracketed]; 1,2 \\ back\u2028slash 🙂'


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}: {_TRICKY}"


_SCRIPT: list[dict[str, Any]] = [
    *(
        {"tool_calls": [{"name": "lookup", "arguments": {"key": k}}], "usage": {"input_tokens": 3, "output_tokens": 1}}
        for k in ("a", "b", "c")
    ),
    {"text": f"done {_TRICKY}", "usage": {"input_tokens": 5, "output_tokens": 2}},
]


class _Spy:
    """The raw rows a store was asked to queue, as they were queued."""

    def __init__(self, store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows: list[tuple[Any, ...]] = []
        queue = store.append_raw

        def append_raw(session_id: str, turn: int, direction: Any, source: str, payload: str) -> None:
            queue(session_id, turn, direction, source, payload)
            self.rows.append((turn, direction, source, payload))

        monkeypatch.setattr(store, "append_raw", append_raw)


async def _turn(store: SessionStore, prompt: str = "look them up", resume: str | None = None) -> str:
    return await scripted_turn(store, _SCRIPT, prompt, resume=resume, tools=Toolset([lookup]))


def _stored(store: SessionStore, sid: str) -> list[tuple[Any, ...]]:
    return store._query("SELECT seq, source, packed FROM raw_log WHERE skey = ? ORDER BY seq", (store._skey(sid),))


def test_a_turns_events_are_one_row_read_back_one_by_one(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    spy = _Spy(store, monkeypatch)
    sid = asyncio.run(_turn(store))
    store.flush()
    stored = _stored(store, sid)
    rows = list(store.raw_rows(sid))
    assert [(r.turn, r.direction, r.source, r.payload) for r in rows] == spy.rows  # every text as written
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    # The prompt, then the events in packs: one for the turn where the turn is committed at
    # its end (SQLite, the usage journal), else one per commit (PostgreSQL, at each figure).
    assert len(stored) == (2 if isinstance(store, SQLiteStore) else 2 + len(_SCRIPT))
    assert stored[0][1:] == ("prompt", 1)  # a prompt keeps its own row (sessions list titles by it)
    assert sum(packed for _, _, packed in stored) == len(rows)
    times = [r.created_at for r in rows]
    assert times == sorted(times) and times[-1] - times[0] < 60
    types = [json.loads(r.payload)["type"] for r in rows if r.source == "event"]
    assert types.count("tool_result") == 3 and types[-1] == "complete"
    assert store.first_prompt(sid) == "look them up"
    if isinstance(store, SQLiteStore):  # by hand, as docs/sessions.md says
        listed = store._query(
            "SELECT json_extract(e.value, '$.type') FROM raw_log r, json_each(r.payload) e"
            " WHERE r.skey = ? AND r.packed > 1 ORDER BY r.seq, e.key",
            (store._skey(sid),),
        )
        assert [t for (t,) in listed] == types


def test_times_come_back_to_the_microsecond_and_other_rows_keep_their_own() -> None:
    queued = [
        ("s", 1, 1, "in", "prompt", '"go"', 1000.0),
        ("s", 2, 1, "out", "event", '{"type":"text","text":"a,b"}', 1000.0000015),
        ("s", 3, 1, "out", "event", '{"type":"text","text":"[c]"}', 1000.25),
        ("s", 4, 1, "out", "stdout", "not json, a CLI's line", 1000.5),
        ("s", 5, 1, "out", "event", '{"type":"usage"}', 1000.75),
        ("s", 6, 2, "out", "event", '{"type":"text","text":"turn 2"}', 1001.0),
        ("s", 7, 2, "out", "event", '{"type":"complete"}', 1001.5),
        ("t", 8, 2, "out", "event", '{"type":"other session"}', 1002.0),
        ("t", 10, 2, "out", "event", '{"type":"after a gap"}', 1002.5),
    ]
    written = packed_rows(queued, lambda sid: f"key-{sid}")
    assert [(r[0], r[1], r[7]) for r in written] == [
        ("key-s", 1, 1),
        ("key-s", 2, 2),
        ("key-s", 4, 1),
        ("key-s", 5, 1),  # turn 2 starts a pack of its own
        ("key-s", 6, 2),
        ("key-t", 8, 1),
        ("key-t", 10, 1),  # not the next seq: not packed with the one before
    ]
    assert json.loads(written[1][5]) == [{"type": "text", "text": "a,b"}, {"type": "text", "text": "[c]"}]
    back = list(unpacked([r[1:] for r in written]))
    assert [row[:5] for row in back] == [q[1:6] for q in queued]
    assert all(abs(row[5] - q[6]) <= 1e-6 for row, q in zip(back, queued, strict=True))


def test_a_pack_edited_by_hand_reads_as_the_row_it_is() -> None:
    row = (2, 1, "out", "event", '[{"a":1},{"b":2}]', 5.0, 2, "6,8;0,1")  # ends not at a comma
    assert list(unpacked([row])) == [(2, 1, "out", "event", '[{"a":1},{"b":2}]', 5.0)]


def test_a_resumed_session_numbers_on_after_its_last_pack(make_store: StoreFactory) -> None:
    store = make_store()
    sid = asyncio.run(_turn(store))
    store.close()
    reopened = make_store()  # another connection, as a later process has
    try:
        asyncio.run(_turn(reopened, "second", resume=sid))
        reopened.flush()
        rows = list(reopened.raw_rows(sid))
        assert [r.seq for r in rows] == list(range(1, len(rows) + 1))  # no seq twice, none skipped
        assert [r.payload for r in rows if r.source == "prompt"] == ['"look them up"', '"second"']
        assert {r.turn for r in rows} == {1, 2}
    finally:
        reopened.close()


@pytest.fixture
def lazy_forever(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing is committed until asked: what a turn wrote waits in the journal."""
    monkeypatch.setattr(store_module, "LAZY_S", 3600.0)
    monkeypatch.setattr(store_module, "_BACKSTOP_S", 3600.0)
    yield


@pytest.mark.parametrize("lost", ["nothing", "the packs"])
def test_a_journal_replayed_over_packed_rows_adds_nothing_twice(tmp_path: Path, lazy_forever: None, lost: str) -> None:
    """A process that committed its rows and died before removing its journal: the next
    open replays the journal over rows the store holds in packs (or, had the commit not
    reached them, the rows the journal alone still holds)."""
    location = tmp_path / "s.db"
    store = SQLiteStore(location)
    folder = journal_dir(str(location))
    kept = tmp_path / "kept"

    async def run_and_keep_the_journal() -> str:
        sid = await _turn(store)
        shutil.copytree(folder, kept)  # the journal as the turn left it, before the commit
        return sid

    sid = asyncio.run(run_and_keep_the_journal())
    store.flush()
    before = [(r.seq, r.source, r.payload) for r in store.raw_rows(sid)]
    usage = [(u.turn, u.input_tokens) for u in store.usage_rows(sid)]
    store.close()
    assert len(before) > 10 and not list(folder.glob("*.journal"))
    if lost == "the packs":
        with sqlite3.connect(location) as conn:
            assert conn.execute("DELETE FROM raw_log WHERE packed > 1").rowcount > 0
    for journal in kept.glob("*.journal"):
        shutil.copy(journal, folder / journal.name)

    again = SQLiteStore(location)  # replays the copies
    try:
        assert [(r.seq, r.source, r.payload) for r in again.raw_rows(sid)] == before
        assert [(u.turn, u.input_tokens) for u in again.usage_rows(sid)] == usage
        assert again.replay_journals() == 0
    finally:
        again.close()
    assert not list(folder.glob("*.journal"))


def test_a_journal_that_begins_inside_a_pack_adds_only_what_follows(tmp_path: Path) -> None:
    """A journal file of a long turn may begin in the middle of what the store holds as one
    pack (the turn's rows went to two journal files): its rows there are in the store
    already; the ones after the pack are not."""
    location = tmp_path / "s.db"
    store = SQLiteStore(location)
    sid = asyncio.run(_turn(store))
    store.flush()
    before = [(r.seq, r.payload) for r in store.raw_rows(sid)]
    last = before[-1][0]
    assert _stored(store, sid)[-1][0] < 5 < last  # seq 5 is inside the turn's pack
    store.close()
    rows = [
        [sid, 5, 1, "out", "event", '{"type":"text","text":"already in the pack"}', 1.0],
        [sid, last + 1, 2, "out", "event", '{"type":"text","text":"new 1"}', 2.0],
        [sid, last + 2, 2, "out", "event", '{"type":"text","text":"new 2"}', 2.5],
    ]
    lines = [{"seamline_usage_journal": 2, "pid": 1, "host": "h"}, *rows]
    folder = journal_dir(str(location))
    folder.mkdir(exist_ok=True)
    (folder / "1-abcdabcdabcdabcd.journal").write_text("".join(json.dumps(x) + "\n" for x in lines))
    again = SQLiteStore(location)
    try:
        after = [(r.seq, r.payload) for r in again.raw_rows(sid)]
        assert after == [*before, (last + 1, rows[1][5]), (last + 2, rows[2][5])]
    finally:
        again.close()
