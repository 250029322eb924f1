"""A long-lived process (``seamline serve``, a worker) opens sessions without end: the store
must not keep something in memory for every session it ever saw. A closed session's next
raw-log and ledger numbers are dropped and read again from the store if it goes on."""

from __future__ import annotations

import asyncio

from seamline.sessions.portable_store import SessionStore
from tests.sessions.conftest import StoreFactory, scripted_turn


async def _one_turn(store: SessionStore, prompt: str, resume: str | None = None) -> str:
    script = [{"text": f"re {prompt}", "usage": {"input_tokens": 2, "output_tokens": 1}}]
    return await scripted_turn(store, script, prompt, resume=resume)


def test_closed_sessions_leave_no_numbers_behind_and_go_on_where_they_were(make_store: StoreFactory) -> None:
    store = make_store()
    ids = [asyncio.run(_one_turn(store, f"run {k}")) for k in range(30)]
    store.flush()
    for sid in ids:  # what serve or `sessions list` reads of them is not kept either
        assert store.totals(sid).input_tokens == 2 and store.first_prompt(sid)
    assert store._next_seq == {} and store._next_usage == {}  # nothing per closed session
    # a closed session's storage key waits for the write of its last rows, no longer
    assert store._skeys == {} and len(store._closed_skeys) <= 1
    # A closed session that goes on in the same process (on SQLite, before its lazy commit)
    # numbers its rows and figures after the ones it has: a number taken twice would fail
    # the commit (both are primary keys).
    asyncio.run(_one_turn(store, "again", resume=ids[0]))
    asyncio.run(_one_turn(store, "and again", resume=ids[0]))
    seqs = [row.seq for row in store.raw_rows(ids[0])]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 6
    assert [u.turn for u in store.usage_rows(ids[0])] == [1, 2, 3]
    assert store.totals(ids[0]).input_tokens == 6
    store.close()
    again = make_store()
    assert [u.turn for u in again.usage_rows(ids[0])] == [1, 2, 3]
    assert [row.seq for row in again.raw_rows(ids[0])] == seqs
