"""The store's engine, whatever the database: sessions, raw log, usage, transcript.

:class:`SessionStore` holds every query in portable SQL; :class:`~seamline.sessions.sqlite_store.SQLiteStore`
(SQLite) and :class:`~seamline.sessions.postgres.PostgresStore` add their connection. It lives
apart from both so that neither imports the other.
"""

from __future__ import annotations

import abc
import asyncio
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Final

from seamline.errors import InvalidRequest, StorageFailure
from seamline.events import Usage
from seamline.sessions.raw_packs import LAST_SEQ, RAW_INSERT, RAW_SELECT, packed_rows, unpacked
from seamline.sessions.records import (
    METADATA_MAX_DEPTH,
    Direction,
    FileTouch,
    RawRow,
    SessionRecord,
    SessionStatus,
    Totals,
    TranscriptEntry,
    UsageRow,
    json_depth,
)
from seamline.sessions.schema import Dialect
from seamline.sessions.transcript import derive_transcript, parser_versions

if TYPE_CHECKING:
    from seamline.sessions.journal import JournalRecord

__all__ = ["RuleRow", "SessionStore"]

RuleRow = tuple[int, str, str | None, str | None, str | None, str | None, float]
"""A stored permission rule: (id, effect, tool, tool_class, pattern, workspace, created_at)."""

_SESSION_COLUMNS: Final = (
    "id, provider, model, provider_session_id, parent_id, workspace, mode, status, metadata, created_at, updated_at,"
    " run_options"
)
_HOST: Final = socket.gethostname()


class _SharedCommit(asyncio.Future[None]):
    """The future every run of one group commit awaits. A cancelled run must not cancel it
    for the others (nor lose the commit): cancelling a task that awaits it takes effect
    once the commit is written, which costs no per-waiter future as ``asyncio.shield`` did."""

    def cancel(self, msg: Any = None) -> bool:
        return False


