"""The store's side of a durable run: its spec, its role turns and its live events.

Three tables beside the session store's own (made by the store's migrations, in SQLite or
PostgreSQL: :mod:`seamline.sessions.schema`):

- ``durable_runs``: one row per run: the spec the client submitted (workers read it, so
  workflow history carries only the run id) and, once it ended, a small report.
- ``durable_turns``: one row per role turn, keyed by (run id, turn key): the prompt the
  controller asked for, how many times a worker started it and which worker started it
  last (``worker``), and once finished its events (deltas left out) and usage. A finished turn is never run again: a retried activity
  finds the row and returns it, so no usage is counted twice.
- ``durable_events``: every event a worker saw, in order, for the submitting client to
  stream. The id grows with each commit on SQLite (one writer at a time); on PostgreSQL
  each write also NOTIFYs the run's listeners (:mod:`seamline.durable.wakeup`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec

from seamline.durable.wakeup import notify_sql
from seamline.events import Event, encode_event
from seamline.sessions.portable_store import SessionStore

__all__ = ["RUN_EVENTS", "RunLedger", "turn_key"]

RUN_EVENTS: Final = "run"  # the turn key of the controller's own events (transitions, the run's complete)


def turn_key(phase: str, role: str, round_no: int, attempt: int) -> str:
    """The key of one role turn: which phase, role, round and attempt it answers."""
    return f"{phase}/{role}/{round_no}/{attempt}"


class RunLedger:
    """Durable-run rows in an open store.

    >>> from seamline.sessions.sqlite_store import SQLiteStore
    >>> ledger = RunLedger(SQLiteStore(":memory:"))
    >>> ledger.register("r1", {"task": "hi"})
    >>> ledger.spec("r1")["task"]
    'hi'
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._notify = notify_sql(store)

    # -- runs -------------------------------------------------------------------------------
    def register(self, run_id: str, spec: dict[str, Any]) -> None:
        """Keep the spec of a new run (a second register of the same run keeps the first)."""
        self.store._execute(
            "INSERT INTO durable_runs (run_id, spec, created_at) VALUES (?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            (run_id, json.dumps(spec), time.time()),
        )

    def forget(self, run_id: str) -> None:
        """Remove a run that was never submitted (its spec and anything written for it)."""
        with self.store._transaction():
            for table in ("durable_events", "durable_turns", "durable_runs"):
                self.store._execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    def spec(self, run_id: str) -> dict[str, Any]:
        rows = self.store._query("SELECT spec FROM durable_runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise LookupError(f"no durable run {run_id} in the store {self.store.location}")
        spec: dict[str, Any] = json.loads(rows[0][0])
        return spec

    def report(self, run_id: str) -> dict[str, Any] | None:
        rows = self.store._query("SELECT report FROM durable_runs WHERE run_id = ?", (run_id,))
        if not rows or rows[0][0] is None:
            return None
        report: dict[str, Any] = json.loads(rows[0][0])
        return report

    def publish_run_events(self, run_id: str, events: list[Event]) -> None:
        """Publish the controller's events of a pass that are not out yet: every pass
        re-drives the same decisions, so the first ``n`` are those already published."""
        with self.store._transaction():
            self._insert_events(run_id, RUN_EVENTS, 0, events[self._run_events_out(run_id) :])

    def finish_run(
        self,
        run_id: str,
        report: dict[str, Any],
        events: list[Event],
        *,
        keep_trace: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Record the run's end and the rest of its controller events in one transaction,
        so a retried final step neither loses them nor shows them twice. ``keep_trace``
        (write the trace, anchor its head) runs in that transaction, once: of two final
        passes that overlap (a worker that missed its heartbeats while its retry ran
        elsewhere), the second finds the first's report and leaves its trace alone.
        Returns the report on record."""
        with self.store._transaction():
            if self._notify is not None:  # PostgreSQL: passes of one run take turns (SQLite: one writer at all)
                self.store._execute("SELECT pg_advisory_xact_lock(?)", (_run_lock(run_id),))
            kept = self.report(run_id)
            if kept is not None:
                return kept
            if keep_trace is not None:
                keep_trace()
            self._insert_events(run_id, RUN_EVENTS, 0, events[self._run_events_out(run_id) :])
            self.store._execute(
                "UPDATE durable_runs SET report = ?, finished_at = ? WHERE run_id = ?",
                (json.dumps(report), time.time(), run_id),
            )
        return report

    def _run_events_out(self, run_id: str) -> int:
        rows = self.store._query(
            "SELECT COUNT(*) FROM durable_events WHERE run_id = ? AND turn_key = ?", (run_id, RUN_EVENTS)
        )
        return int(rows[0][0])

    # -- role turns -------------------------------------------------------------------------
    def need(self, run_id: str, key: str, prompt: str, budget_usd: float | None) -> None:
        """The controller asks for this turn (kept once; a finished turn stays finished)."""
        self.store._execute(
            "INSERT INTO durable_turns (run_id, turn_key, prompt, budget_usd, status, updated_at) "
            "VALUES (?, ?, ?, ?, 'needed', ?) ON CONFLICT (run_id, turn_key) DO NOTHING",
            (run_id, key, prompt, budget_usd, time.time()),
        )

    def turn(self, run_id: str, key: str) -> dict[str, Any] | None:
        rows = self.store._query(
            "SELECT prompt, budget_usd, status, starts, events, cost_usd, input_tokens, output_tokens "
            "FROM durable_turns WHERE run_id = ? AND turn_key = ?",
            (run_id, key),
        )
        if not rows:
            return None
        prompt, budget, status, starts, events, cost, tokens_in, tokens_out = rows[0]
        return {
            "prompt": prompt,
            "budget_usd": budget,
            "status": status,
            "starts": int(starts),
            "events": json.loads(events) if events else None,
            "cost_usd": cost,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
        }

    def finished_events(self, run_id: str, key: str) -> list[dict[str, Any]] | None:
        found = self.turn(run_id, key)
        if found is None or found["status"] != "finished":
            return None
        events: list[dict[str, Any]] = found["events"]
        return events

    def start(self, run_id: str, key: str, worker: str | None = None) -> int:
        """Count one more start of the turn by ``worker``; returns its number (1 for the first)."""
        with self.store._transaction():
            self.store._execute(
                "UPDATE durable_turns SET starts = starts + 1, status = 'running', worker = ?, updated_at = ? "
                "WHERE run_id = ? AND turn_key = ? AND status != 'finished'",
                (worker, time.time(), run_id, key),
            )
            rows = self.store._query(
                "SELECT starts FROM durable_turns WHERE run_id = ? AND turn_key = ?", (run_id, key)
            )
        return int(rows[0][0]) if rows else 0

    def finish(
        self,
        run_id: str,
        key: str,
        events: list[dict[str, Any]],
        *,
        cost_usd: float | None,
        input_tokens: int,
        output_tokens: int,
    ) -> bool:
        """Record the turn's end; False when another start had already finished it."""
        with self.store._transaction():
            rows = self.store._query(
                "SELECT status FROM durable_turns WHERE run_id = ? AND turn_key = ?", (run_id, key)
            )
            if rows and rows[0][0] == "finished":
                return False
            self.store._execute(
                "UPDATE durable_turns SET status = 'finished', events = ?, cost_usd = ?, input_tokens = ?, "
                "output_tokens = ?, updated_at = ? WHERE run_id = ? AND turn_key = ?",
                (json.dumps(events), cost_usd, input_tokens, output_tokens, time.time(), run_id, key),
            )
        return True

    def spent_usd(self, run_id: str) -> float:
        """What the run's finished turns cost, whichever worker ran them: the shared budget."""
        rows = self.store._query(
            "SELECT COALESCE(SUM(cost_usd), 0) FROM durable_turns WHERE run_id = ? AND status = 'finished'",
            (run_id,),
        )
        return float(rows[0][0])

    def turns(self, run_id: str) -> dict[str, dict[str, Any]]:
        """Every turn of the run by key: status, starts, the worker that started it last, and
        usage (for tests and ``status``)."""
        rows = self.store._query(
            "SELECT turn_key, status, starts, worker, cost_usd, input_tokens, output_tokens FROM durable_turns "
            "WHERE run_id = ? ORDER BY turn_key",
            (run_id,),
        )
        return {
            str(key): {
                "status": status,
                "starts": int(starts),
                "worker": worker,
                "cost_usd": cost,
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
            }
            for key, status, starts, worker, cost, tokens_in, tokens_out in rows
        }

    # -- live events ------------------------------------------------------------------------
    def publish(self, run_id: str, key: str, start_no: int, event: Event) -> None:
        self._insert_events(run_id, key, start_no, [event])

    def _insert_events(self, run_id: str, key: str, start_no: int, events: list[Event]) -> None:
        if not events:
            return
        rows = [(run_id, key, start_no, encode_event(e).decode()) for e in events]
        sql = "INSERT INTO durable_events (run_id, turn_key, start_no, event) VALUES (?, ?, ?, ?)"
        if self._notify is None:
            self.store._executemany(sql, rows)
            return
        with self.store._transaction():
            # PostgreSQL hands out ids at insert, not at commit: writers of one run take
            # turns, so its ids grow in commit order and a reader never skips one.
            self.store._execute("SELECT pg_advisory_xact_lock(?)", (_run_lock(run_id),))
            self.store._executemany(sql, rows)
            self.store._execute(self._notify, (run_id,))  # delivered at commit

    def earlier_usage(self, run_id: str, key: str, start_no: int) -> list[dict[str, Any]]:
        """The ``usage`` events earlier starts of a turn published (a killed worker's real
        spend), in order: the turn's record counts them beside its last start's."""
        rows = self.store._query(
            "SELECT event FROM durable_events WHERE run_id = ? AND turn_key = ? AND start_no < ? "
            "AND event LIKE ? ORDER BY id",
            (run_id, key, start_no, '{"type":"usage"%'),
        )
        return [json.loads(str(row[0])) for row in rows]

    def events_after(self, run_id: str, after: int, *, limit: int = 1000) -> list[tuple[int, str, bytes]]:
        """Events of the run with an id above ``after``: (id, turn key, the event's JSON)."""
        rows = self.store._query(
            "SELECT id, turn_key, event FROM durable_events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
            (run_id, after, limit),
        )
        return [(int(i), str(k), str(e).encode()) for i, k, e in rows]


def _run_lock(run_id: str) -> int:
    """A stable advisory-lock key per run (a signed 64-bit number)."""
    return int.from_bytes(hashlib.sha256(f"durable_events:{run_id}".encode()).digest()[:8], "big", signed=True)


def event_data(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(event)
    return data
