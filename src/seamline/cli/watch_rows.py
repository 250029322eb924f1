"""The rows of ``seamline watch`` from a session store: each run's backend, status, the
tool it is running, the permission requests it waits on, tokens, cost, elapsed time and
worktree branch (what ``--snapshot --json`` prints and the live view shows)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any, cast

import msgspec

from seamline.events import Complete, Event, PermissionDecision, PermissionRequest, ToolCall, ToolResult, decode_event
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.records import SessionRecord, session_title

__all__ = ["activity", "elapsed_text", "fleet", "run_status", "shown_workspace", "stored_events", "worktree_fields"]


def worktree_fields(run_options: dict[str, Any]) -> dict[str, Any]:
    """What a session's run options keep of its worktree (empty for a run without one)."""
    kept: object = run_options.get("worktree")
    return cast("dict[str, Any]", kept) if isinstance(kept, dict) else {}


def shown_workspace(record: SessionRecord) -> str | None:
    """Where a run's work is: its workspace; for a merged or discarded worktree run, whose
    worktree is removed, the same folder in the main repository."""
    tree = worktree_fields(record.run_options)
    path, repo = tree.get("path"), tree.get("repo")
    if tree.get("state") in (None, "open") or not record.workspace or not path or not repo:
        return record.workspace
    try:
        inside = PurePath(record.workspace).relative_to(path)
    except ValueError:
        return record.workspace  # not in the worktree (a record from before worktrees)
    return str(PurePath(repo) / inside)


def run_status(session_status: str) -> str:
    """What the view calls a session's status: a session whose turn is running is ``open``
    in the store, the word a worktree's state uses too; the view says ``running``, as a
    server's runs do."""
    return "running" if session_status == "open" else session_status


def fleet(store: SessionStore, *, limit: int = 20, now: float | None = None) -> list[dict[str, Any]]:
    """The rows of the view: live runs (status ``open``) first, then the newest others."""
    at = time.time() if now is None else now
    records = [r for r in store.list_sessions(limit=max(limit, 1) * 4) if r.status != "not_started"]
    records.sort(key=lambda r: (r.status != "open", -r.created_at))
    return [_row(store, record, at) for record in records[:limit]]


def _row(store: SessionStore, record: SessionRecord, now: float) -> dict[str, Any]:
    totals = store.totals(record.id, include_descendants=False)
    tree = worktree_fields(record.run_options)
    live = record.status == "open"
    ended = now if live else _ended_at(store, record, tree)
    tool, waiting = activity(store, record.id) if live else (None, 0)
    return {
        "session_id": record.id,
        "provider": record.provider,
        "model": record.model,
        "status": run_status(record.status),
        "current_tool": tool,
        "pending_approvals": waiting,
        "branch": tree.get("branch"),
        "worktree_state": tree.get("state"),
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cost_usd": totals.cost_usd if totals.cost_known else None,
        "cost": totals.describe_cost(),
        "elapsed_s": round(max(ended - record.created_at, 0.0), 1),
        "title": session_title(store.first_prompt(record.id)),
        "workspace": shown_workspace(record),
    }


_ENDS: dict[tuple[str, float], float] = {}  # (session, updated_at): when its last turn ended


def _ended_at(store: SessionStore, record: SessionRecord, tree: dict[str, Any]) -> float:
    """When an ended run's last turn ended. That is the record's ``updated_at``, unless a
    merge or discard of its worktree wrote the record since: then its last raw row's time
    (read once per record, the run cannot go on)."""
    if tree.get("state") in (None, "open"):
        return record.updated_at
    key = (record.id, record.updated_at)
    if key not in _ENDS:
        if len(_ENDS) > 512:
            _ENDS.clear()
        _ENDS[key] = max((row.created_at for row in store.raw_rows(record.id)), default=record.updated_at)
    return _ENDS[key]


def stored_events(store: SessionStore, session_id: str) -> Iterable[Event]:
    """The events the store recorded of a session, in order."""
    for row in store.raw_rows(session_id):
        if row.source == "event":
            try:
                yield decode_event(row.payload)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue  # a row another version wrote; the rest still show


def activity(store: SessionStore, session_id: str) -> tuple[str | None, int]:
    """A live stored run's current tool (called, no result yet) and how many of its
    permission requests wait for an answer, from its recorded events."""
    calls: dict[str, str] = {}
    asked: set[str] = set()
    for event in stored_events(store, session_id):
        if isinstance(event, ToolCall):
            calls[event.call_id] = event.name
        elif isinstance(event, ToolResult):
            calls.pop(event.call_id, None)
        elif isinstance(event, PermissionRequest):
            asked.add(event.request_id)
        elif isinstance(event, PermissionDecision):
            asked.discard(event.request_id)
        elif isinstance(event, Complete):
            calls.clear()
            asked.clear()
    return (list(calls.values())[-1] if calls else None), len(asked)


def elapsed_text(seconds: float) -> str:
    """``seconds`` as the table shows them: 42s, 3m05s, 1h07m."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
