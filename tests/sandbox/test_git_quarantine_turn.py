"""The git check in an agent program's turn (providers.programs.journal.journaled_turn): only a
sandboxed session's turns are checked; the session's stored `--sandbox-policy` may allow
nested repositories; with no journal the check still runs; the report comes before the
turn's `complete`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from seamline.events import Complete, Error, Event, FileChange, Raw
from seamline.providers.base import ProviderSession
from seamline.providers.programs.journal import git_rules_for_session, journaled_turn
from seamline.sandbox.git_quarantine import GitRules
from seamline.sessions.sqlite_store import SQLiteStore
from tests.sandbox.test_git_quarantine import FSMONITOR, make_repository


@dataclass
class _Provider:
    option_values: dict[str, str]


@dataclass
class _Session:
    """What journaled_turn reads of a provider session."""

    workspace: Path
    provider: _Provider
    store: SQLiteStore | None = None
    session_id: str = "s-1"
    turn: int = 1
    state: dict[str, object] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)


def _turn(session: _Session, act: Callable[[], object]) -> list[Event]:
    async def inner() -> AsyncIterator[Event]:
        act()
        yield Complete(outcome="completed", stop_reason="end_turn", text="Done.")

    async def collect() -> list[Event]:
        return [e async for e in journaled_turn(cast(ProviderSession, session), "claude-code", inner())]

    try:
        return asyncio.run(collect())
    finally:
        for close in reversed(session.closers):
            close()


def _report(events: list[Event]) -> list[dict[str, Any]]:
    found = [e.payload["git_quarantine"] for e in events if isinstance(e, Raw) and "git_quarantine" in e.payload]
    return found[0] if found else []


def test_a_sandboxed_turn_without_a_journal_is_checked(tmp_path: Path) -> None:
    session = _Session(workspace=tmp_path, provider=_Provider({"sandbox": "bwrap"}))
    events = _turn(session, lambda: make_repository(tmp_path / "sub" / ".git", FSMONITOR))
    assert [i["path"] for i in _report(events)] == ["sub/.git"]
    assert isinstance(events[-1], Complete) and isinstance(events[-2], Error)
    assert any(isinstance(e, FileChange) and e.kind == "deleted" for e in events)
    assert not (tmp_path / "sub" / ".git").exists()


def test_an_unsandboxed_turn_is_left_alone(tmp_path: Path) -> None:
    session = _Session(workspace=tmp_path, provider=_Provider({"sandbox": "none"}))
    events = _turn(session, lambda: make_repository(tmp_path / "sub" / ".git", FSMONITOR))
    assert not _report(events) and (tmp_path / "sub" / ".git" / "config").is_file()
    assert git_rules_for_session(cast(ProviderSession, session)) is None


def test_the_stored_policy_may_allow_nested_repositories(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text("nested_repositories = true\n")
    store = SQLiteStore(tmp_path / "store.db")
    store.create_session("s-1", provider="claude-code", model=None)
    store.set_run_options("s-1", {"sandbox": "bwrap", "sandbox_policy": str(policy)})
    session = _Session(workspace=ws, provider=_Provider({"sandbox": "bwrap"}), store=store)
    try:
        assert git_rules_for_session(cast(ProviderSession, session)) == GitRules(nested_repositories=True)
        events = _turn(session, lambda: make_repository(ws / "sub" / ".git", FSMONITOR))
    finally:
        store.close()
    assert [i["path"] for i in _report(events)] == ["sub/.git/config"]  # the repository stays, its config goes
    assert (ws / "sub" / ".git" / "HEAD").is_file()
    assert (tmp_path / "store.edits.db").is_file()  # journaled, the quarantine a step of its own


def test_a_policy_that_no_longer_loads_allows_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    store.create_session("s-1", provider="claude-code", model=None)
    store.set_run_options("s-1", {"sandbox_policy": str(tmp_path / "gone.toml")})
    session = _Session(workspace=tmp_path, provider=_Provider({"sandbox": "auto"}), store=store)
    try:
        assert git_rules_for_session(cast(ProviderSession, session)) == GitRules()
    finally:
        store.close()
