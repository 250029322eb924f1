"""Where ``seamline watch`` reads its runs and what its keys do there: the session store
(:class:`StoreSource`) or a running ``seamline serve`` (:class:`ServerSource`, ``--url``).

Both give the same rows (:func:`seamline.cli.watch_command.fleet`'s, plus the run this
server holds), follow a run's events as one line each, and act on a run: approve, deny or
cancel (a server only: a run in another ``seamline run`` process cannot be asked), and show
the diff of, merge or discard a worktree run. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, assert_never

import msgspec

from seamline.cli.display import one_line
from seamline.cli.watch_rows import fleet, run_status, stored_events, worktree_fields
from seamline.errors import SeamlineError
from seamline.events import (
    Complete,
    Error,
    Event,
    FileChange,
    Mode,
    PermissionDecision,
    PermissionRequest,
    Raw,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    decode_event,
)
from seamline.sessions.changes import StoreChanges, open_changes
from seamline.sessions.portable_store import SessionStore

if TYPE_CHECKING:
    import httpx2

__all__ = ["ActionRefused", "FleetSource", "ServerSource", "StoreSource", "event_line"]

Row = dict[str, Any]
T = TypeVar("T")
Decision = Literal["allow", "deny"]
NEEDS_SERVER: Final = (
    "{what} needs a server: this view reads the store, and a run in another `seamline run` process "
    "cannot be asked; watch a `seamline serve` with --url"
)
_LIVE: Final = frozenset({"running", "queued", "open"})


class ActionRefused(Exception):
    """A key that cannot act on the selected run; the message says why, in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def event_line(event: Event) -> str | None:
    """One line for the events pane, or ``None`` for what is not worth one (deltas)."""
    match event:
        case Session():
            return f"session {event.session_id[:12]} on {event.provider}" + (f" ({event.model})" if event.model else "")
        case TextDelta() | ReasoningDelta() | Raw():
            return None
        case Text():
            return f"assistant: {one_line(event.text, limit=200)}"
        case Reasoning():
            return f"thinking: {one_line(event.text, limit=200)}"
        case ToolCall():
            return f"→ {event.name} {one_line(json.dumps(event.arguments), limit=120)}"
        case ToolResult():
            return f"  {'✗' if event.is_error else '✓'} {event.name or ''} {one_line(event.output, limit=120)}"
        case ToolProgress():
            return f"  … {one_line(event.message, limit=120)}"
        case PermissionRequest():
            return f"? permission asked: {event.tool} {one_line(json.dumps(event.arguments), limit=100)}"
        case PermissionDecision():
            return f"  permission {event.decision} ({event.scope})" + (f": {event.reason}" if event.reason else "")
        case FileChange():
            return None if event.kind == "read" else f"  {event.kind} {event.path}"
        case Usage():
            cost = "cost unknown" if event.cost_usd is None else f"${event.cost_usd:.4f}"
            return f"  usage {event.input_tokens} in / {event.output_tokens} out · {cost}"
        case Mode():
            return f"mode {event.mode}"
        case Error():
            return f"error ({event.kind}): {one_line(event.message, limit=200)}"
        case Complete():
            return f"[{event.outcome}: {event.stop_reason}]"
        case _:
            assert_never(event)


class FleetSource:
    """What the view reads and asks; each method may raise :class:`ActionRefused`."""

    name: str = ""

    async def rows(self, limit: int) -> list[Row]:
        raise NotImplementedError

    def follow(self, row: Row) -> AsyncIterator[str]:
        raise NotImplementedError

    async def answer(self, row: Row, decision: Decision) -> str:
        raise ActionRefused(NEEDS_SERVER.format(what="approving or denying"))

    async def cancel(self, row: Row) -> str:
        raise ActionRefused(NEEDS_SERVER.format(what="cancelling"))

    async def diff(self, row: Row) -> str:
        raise NotImplementedError

    async def merge(self, row: Row) -> str:
        raise NotImplementedError

    async def discard(self, row: Row) -> str:
        raise NotImplementedError

    async def changed(self, interval: float) -> bool:
        """Return when the runs may have changed, at the latest after ``interval`` seconds;
        True when the source said so (the view reads again either way)."""
        await asyncio.sleep(interval)
        return False

    async def close(self) -> None:
        return None


