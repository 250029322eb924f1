"""The edit journal for agents that run their own tools (agent CLIs, ACP agents): each turn
is one journaled step, the difference between a scan of the workspace before the turn and
after it, so ``seamline revert RUN`` undoes what the agent changed, byte for byte, with the
same code that undoes a model-API run.

The journal is the one beside the session store (``store.db`` -> ``store.edits.db``),
opened at a session's first turn and closed with the session; a session without a store
file (no store, ``:memory:``, PostgreSQL) is not journaled. The
scan reads only files whose stat changed since the last scan (the persistent stat index of
:mod:`seamline.sandbox.file_index`), leaves ``.git`` out, and keeps no content over the
journal's size bound. Changes the agent's own events did not report become
``file_change`` events before the turn's ``complete``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from seamline.events import Complete, Event, FileChange, FileChangeKind
from seamline.providers.base import ProviderSession
from seamline.sandbox.journal import EditJournal, journal_path_for

__all__ = ["journal_for_session", "journaled_turn"]

SKIP_DIRS: Final = frozenset({".git"})
_JOURNAL_KEY: Final = "edit_journal"


def journal_for_session(session: ProviderSession) -> EditJournal | None:
    """The edit journal beside the session's store file, opened once per session and closed
    with it; None when it has no store file."""
    kept = session.state.get(_JOURNAL_KEY)
    if isinstance(kept, EditJournal):
        return kept
    store = session.store
    location = getattr(store, "location", None) if store is not None else None
    if not isinstance(location, str) or not location or location == ":memory:" or "://" in location:
        return None
    if not os.path.isfile(location):
        return None
    journal = EditJournal(journal_path_for(location))
    session.state[_JOURNAL_KEY] = journal
    session.closers.append(lambda: _close(session, journal))
    return journal


def _close(session: ProviderSession, journal: EditJournal) -> None:
    session.state.pop(_JOURNAL_KEY, None)
    journal.close()


async def journaled_turn(session: ProviderSession, tool: str, inner: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """``inner``'s events, the turn journaled as one step named ``tool`` (``call_id``
    ``turn-N``), recorded in one transaction after the turn. The turn's ``complete`` is held
    until the scan after it is recorded."""
    workspace = (session.workspace or Path.cwd()).resolve()
    journal = journal_for_session(session)
    if journal is None or not workspace.is_dir():
        async for event in inner:
            yield event
        return
    found: list[tuple[str, FileChangeKind]] = []
    reported: set[str] = set()
    held: Complete | None = None
    with journal.track(
        run_id=session.session_id,
        workspace=workspace,
        tool=tool,
        call_id=f"turn-{session.turn}",
        on_change=lambda rel, kind: found.append((rel, kind)),
        skip_dirs=SKIP_DIRS,
        number_at_end=True,  # one turn of a session at a time: no overlapping steps to order
    ):
        async for event in inner:
            if isinstance(event, Complete):
                held = event
                continue
            if isinstance(event, FileChange) and event.kind != "read":
                reported.add(_absolute(workspace, event.path))
            yield event
    for rel, kind in found:
        path = str(workspace / rel)
        if path not in reported:
            yield FileChange(path=path, kind=kind)
    if held is not None:
        yield held


def _absolute(workspace: Path, path: str) -> str:
    full = Path(path) if os.path.isabs(path) else workspace / path
    return os.path.normpath(full)
