"""The SQLite store's usage journal (seamline.sessions.journal): a figure reported is never
lost nor counted twice, whoever replays the journal, however often, whenever it is killed.

Every crash here is a real SIGKILL of a real child process; what the child printed before
it died is compared with the store's ledger after the store is opened again."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.errors import StorageFailure
from seamline.sessions.journal import journal_dir
from seamline.sessions.sqlite_store import JOURNAL_BYTES, SQLiteStore, open_store

FIGURES = 600

# A child that records FIGURES usage figures in one session (journaled, never committed: the
# turn never ends), prints the session id, then is killed with SIGKILL.
_DIE_WITH_A_JOURNAL = """
import asyncio, os, signal, sys
from seamline.events import Usage
from seamline.sessions.sqlite_store import SQLiteStore
store = SQLiteStore(sys.argv[1])
store.create_session("s1", provider="p", model=None)
async def go():
    for i in range(1, int(sys.argv[2]) + 1):
        await store.record_usage_grouped("s1", 1, Usage(input_tokens=i, output_tokens=1, cost_usd=i / 1000))
        store._background = True  # no commit of its own: every figure stays in the journal
asyncio.run(go())
print("journaled", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

# A child that opens the store (which replays the journals) and stops at ``sys.argv[2]``:
# "mid" after half the figures are inserted in the replay's transaction, "committed" once
# the transaction is committed and before the journal is removed; it waits there to be killed.
_REPLAY_AND_STOP = """
import sys, time
from pathlib import Path
import seamline.sessions.journal as journal
import seamline.sessions.sqlite_store as store_module
where, stop = sys.argv[1], sys.argv[2]
inserted = 0
original_execute = store_module.SQLiteStore._execute
def counting_execute(self, sql, params=()):
    global inserted
    original_execute(self, sql, params)
    if sql.startswith("INSERT INTO usage_ledger"):
        inserted += 1
        if stop == "mid" and inserted == int(sys.argv[3]) // 2:
            print("mid", flush=True)
            time.sleep(600)
store_module.SQLiteStore._execute = counting_execute
original_unlink = Path.unlink
def stopping_unlink(self, *args, **kwargs):
    if stop == "committed" and self.name.endswith(".journal"):
        print("committed", flush=True)
        time.sleep(600)
    original_unlink(self, *args, **kwargs)
Path.unlink = stopping_unlink
store_module.SQLiteStore(where)
print("done", flush=True)
"""

# A child that opens the store once a start file appears and prints how many figures its
# replay added.
_REPLAY_ON_SIGNAL = """
import os, sys, time
from seamline.sessions.sqlite_store import SQLiteStore
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
store = SQLiteStore(sys.argv[1])
print(store.replay_journals(), flush=True)
store.close()
"""


def _python(code: str, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _dead_journal(location: Path, env: dict[str, str], figures: int = FIGURES) -> Path:
    """A store whose session has ``figures`` figures in the journal of a SIGKILLed process."""
    child = _python(_DIE_WITH_A_JOURNAL, str(location), str(figures), env=env)
    out, err = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, err
    assert out.strip() == "journaled"
    journals = list(journal_dir(str(location)).glob("*.journal"))
    assert len(journals) == 1
    return journals[0]


def _ledger(location: Path) -> list[int]:
    store = SQLiteStore(location)
    try:
        return [u.input_tokens for u in store.usage_rows("s1")]
    finally:
        store.close()


def _committed_only(location: Path) -> list[int]:
    """The ledger as committed, journals aside (a plain connection, nothing replayed)."""
    import sqlite3

    with sqlite3.connect(location) as conn:
        return [
            r[0] for r in conn.execute("SELECT input_tokens FROM usage_ledger WHERE substr(skey, 15) = 's1' ORDER BY n")
        ]


def test_the_journal_of_a_killed_run_is_replayed_on_open(tmp_path: Path, cli_env: dict[str, str]) -> None:
    location = tmp_path / "s.db"
    journal = _dead_journal(location, cli_env)
    assert _committed_only(location) == []  # nothing was committed: the figures are in the journal only
    assert _ledger(location) == list(range(1, FIGURES + 1))
    assert not journal.exists()  # replayed, then removed
    assert _committed_only(location) == list(range(1, FIGURES + 1))


@pytest.mark.parametrize("stop", ["mid", "committed"])
def test_sigkill_while_the_journal_is_replayed(tmp_path: Path, cli_env: dict[str, str], stop: str) -> None:
    location = tmp_path / "s.db"
    journal = _dead_journal(location, cli_env)
    child = _python(_REPLAY_AND_STOP, str(location), stop, str(FIGURES), env=cli_env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == stop
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert journal.exists()  # killed before it could remove the journal
    assert _committed_only(location) == ([] if stop == "mid" else list(range(1, FIGURES + 1)))
    assert _ledger(location) == list(range(1, FIGURES + 1))  # the next open replays: each figure once
    assert not journal.exists()
    assert _committed_only(location) == list(range(1, FIGURES + 1))


def test_two_processes_replaying_the_same_journal_count_it_once(tmp_path: Path, cli_env: dict[str, str]) -> None:
    location = tmp_path / "s.db"
    journal = _dead_journal(location, cli_env)
    # The same journal under a second name: a replayer that the first one's lock cannot stop
    # (the unique figure ids alone keep the count).
    shutil.copy(journal, journal.with_name("copy-" + journal.name))
    go = tmp_path / "go"
    children = [_python(_REPLAY_ON_SIGNAL, str(location), str(go), env=cli_env) for _ in range(2)]
    go.touch()
    outs = [c.communicate(timeout=120) for c in children]
    assert [c.returncode for c in children] == [0, 0], outs
    assert _committed_only(location) == list(range(1, FIGURES + 1))
    assert not list(journal_dir(str(location)).glob("*.journal"))


def test_replaying_again_adds_nothing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    location = tmp_path / "s.db"
    journal = _dead_journal(location, cli_env)
    kept = journal.read_bytes()
    assert _ledger(location) == list(range(1, FIGURES + 1))
    journal.write_bytes(kept)  # as if the replay was killed after its commit, before the removal
    store = SQLiteStore(location)
    try:
        assert store.replay_journals() == 0  # the open replayed it already, adding nothing
        assert [u.input_tokens for u in store.usage_rows("s1")] == list(range(1, FIGURES + 1))
    finally:
        store.close()


def test_a_torn_last_record_is_ignored(tmp_path: Path, cli_env: dict[str, str]) -> None:
    location = tmp_path / "s.db"
    journal = _dead_journal(location, cli_env, figures=5)
    data = journal.read_bytes()
    journal.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 20])  # the last record cut after 19 bytes
    assert _ledger(location) == [1, 2, 3, 4]
    assert not journal.exists()


def test_a_damaged_record_before_the_last_is_refused(tmp_path: Path, cli_env: dict[str, str]) -> None:
    location = tmp_path / "s.db"
    journal = _dead_journal(location, cli_env, figures=5)
    lines = journal.read_bytes().split(b"\n")
    lines[2] = lines[2][:10]
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(StorageFailure, match="damaged at line 3"):
        SQLiteStore(location)
    assert journal.exists()  # kept, for whoever repairs it


def test_a_journal_of_another_format_is_refused_not_miscounted(tmp_path: Path, cli_env: dict[str, str]) -> None:
    location = tmp_path / "s.db"
    journal = _dead_journal(location, cli_env, figures=3)
    lines = journal.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    header["seamline_usage_journal"] = 0  # an older format
    journal.write_bytes(b"\n".join([json.dumps(header).encode(), *lines[1:]]))
    with pytest.raises(StorageFailure, match="not of format 2 \\(found 0\\)"):
        SQLiteStore(location)
    assert journal.exists()
    assert _committed_only(location) == []
    journal.rename(tmp_path / "aside.journal")  # the remedy the message names
    assert _ledger(location) == []


def test_a_reader_sees_the_figures_of_a_live_journal(tmp_path: Path) -> None:
    import asyncio

    from seamline.events import Usage

    location = tmp_path / "s.db"
    owner = SQLiteStore(location)
    reader = SQLiteStore(location)
    owner.create_session("s1", provider="p", model=None)

    async def go() -> list[tuple[list[int], float]]:
        seen = []
        for i in (1, 2, 3):
            await owner.record_usage_grouped("s1", 1, Usage(input_tokens=i, cost_usd=0.5, priced=True))
            seen.append(([u.input_tokens for u in reader.usage_rows("s1")], reader.totals("s1").cost_usd))
        await owner.finish_turn_grouped("s1", "completed")
        seen.append(([u.input_tokens for u in reader.usage_rows("s1")], reader.totals("s1").cost_usd))
        return seen

    try:
        seen = asyncio.run(go())
        assert seen == [([1], 0.5), ([1, 2], 1.0), ([1, 2, 3], 1.5), ([1, 2, 3], 1.5)]
    finally:
        owner.close()
        reader.close()
    assert _committed_only(location) == [1, 2, 3]  # the turn's end reached the store, at the latest on close
    assert not list(journal_dir(str(location)).glob("*.journal"))  # all in the ledger: nothing left


# Concurrent runs on one store (on SQLite their commits go through the writer thread), each
# printing every usage figure it receives; killed mid-run by the parent.
_CONCURRENT_RUNS = """
import asyncio, json, sys
import seamline.sessions.sqlite_store as store_module
from seamline.events import Session, Usage
from seamline.sessions.sqlite_store import open_store
# A small journal bound: the runs keep waiting for commits together, so their group commits
# go to the writer thread (its own path, killed mid-batch), not only lazy commits on the loop.
store_module.JOURNAL_BYTES = 4096
from seamline.testing import scripted
from seamline.tools import Toolset, tool

@tool
async def lookup(key: str) -> str:
    \"\"\"Look a key up.\"\"\"
    return key

store = open_store(sys.argv[1])
sqlite = hasattr(store, "_writer")
steps = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}], "usage": {"input_tokens": i, "output_tokens": 1},
     "delay": 0.001}
    for i in range(1, 2001)
]

async def one() -> None:
    session = await scripted(steps).open(store=store, tools=Toolset([lookup]))
    async for event in session.send("go", max_steps=5000):
        if isinstance(event, Usage):
            print(json.dumps([session.session_id, event.input_tokens, not sqlite or store._writer is not None]), flush=True)

async def main() -> None:
    await asyncio.gather(*(one() for _ in range(12)))

asyncio.run(main())
"""


def test_sigkill_mid_batch_of_concurrent_runs_loses_and_doubles_nothing(
    store_location: str, cli_env: dict[str, str]
) -> None:
    """SQLite: figures in the journal, commits shared on the writer thread; PostgreSQL: a
    commit per figure. Either way the ledger after the crash holds what was printed, once."""
    child = _python(_CONCURRENT_RUNS, store_location, env=cli_env)
    reported: dict[str, list[int]] = {}
    writer_used = False
    try:
        assert child.stdout is not None
        for count, line in enumerate(child.stdout, start=1):
            sid, tokens, writer = json.loads(line)
            reported.setdefault(sid, []).append(tokens)
            writer_used = writer_used or writer
            if count == 1500:  # 125 figures a run: past many group commits, hundreds to go
                os.killpg(child.pid, signal.SIGKILL)
                break
        child.wait(timeout=30)
        for line in child.stdout.read().splitlines():  # printed before it died
            if line.startswith("[") and line.endswith("]"):
                sid, tokens, _ = json.loads(line)
                reported.setdefault(sid, []).append(tokens)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert writer_used, "the runs never shared a commit on the writer thread"
    assert len(reported) == 12
    store = open_store(store_location)
    try:
        for sid, figures in reported.items():
            assert figures == list(range(1, len(figures) + 1))
            stored = [u.input_tokens for u in store.usage_rows(sid)]
            # every figure reported is there, once; at most the ones journaled but not yet printed follow
            assert stored[: len(figures)] == figures, sid
            assert stored == list(range(1, len(stored) + 1)), "a figure counted twice or out of order"
            assert len(stored) < 2000
            assert store.totals(sid, include_descendants=False).input_tokens == sum(stored)
            assert store.get(sid) is not None and store.get(sid).status == "interrupted"  # type: ignore[union-attr]
            payloads = " ".join(r.payload for r in store.raw_rows(sid))
            assert payloads.count('"lookup"') >= len(figures)  # the raw log as far as the last figure
    finally:
        store.close()
    assert not list(journal_dir(store_location).glob("*.journal"))


def _journal_bytes(location: Path) -> int:
    total = 0
    for path in journal_dir(str(location)).glob("*.journal"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:  # committed and removed by the writer thread meanwhile
            pass
    return total


def test_a_long_lived_store_keeps_its_journal_small(tmp_path: Path) -> None:
    import asyncio

    from seamline.events import Usage

    location = tmp_path / "s.db"
    store = SQLiteStore(location)
    store.create_session("s1", provider="p", model=None)
    sizes: list[int] = []

    async def go() -> None:
        # 15,000 figures write about 5 times JOURNAL_BYTES in all: only a journal that removes
        # what is committed stays under the bound (300 turns stayed under it even without that).
        for _turn in range(1500):
            for _ in range(10):
                await store.record_usage_grouped("s1", 1, Usage(input_tokens=1, output_tokens=1))
            await store.finish_turn_grouped("s1", "completed")
            sizes.append(_journal_bytes(location))

    try:
        asyncio.run(go())
        # past JOURNAL_BYTES uncommitted a run waits for the writer; committed files are removed
        assert max(sizes) < JOURNAL_BYTES + 20_000, max(sizes)
        assert min(sizes[150:]) < max(sizes[150:])  # ... and started afresh
        assert store.totals("s1").input_tokens == 15000
    finally:
        store.close()
    assert _committed_only(location) == [1] * 15000
    assert not list(journal_dir(str(location)).glob("*.journal"))