def _worktree_run(row: Row) -> str:
    if not row.get("branch"):
        raise ActionRefused(f"run {row['session_id'][:12]} has no worktree (start one with seamline run --worktree)")
    return str(row["session_id"])


def _merged(done: Mapping[str, Any]) -> str:
    if done["commit"] is None:
        return f"run {done['run_id'][:12]} changed nothing: nothing merged into {done['into']}"
    how = "squashed into" if done["squashed"] else "merged into"
    return f"run {done['run_id'][:12]} ({done['branch']}) {how} {done['into']}: {done['commit'][:12]}"


class StoreSource(FleetSource):
    """The runs of a session store, read again at each refresh; merge, discard and diff act
    on the git worktree the store records (as ``seamline merge`` does)."""

    def __init__(self, store: SessionStore, *, location: str | None, interval: float = 1.0) -> None:
        self.store = store
        self.location = location
        self.interval = interval
        self.name = "store"
        self._changes: StoreChanges | None = None
        self.woken = 0  # how often the store said it changed (LISTEN/NOTIFY, data_version)

    async def rows(self, limit: int) -> list[Row]:
        return fleet(self.store, limit=limit)

    async def changed(self, interval: float) -> bool:
        """Woken by the store (NOTIFY on PostgreSQL, ``data_version`` on SQLite: see
        :mod:`seamline.sessions.changes`), or after ``interval``."""
        if self._changes is None:
            self._changes = await open_changes(self.store, self.location, interval=interval)
        said = await self._changes.wait()
        self.woken += said
        return said

    async def close(self) -> None:
        if self._changes is not None:
            await self._changes.close()

    async def follow(self, row: Row) -> AsyncIterator[str]:
        seen = 0
        while True:
            events = list(stored_events(self.store, row["session_id"]))
            for event in events[seen:]:
                line = event_line(event)
                if line is not None:
                    yield line
            seen = len(events)
            record = self.store.get(row["session_id"])
            if record is None or record.status != "open":
                return
            await asyncio.sleep(self.interval)

    async def diff(self, row: Row) -> str:
        from seamline.worktrees import diff

        run_id = _worktree_run(row)
        return await _refusable(asyncio.to_thread(diff, run_id, store=self.location))

    async def merge(self, row: Row) -> str:
        from seamline.worktrees import merge

        done = await _refusable(asyncio.to_thread(merge, _worktree_run(row), store=self.location))
        return _merged({"run_id": done.run_id, "branch": done.branch, "into": done.into, "commit": done.commit,
                        "squashed": done.squashed})  # fmt: skip

    async def discard(self, row: Row) -> str:
        from seamline.worktrees import discard

        gone = await _refusable(asyncio.to_thread(discard, _worktree_run(row), store=self.location))
        return f"run {gone.run_id[:12]} discarded: worktree and branch {gone.branch} removed"


async def _refusable(work: Awaitable[T]) -> T:
    try:
        return await work
    except SeamlineError as exc:
        raise ActionRefused(exc.message) from None