class SessionStore(abc.ABC):
    """The session store: its logic over five SQL primitives, which an implementation
    brings with its database (:class:`~seamline.sessions.sqlite_store.SQLiteStore`,
    :class:`~seamline.sessions.postgres.PostgresStore`): ``_execute``, ``_executemany``,
    ``_query``, ``_transaction`` and ``close``, in the ``dialect`` it names."""

    dialect: Dialect = "sqlite"
    location: str = ""

    def __init__(self) -> None:
        self._pending: list[tuple[str, int, int, str, str, str, float]] = []
        self._pending_usage: list[tuple[Any, ...]] = []
        self._pending_statements: list[tuple[str, tuple[Any, ...]]] = []
        self._next_seq: dict[str, int] = {}
        self._next_usage: dict[str, int] = {}
        self._skeys: dict[str, str] = {}  # storage keys of the sessions this process uses
        self._closed_skeys: dict[str, str] = {}  # ... and of those closed since the last flush
        self._group_commit: asyncio.Future[None] | None = None
        self._group_waiters = 0  # runs waiting on the group commit being gathered

    # -- primitives (per database) ------------------------------------------------------
    @abc.abstractmethod
    def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    @abc.abstractmethod
    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    @abc.abstractmethod
    def close(self) -> None:
        raise NotImplementedError

    # -- sessions ---------------------------------------------------------------------------
    def create_session(
        self,
        session_id: str,
        *,
        provider: str,
        model: str | None,
        parent_id: str | None = None,
        workspace: str | None = None,
        mode: str = "agent",
        metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Write a new session record (status ``open``, owned by this process)."""
        statement = self._session_insert(session_id, provider, model, parent_id, workspace, mode, metadata)
        self._execute(*statement)
        self._fresh(statement)

    async def create_session_grouped(
        self,
        session_id: str,
        *,
        provider: str,
        model: str | None,
        parent_id: str | None = None,
        workspace: str | None = None,
        mode: str = "agent",
        metadata: Mapping[str, object] | None = None,
        run_options: Mapping[str, object] | None = None,
    ) -> None:
        """:meth:`create_session` sharing one commit with every session opened in the same
        turn of the event loop. Returns once the record is written, with ``run_options``
        (as :meth:`set_run_options` keeps them) in the same commit (the SQLite store: once
        it is journaled, see :meth:`_open_record`)."""
        statement = self._session_insert(session_id, provider, model, parent_id, workspace, mode, metadata, run_options)
        self._fresh(statement)
        await self._open_record(statement)

    async def _open_record(self, statement: tuple[str, tuple[Any, ...]]) -> None:
        """Write a new session's record (its ``INSERT``) with the next group commit."""
        self._pending_statements.append(statement)
        await self.commit_soon()

    @staticmethod
    def _session_insert(
        session_id: str,
        provider: str,
        model: str | None,
        parent_id: str | None,
        workspace: str | None,
        mode: str,
        metadata: Mapping[str, Any] | None,
        run_options: Mapping[str, Any] | None = None,
    ) -> tuple[str, tuple[Any, ...]]:
        now = time.time()
        kept = {k: v for k, v in (run_options or {}).items() if v is not None}
        return (
            SESSION_INSERT,
            (
                session_id,
                provider,
                model,
                parent_id,
                workspace,
                mode,
                json.dumps(dict(metadata)) if metadata else "{}",  # most runs have none: no encoder
                now,
                now,
                os.getpid(),
                _HOST,
                json.dumps(kept, sort_keys=True) if kept else "{}",
                storage_key(session_id, now),
            ),
        )

    def _fresh(self, statement: tuple[str, tuple[Any, ...]]) -> None:
        """A session this store just created (its ``INSERT``) has nothing logged yet: no
        need to ask; its storage key is the one in its record."""
        params = statement[1]
        session_id = params[0]
        self._skeys[session_id] = params[-1]
        self._next_seq.setdefault(session_id, 1)
        self._next_usage.setdefault(session_id, 1)

    def _skey(self, session_id: str, *, keep: bool = False) -> str:
        """The session's storage key (what its raw log and figures are filed under): kept
        for the sessions this process writes (made here, or ``keep``: resumed here, until
        :meth:`release`), else read from its record; a session not in the store files under
        an all-zero time. A read is not kept: a long-lived reader keeps nothing per session."""
        skey = self._known_skey(session_id)
        if skey is None:
            found = self._query(SKEY_SELECT, (session_id,))
            if not found or found[0][0] is None:
                return ORPHAN_TIME + session_id
            skey = found[0][0]
            if keep:
                self._skeys[session_id] = skey
        return skey

    def _known_skey(self, session_id: str) -> str | None:
        """The storage key of a session this process writes, or has closed since the last
        flush (its last rows may still be queued); None for others. Safe on any thread."""
        return self._skeys.get(session_id) or self._closed_skeys.get(session_id)

    def _keyed(self, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return keyed_rows(rows, self._skey)

    async def commit_soon(self) -> None:
        """Commit everything queued together with what other tasks queue in this turn of the
        event loop (group commit); returns once it is written."""
        waiter = self._group_commit
        if waiter is None:
            loop = asyncio.get_running_loop()
            waiter = self._group_commit = _SharedCommit(loop=loop)
            loop.call_soon(self._commit_group)
        self._group_waiters += 1
        await waiter

    def set_provider_session_id(self, session_id: str, provider_session_id: str) -> None:
        self._execute(
            "UPDATE sessions SET provider_session_id = ?, updated_at = ? WHERE id = ?",
            (provider_session_id, time.time(), session_id),
        )

    def set_status(self, session_id: str, status: SessionStatus) -> None:
        """Set the status; ``open`` also claims the session for this process."""
        self._execute(
            "UPDATE sessions SET status = ?, updated_at = ?, owner_pid = ?, owner_host = ? WHERE id = ?",
            (
                status,
                time.time(),
                os.getpid() if status == "open" else None,
                _HOST if status == "open" else None,
                session_id,
            ),
        )

    async def finish_turn_grouped(self, session_id: str, status: SessionStatus) -> None:
        """Write everything queued and the session's final status; the commit is shared with
        other sessions of this turn of the event loop (group commit; the SQLite store:
        journaled, then committed lazily)."""
        await self._end_turn(session_id, status, time.time())

    async def _end_turn(self, session_id: str, status: SessionStatus, now: float) -> None:
        self._pending_statements.append((FINISH_UPDATE, (status, now, session_id)))
        await self.commit_soon()

    def flush_soon(self) -> None:
        """Make what is queued durable now and written soon (a store without a journal:
        :meth:`flush`, written now)."""
        self.flush()

    def update_metadata(self, session_id: str, changes: Mapping[str, object]) -> None:
        with self._transaction():
            rows = self._query("SELECT metadata FROM sessions WHERE id = ?", (session_id,))
            if not rows:
                raise InvalidRequest(f"no session {session_id}")
            merged = {**json.loads(rows[0][0]), **changes}
            self._execute(
                "UPDATE sessions SET metadata = ?, updated_at = ? WHERE id = ?",
                (json.dumps(merged), time.time(), session_id),
            )

    def hand_over(self, session_id: str, *, provider: str, model: str | None) -> None:
        """Make ``provider`` the session's backend from its next turn on (a handoff): its
        provider session id is dropped (the new backend has none yet) and the switch is
        appended to ``metadata["handoffs"]`` (see :mod:`seamline.sessions.handoffs`)."""
        from seamline.sessions.handoffs import handoff_entry, handoffs_of

        record = self.require(session_id)
        entry = handoff_entry(record, self.transcript(record.id), provider=provider, model=model)
        with self._transaction():
            rows = self._query("SELECT metadata FROM sessions WHERE id = ?", (record.id,))
            metadata = json.loads(rows[0][0])
            metadata["handoffs"] = [*handoffs_of(metadata), entry]
            self._execute(
                "UPDATE sessions SET provider = ?, model = ?, provider_session_id = NULL, metadata = ?,"
                " updated_at = ? WHERE id = ?",
                (provider, model, json.dumps(metadata), time.time(), record.id),
            )

    def set_run_options(self, session_id: str, options: Mapping[str, object]) -> None:
        """Record what the session runs with (merged over what it had; ``None`` drops a key).
        Never pass secrets: these are shown by ``sessions show``."""
        with self._transaction():
            rows = self._query("SELECT run_options FROM sessions WHERE id = ?", (session_id,))
            if not rows:
                raise InvalidRequest(f"no session {session_id}")
            merged = {**json.loads(rows[0][0] or "{}"), **options}
            kept = {k: v for k, v in merged.items() if v is not None}
            self._execute(
                "UPDATE sessions SET run_options = ?, updated_at = ? WHERE id = ?",
                (json.dumps(kept, sort_keys=True), time.time(), session_id),
            )

    # -- permission rules ---------------------------------------------------------------------
    def add_permission_rule(
        self,
        effect: str,
        tool: str | None,
        tool_class: str | None,
        pattern: str | None,
        workspace: str | None,
    ) -> tuple[int, float]:
        """Store one rule (see :class:`seamline.sessions.rules.PermissionRules`): its id and time."""
        now = time.time()
        with self._transaction():
            rows = self._query(
                "INSERT INTO permission_rules (effect, tool, tool_class, pattern, workspace, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (effect, tool, tool_class, pattern, workspace, now),
            )
        return int(rows[0][0]), now

    def remove_permission_rule(self, rule_id: int) -> bool:
        with self._transaction():
            rows = self._query("DELETE FROM permission_rules WHERE id = ? RETURNING id", (rule_id,))
        return bool(rows)

    def permission_rule_rows(self) -> list[RuleRow]:
        """Every rule, oldest first: (id, effect, tool, tool_class, pattern, workspace, created_at)."""
        return self._query(
            "SELECT id, effect, tool, tool_class, pattern, workspace, created_at FROM permission_rules ORDER BY id"
        )

    def get(self, session_id: str) -> SessionRecord | None:
        rows = self._query(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        return _record(rows[0]) if rows else None

    def require(self, session_id: str) -> SessionRecord:
        """The session ``session_id`` (a unique prefix is enough), or :class:`InvalidRequest`."""
        found = self.get(session_id)
        if found is not None:
            return found
        rows = self._query(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id LIKE ? LIMIT 2", (session_id + "%",))
        if len(rows) == 1 and len(session_id) >= 4:
            return _record(rows[0])
        if len(rows) > 1:
            raise InvalidRequest(f"session id {session_id!r} is ambiguous; give more of it")
        if rows:
            raise InvalidRequest(f"{session_id!r} is too short: give at least 4 characters of the session id")
        raise InvalidRequest(f"no session {session_id!r} in the store {self.location}")

    def list_sessions(self, *, limit: int = 100, parent_id: str | None = None) -> list[SessionRecord]:
        if parent_id is None:
            rows = self._query(f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY created_at DESC LIMIT ?", (limit,))
        else:
            rows = self._query(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE parent_id = ? ORDER BY created_at LIMIT ?",
                (parent_id, limit),
            )
        return [_listed(r) for r in rows]

    def descendants(self, session_id: str) -> list[str]:
        """Every fork and child below ``session_id``, breadth first."""
        found: list[str] = []
        frontier = [session_id]
        while frontier:
            marks = ", ".join("?" for _ in frontier)
            rows = self._query(f"SELECT id FROM sessions WHERE parent_id IN ({marks}) ORDER BY created_at", frontier)
            frontier = [r[0] for r in rows if r[0] not in found]
            found.extend(frontier)
        return found

    def delete_session(self, session_id: str) -> None:
        """Remove a session and everything recorded of it; its children keep a dangling parent."""
        with self._transaction():
            skey = self._skey(session_id)
            for table in ("transcript", "transcript_state"):
                self._execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            for table in ("usage_ledger", "raw_log"):
                self._execute(f"DELETE FROM {table} WHERE skey = ?", (skey,))
            self._execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        self.release(session_id)

    def release(self, session_id: str) -> None:
        """This process is done with the session for now (it was closed): forget its next
        raw-log and ledger numbers, read again from the store if it goes on here. A
        long-lived process (``serve``, a worker) keeps nothing per session it ever saw."""
        self._next_seq.pop(session_id, None)
        self._next_usage.pop(session_id, None)
        skey = self._skeys.pop(session_id, None)
        if skey is not None:  # its last rows may still wait for the next flush
            self._closed_skeys[session_id] = skey

    def recover_interrupted(self) -> list[str]:
        """Mark ``open`` sessions whose process on this host is gone as ``interrupted``."""
        rows = self._query("SELECT id, owner_pid FROM sessions WHERE status = 'open' AND owner_host = ?", (_HOST,))
        dead = [sid for sid, pid in rows if pid is not None and not _alive(int(pid))]
        if dead:
            with self._transaction():
                for sid in dead:
                    self._execute(
                        "UPDATE sessions SET status = 'interrupted', updated_at = ?, owner_pid = NULL WHERE id = ?"
                        " AND status = 'open'",
                        (time.time(), sid),
                    )
        return dead

    # -- raw log ----------------------------------------------------------------------------
    def append_raw(self, session_id: str, turn: int, direction: Direction, source: str, payload: str) -> None:
        """Queue one raw row; :meth:`flush` writes the queue in one transaction."""
        seq = self._next_seq.get(session_id)
        if seq is None:
            self._skey(session_id, keep=True)  # a session written here (resumed): its key kept till released
            seq = self._last_raw_seq(session_id) + 1
        self._next_seq[session_id] = seq + 1
        self._pending.append((session_id, seq, turn, direction, source, payload, time.time()))

    def _last_raw_seq(self, session_id: str) -> int:
        found = self._query(LAST_SEQ, (self._skey(session_id),))
        return int(found[0][0]) if found else 0

    def _last(self, table: str, column: str, session_id: str) -> int:
        found = self._query(f"SELECT COALESCE(MAX({column}), 0) FROM {table} WHERE skey = ?", (self._skey(session_id),))
        return int(found[0][0])

    def flush(self) -> None:
        """Write every queued statement, raw row and usage figure in one transaction."""
        if not self._pending and not self._pending_usage and not self._pending_statements:
            return
        statements, self._pending_statements = self._pending_statements, []
        rows, self._pending = self._pending, []
        self._take_pending()
        usage, self._pending_usage = self._pending_usage, []
        try:
            with self._transaction():
                self._run_statements(statements, before_rows=True)
                self._write_pending(rows, usage)
                self._run_statements(statements, before_rows=False)
        except StorageFailure:
            self._pending_statements[:0] = statements  # keep them: a later flush may succeed
            self._pending[:0] = rows
            self._pending_usage[:0] = usage
            raise
        self._closed_skeys.clear()  # a closed session's rows are written (a later one asks again)
        if usage:
            self._usage_committed(usage)

    def _take_pending(self) -> None:
        """The queued rows are on their way to a commit."""
        return None

    def _usage_committed(self, usage: Sequence[tuple[Any, ...]]) -> None:
        """These queued figures are in the ledger now (the SQLite store's journal lets go)."""
        return None

    def _run_statements(self, statements: Sequence[tuple[str, tuple[Any, ...]]], *, before_rows: bool) -> None:
        # New session records go in before the rows that point at them; status updates after.
        for sql, params in statements:
            if sql.startswith("INSERT") == before_rows:
                self._execute(sql, params)

    def _write_pending(
        self, rows: Sequence[tuple[str, int, int, str, str, str, float]], usage: Sequence[tuple[Any, ...]] = ()
    ) -> None:
        if rows:
            self._executemany(RAW_INSERT, packed_rows(rows, self._skey))
        if usage:
            self._executemany(USAGE_INSERT, self._keyed(usage))

    def first_prompt(self, session_id: str) -> str | None:
        """The session's first prompt as it was given (what ``sessions list`` titles it by)."""
        rows = self._query(
            "SELECT payload FROM raw_log WHERE skey = ? AND source = 'prompt' ORDER BY seq LIMIT 1",
            (self._skey(session_id),),
        )
        if not rows:
            return None
        payload = rows[0][0]
        try:
            value = json.loads(payload)
        except ValueError:
            return str(payload)
        return value if isinstance(value, str) else str(payload)

    def raw_rows(self, session_id: str) -> Iterator[RawRow]:
        rows = self._query(f"{RAW_SELECT} WHERE skey = ? ORDER BY seq", (self._skey(session_id),))
        for seq, turn, direction, source, payload, created_at in unpacked(rows):
            yield RawRow(seq, session_id, turn, direction, source, payload, created_at)

    # -- cost ledger ------------------------------------------------------------------------
    def record_usage(self, session_id: str, turn: int, usage: Usage) -> None:
        """Write one usage figure now, with every row queued before it."""
        self._queue_usage(session_id, turn, usage)
        self.flush()

    async def record_usage_grouped(self, session_id: str, turn: int, usage: Usage) -> None:
        """:meth:`record_usage` for many sessions at once: figures that arrive in the same
        turn of the event loop share one transaction (group commit). Returns once written."""
        self._queue_usage(session_id, turn, usage)
        await self.commit_soon()

    def _commit_group(self) -> None:
        waiter, self._group_commit = self._group_commit, None
        self._group_waiters = 0
        try:
            self.flush()
        except StorageFailure as exc:
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
            return
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _queue_usage(self, session_id: str, turn: int, usage: Usage) -> None:
        n = self._next_usage.get(session_id)
        if n is None:
            self._skey(session_id, keep=True)
            n = self._last_usage_n(session_id) + 1
        self._next_usage[session_id] = n + 1
        row = (
            session_id,
            n,
            turn,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.cost_usd if usage.priced else None,
            int(usage.priced),
            usage.model,
            time.time(),
        )
        self._pending_usage.append((*row, self._journal_usage(row)))

    def _last_usage_n(self, session_id: str) -> int:
        return self._last("usage_ledger", "n", session_id)

    def _journal_usage(self, row: tuple[Any, ...]) -> str | None:
        """Make a queued figure durable before it is committed; its journal id (the SQLite
        store's usage journal), or ``None`` where the figure waits for its commit."""
        return None

    def _journal_candidates(self, session_ids: Sequence[str]) -> list[JournalRecord]:
        """Figures of these sessions that may not be in the ledger yet (read before it)."""
        return []

    def _read_snapshot(self) -> AbstractContextManager[None]:
        """A block whose reads see one state of the database."""
        return nullcontext()

    def _not_in_ledger(self, candidates: Sequence[JournalRecord]) -> list[JournalRecord]:
        """The candidates whose figure the ledger does not hold (inside a read snapshot)."""
        ids = [r.journal_id for r in candidates]
        present = {r[0] for r in self._query_in("SELECT journal_id FROM usage_ledger WHERE journal_id IN ({})", ids)}
        late = [r for r in candidates if r.journal_id not in present]
        sids = sorted({r.session_id for r in late})
        kept = {r[0] for r in self._query_in("SELECT id FROM sessions WHERE id IN ({})", sids)}
        # a session whose record is journaled too is not in the store yet: its figures count
        return sorted(
            (r for r in late if r.session_id in kept or r.journaled_session), key=lambda r: (r.session_id, r.n)
        )

    def usage_rows(self, session_id: str) -> list[UsageRow]:
        """The session's figures in order, those still in a usage journal included."""
        candidates = self._journal_candidates([session_id])  # before the ledger: see the module
        with self._read_snapshot():
            rows = [
                (session_id, *r)
                for r in self._query(
                    "SELECT turn, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,"
                    " cost_usd, priced, model FROM usage_ledger WHERE skey = ? ORDER BY n",
                    (self._skey(session_id),),
                )
            ]
            late = self._not_in_ledger(candidates) if candidates else []
        rows.extend(r.row[:1] + r.row[2:10] for r in late)
        return [UsageRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), r[8]) for r in rows]

    def totals(self, session_id: str, *, include_descendants: bool = True) -> Totals:
        """Sums over the session (and its forks and children): computed, never stored."""
        ids = [session_id, *(self.descendants(session_id) if include_descendants else [])]
        candidates = self._journal_candidates(ids)  # before the ledger: see the module
        with self._read_snapshot():
            skeys = self._skeys_of(ids)
            row = self._totals_row(", ".join("?" for _ in skeys), skeys)
            late = self._not_in_ledger(candidates) if candidates else []
        tokens = [int(row[i]) for i in range(4)]
        cost, priced, unpriced = float(row[4]), int(row[5]), int(row[6])
        for record in late:  # (.., turn, input, output, cache_read, cache_write, cost, priced, ..)
            r = record.row
            for i in range(4):
                tokens[i] += int(r[3 + i])
            if r[8]:
                cost, priced = cost + float(r[7] or 0.0), priced + 1
            else:
                unpriced += 1
        return Totals(len(ids), tokens[0], tokens[1], tokens[2], tokens[3], cost, priced, unpriced)

    def _skeys_of(self, session_ids: Sequence[str]) -> list[str]:
        """:meth:`_skey` of many sessions, those not known here read in one query."""
        known = {sid: skey for sid in session_ids if (skey := self._known_skey(sid)) is not None}
        unknown = [sid for sid in session_ids if sid not in known]
        known.update(
            (sid, skey)
            for sid, skey in self._query_in("SELECT id, skey FROM sessions WHERE id IN ({})", unknown)
            if skey is not None
        )
        return [known.get(sid) or ORPHAN_TIME + sid for sid in session_ids]

    def _query_in(self, sql: str, values: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``sql``'s rows with its ``IN ({})`` over ``values``, asked 500 at a time (SQLite
        bounds the parameters of one statement)."""
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            rows.extend(self._query(sql.format(", ".join("?" for _ in chunk)), chunk))
        return rows

    def _totals_row(self, marks: str, skeys: Sequence[str]) -> tuple[Any, ...]:
        return self._query(
            "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),"
            " COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0),"
            " COALESCE(SUM(CASE WHEN priced = 1 THEN cost_usd ELSE 0 END), 0),"
            " COALESCE(SUM(CASE WHEN priced = 1 THEN 1 ELSE 0 END), 0),"
            f" COALESCE(SUM(CASE WHEN priced = 1 THEN 0 ELSE 1 END), 0) FROM usage_ledger WHERE skey IN ({marks})",
            skeys,
        )[0]

    # -- transcript ---------------------------------------------------------------------------
    def transcript(self, session_id: str) -> list[TranscriptEntry]:
        """The canonical transcript; derived again when the raw log grew or a parser changed."""
        versions = json.dumps(parser_versions(), sort_keys=True)
        last = self._last_raw_seq(session_id)
        state = self._query("SELECT last_raw_seq, versions FROM transcript_state WHERE session_id = ?", (session_id,))
        if state and state[0][0] == last and state[0][1] == versions:
            rows = self._query(
                "SELECT idx, turn, kind, role, content, call_id, data, raw_seq, parser, parser_version"
                " FROM transcript WHERE session_id = ? ORDER BY idx",
                (session_id,),
            )
            return [
                TranscriptEntry(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8], r[9]) for r in rows
            ]
        entries = derive_transcript(self.raw_rows(session_id))
        with self._transaction():
            self._execute("DELETE FROM transcript WHERE session_id = ?", (session_id,))
            self._execute("DELETE FROM transcript_state WHERE session_id = ?", (session_id,))
            self._executemany(
                "INSERT INTO transcript (session_id, idx, turn, kind, role, content, call_id, data, raw_seq, parser,"
                " parser_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        session_id,
                        e.index,
                        e.turn,
                        e.kind,
                        e.role,
                        e.content,
                        e.call_id,
                        json.dumps(e.data),
                        e.raw_seq,
                        e.parser,
                        e.parser_version,
                    )
                    for e in entries
                ],
            )
            self._execute(
                "INSERT INTO transcript_state (session_id, last_raw_seq, versions) VALUES (?, ?, ?)",
                (session_id, last, versions),
            )
        return entries

    def files_touched(self, session_id: str) -> list[FileTouch]:
        """Files the session read, edited, created or deleted, from its events and tool calls."""
        touched: dict[str, tuple[list[str], list[str]]] = {}
        for entry in self.transcript(session_id):
            path: object = None
            kind = ""
            if entry.kind == "file_change":
                path, kind = entry.data.get("path"), str(entry.data.get("change"))
            elif entry.kind == "tool_call" and entry.data.get("name") in _PATH_TOOLS:
                path = (entry.data.get("arguments") or {}).get("path")
                kind = _PATH_TOOLS[str(entry.data.get("name"))]
            if not isinstance(path, str):
                continue
            kinds, calls = touched.setdefault(path, ([], []))
            if kind not in kinds:
                kinds.append(kind)
            if entry.call_id and entry.call_id not in calls:
                calls.append(entry.call_id)
        return [FileTouch(p, tuple(k), tuple(c)) for p, (k, c) in sorted(touched.items())]


SESSION_INSERT: Final = (
    "INSERT INTO sessions (id, provider, model, parent_id, workspace, mode, status, metadata,"
    " created_at, updated_at, owner_pid, owner_host, run_options, skey)"
    " VALUES (?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?, ?)"
)
"""A new session's record; its last value is its storage key (:func:`storage_key`)."""
SKEY_SELECT: Final = "SELECT skey FROM sessions WHERE id = ?"
ORPHAN_TIME: Final = "0" * 14
"""The time part of the storage key of rows whose session is not in the store."""
USAGE_INSERT: Final = (
    "INSERT INTO usage_ledger (skey, n, turn, input_tokens, output_tokens, cache_read_tokens,"
    " cache_write_tokens, cost_usd, priced, model, created_at, journal_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (journal_id) DO NOTHING"
)
"""A figure already in the ledger (its journal replayed meanwhile) is not counted twice."""
FINISH_UPDATE: Final = (
    "UPDATE sessions SET status = ?, updated_at = ?, owner_pid = NULL, owner_host = NULL WHERE id = ?"
)
"""A turn's end: the session's final status, no longer owned."""


def storage_key(session_id: str, created_at: float) -> str:
    """What a session's raw log and figures are filed under: its creation time in
    microseconds (14 hex digits), then its id. Ids are random, so that users can name a
    session by its head; keys sort in the order sessions were made, so the rows of new
    sessions go to the end of the tables' B-trees rather than to a random page each."""
    return f"{int(created_at * 1_000_000):014x}{session_id}"


def keyed_rows(rows: Sequence[tuple[Any, ...]], skey_of: Callable[[str], str]) -> list[tuple[Any, ...]]:
    """Queued rows (a session id first) as the tables take them (its storage key first),
    each session's key asked of ``skey_of`` once."""
    skeys: dict[str, str] = {}
    out: list[tuple[Any, ...]] = []
    for row in rows:
        sid = row[0]
        skey = skeys.get(sid)
        if skey is None:
            skey = skeys[sid] = skey_of(sid)
        out.append((skey, *row[1:]))
    return out


_PATH_TOOLS: Final = {"read_file": "read", "write_file": "edited", "edit_file": "edited"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listed(row: Sequence[Any]) -> SessionRecord:
    """A row of a listing: one whose metadata or options cannot be read (a row written by
    hand, or nested past what a reader can show) is marked, so the listing still works."""
    try:
        record = _record(row)
    except (ValueError, TypeError, RecursionError) as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:200]}"
    else:
        too_deep = max(json_depth(record.metadata), json_depth(record.run_options))
        if too_deep <= METADATA_MAX_DEPTH:
            return record
        problem = f"nests {too_deep} deep"
    return SessionRecord(
        id=row[0],
        provider=row[1],
        model=row[2],
        provider_session_id=row[3],
        parent_id=row[4],
        workspace=row[5],
        mode=row[6],
        status=row[7],
        metadata={"unreadable": problem},
        created_at=row[9],
        updated_at=row[10],
        run_options={},
    )


def _record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        id=row[0],
        provider=row[1],
        model=row[2],
        provider_session_id=row[3],
        parent_id=row[4],
        workspace=row[5],
        mode=row[6],
        status=row[7],
        metadata=json.loads(row[8]),
        created_at=row[9],
        updated_at=row[10],
        run_options=json.loads(row[11] or "{}"),
    )