class ServerSource(FleetSource):
    """The sessions and runs of a running ``seamline serve``, over its HTTP API v1."""

    def __init__(self, url: str, *, token: str | None = None) -> None:
        import httpx2

        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.name = self.url
        self.client: httpx2.AsyncClient = httpx2.AsyncClient(
            base_url=self.url, headers=headers, timeout=httpx2.Timeout(30.0, read=None)
        )

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx2

        try:
            reply = await self.client.request(method, path, **kwargs)
        except httpx2.HTTPError as exc:
            raise ActionRefused(f"{self.url} did not answer: {exc}") from None
        if reply.status_code >= 400:
            try:
                message = reply.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = reply.text[:200]
            raise ActionRefused(f"{reply.status_code}: {message}")
        return reply.json()

    async def rows(self, limit: int) -> list[Row]:
        sessions = (await self._call("GET", "/v1/sessions", params={"limit": str(limit * 4)}))["sessions"]
        runs = (await self._call("GET", "/v1/runs"))["runs"]
        latest: dict[str, Row] = {}
        for run in sorted(runs, key=lambda r: r["created_at"]):
            if run["session_id"] is not None:
                latest[run["session_id"]] = run
        now = time.time()
        rows = [_server_row(s, latest.get(s["id"]), now) for s in sessions if s["status"] != "not_started"]
        rows.sort(key=lambda r: (r["status"] not in _LIVE, -r["created_at"]))
        return rows[:limit]

    async def follow(self, row: Row) -> AsyncIterator[str]:
        run_id = row.get("run_id")
        if run_id is None:
            yield "(no run of this session in this server: its history is in `seamline sessions show`)"
            return
        params = {"format": "seamline", "stream": "ndjson"}
        async with self.client.stream("GET", f"/v1/runs/{run_id}/events", params=params) as reply:
            if reply.status_code != 200:
                yield f"(the server answered {reply.status_code} for the run's events)"
                return
            async for text in reply.aiter_lines():
                if not text.strip():
                    continue
                try:
                    line = event_line(decode_event(json.dumps(json.loads(text)["event"])))
                except (ValueError, KeyError, msgspec.ValidationError):
                    continue
                if line is not None:
                    yield line

    async def answer(self, row: Row, decision: Decision) -> str:
        pending: list[dict[str, Any]] = row.get("pending") or []
        if not pending:
            raise ActionRefused(f"run {row['session_id'][:12]} has no permission request waiting")
        asked = pending[0]
        await self._call(
            "POST", f"/v1/runs/{row['run_id']}/permissions/{asked['request_id']}", json={"decision": decision}
        )
        return f"{'allowed' if decision == 'allow' else 'denied'} {asked['tool']} for run {row['session_id'][:12]}"

    async def cancel(self, row: Row) -> str:
        if row.get("run_id") is None or row["status"] not in ("running", "queued"):
            raise ActionRefused(f"run {row['session_id'][:12]} is not running here")
        await self._call("POST", f"/v1/runs/{row['run_id']}/cancel")
        return f"cancelled run {row['session_id'][:12]}"

    async def diff(self, row: Row) -> str:
        return str((await self._call("GET", f"/v1/sessions/{_worktree_run(row)}/diff"))["diff"])

    async def merge(self, row: Row) -> str:
        done = await self._call("POST", f"/v1/sessions/{_worktree_run(row)}/merge", json={"squash": False})
        return _merged({**done, "run_id": done["session_id"]})

    async def discard(self, row: Row) -> str:
        gone = await self._call("POST", f"/v1/sessions/{_worktree_run(row)}/discard")
        return f"run {gone['session_id'][:12]} discarded: worktree and branch {gone['branch']} removed"

    async def close(self) -> None:
        await self.client.aclose()


def _server_row(session: Row, run: Row | None, now: float) -> Row:
    tree = worktree_fields(session["run_options"])
    status = run["status"] if run is not None else run_status(session["status"])
    live = status in _LIVE
    ended = now if live else (run["finished_at"] if run is not None and run["finished_at"] else session["updated_at"])
    cost = session["cost_usd"]
    return {
        "session_id": session["id"],
        "run_id": run["id"] if run is not None else None,
        "provider": session["provider"],
        "model": session["model"],
        "status": status,
        "current_tool": run.get("current_tool") if run is not None else None,
        "pending": run["pending_permissions"] if run is not None else [],
        "pending_approvals": len(run["pending_permissions"]) if run is not None else 0,
        "branch": tree.get("branch"),
        "worktree_state": tree.get("state"),
        "input_tokens": session["input_tokens"],
        "output_tokens": session["output_tokens"],
        "cost_usd": cost,
        "cost": "unknown" if cost is None else f"${cost:.4f}",
        "created_at": session["created_at"],
        "elapsed_s": round(max(ended - session["created_at"], 0.0), 1),
        "title": session["title"],
    }
