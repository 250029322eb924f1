"""The edit journal for agents that run their own tools (agent CLIs, ACP agents): each turn
is one journaled step, the difference between a scan of the workspace before the turn and
after it, so ``seamline revert RUN`` undoes what the agent changed, byte for byte, with the
same code that undoes a model-API run.

The journal is the one beside the session store (``store.db`` -> ``store.edits.db``),
opened at a session's first turn and closed with the session; a session without a store
file (no store, ``:memory:``, PostgreSQL) is not journaled. The
scan reads only files whose stat changed since the last scan (the persistent stat index of
:mod:`seamline.sandbox.file_index`), leaves ``.git`` out, and keeps no content over the
journal's size bound; in a git repository it reads no tracked file unchanged since the
index and looks at ignored paths by stat only (:mod:`seamline.sandbox.git_view`), whose
changes are journaled but not reported as ``file_change`` events. Changes the agent's own events did not report become
``file_change`` events before the turn's ``complete``. A scan that runs longer than
:data:`SCAN_SHOWN_AFTER` is shown to whoever asked with :func:`show_scans` (the CLI's
terminal line): a big repository's first scan takes seconds to minutes before the program
even starts.

A sandboxed turn (the program in the envelope) is also checked for git repositories and
configuration it left in the workspace (:mod:`seamline.sandbox.git_quarantine`), from what
the journal's scans saw, or, with no journal, from a walk of its own: what it quarantines
is reported (a ``raw`` ``{"git_quarantine": [...]}``, ``file_change`` events and a
``sandbox`` ``error``) before the ``complete``, and journaled as a step of its own. The
session's ``--sandbox-policy`` (its stored ``sandbox_policy``) may allow nested
repositories (``nested_repositories = true``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Final

from seamline.errors import SeamlineError
from seamline.events import Complete, Event, FileChange, FileChangeKind
from seamline.providers.base import ProviderSession
from seamline.sandbox.file_index import ScanProgress
from seamline.sandbox.git_quarantine import GitRules, GitWatch, QuarantineReport
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sandbox.policy import load_policy

__all__ = ["SCAN_SHOWN_AFTER", "git_rules_for_session", "journal_for_session", "journaled_turn", "show_scans"]

SKIP_DIRS: Final = frozenset({".git"})
_JOURNAL_KEY: Final = "edit_journal"
_GIT_RULES_KEY: Final = "git_rules"
_SCANS_SHOWN_KEY: Final = "journal_scans_shown"
#: Seconds a scan of the workspace runs before :func:`show_scans`'s ``show`` hears of it.
SCAN_SHOWN_AFTER = 1.0


def show_scans(session: ProviderSession, show: Callable[[int | None], None]) -> None:
    """Have ``show`` hear of the session's journal scans that run longer than
    :data:`SCAN_SHOWN_AFTER` seconds: the count of paths walked so far, a few times a
    second, then ``None`` once the scan is over. The scans run before and after each turn
    and block the event loop while they run (no spinner turns), so ``show`` draws there and
    then; it must be quick and must not raise."""
    session.state[_SCANS_SHOWN_KEY] = show


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
    until the scan after it is recorded (and, sandboxed, the git check has run).

    When this ends or is closed, the generators under it are closed then and there: left to
    the garbage collector, a turn's clean-up (its approval socket, its state) ran in the
    middle of the next turn of the session and stopped that turn's."""
    outer = _journaled(session, tool, inner)
    try:
        async for event in outer:
            yield event
    finally:
        await outer.aclose()
        aclose = getattr(inner, "aclose", None)
        if aclose is not None:
            await aclose()


async def _journaled(session: ProviderSession, tool: str, inner: AsyncIterator[Event]) -> AsyncGenerator[Event, None]:
    workspace = (session.workspace or Path.cwd()).resolve()
    journal = journal_for_session(session)
    rules = git_rules_for_session(session)
    if not workspace.is_dir() or (journal is None and rules is None):
        async for event in inner:
            yield event
        return
    if journal is None:
        assert rules is not None
        async for event in _watched_turn(workspace, rules, inner):
            yield event
        return
    watch = GitWatch(workspace, rules, journaled=True, skip_dirs=SKIP_DIRS) if rules is not None else None
    found: list[tuple[str, FileChangeKind]] = []
    reported: set[str] = set()
    held: Complete | None = None
    report: QuarantineReport | None = None

    def heard(rel: str, kind: FileChangeKind) -> None:
        found.append((rel, kind))
        if watch is not None:
            watch.on_change(rel, kind)

    shown = session.state.get(_SCANS_SHOWN_KEY)
    progress = ScanProgress(shown, after=SCAN_SHOWN_AFTER) if callable(shown) else None
    try:
        with journal.track(
            run_id=session.session_id,
            workspace=workspace,
            tool=tool,
            call_id=f"turn-{session.turn}",
            on_change=heard,
            # Ignored paths (a .pyc, a virtual environment): journaled, not reported; the git check hears them.
            on_ignored_change=watch.on_change if watch is not None else None,
            skip_dirs=SKIP_DIRS,
            number_at_end=True,  # one turn of a session at a time: no overlapping steps to order
            before_notes=watch.before_notes if watch is not None else None,
            after_notes=watch.after_notes if watch is not None else None,
            progress=progress,
        ):
            if watch is not None:
                watch.begin()
            async for event in inner:
                if isinstance(event, Complete):
                    held = event
                    continue
                if isinstance(event, FileChange) and event.kind != "read":
                    reported.add(_absolute(workspace, event.path))
                yield event
    finally:
        # Even when the turn failed or its consumer left: the host's next git comes anyway.
        if watch is not None:
            report = watch.settle(journal=journal, run_id=session.session_id, call_id=f"turn-{session.turn}")
    for rel, kind in found:
        path = str(workspace / rel)
        if path not in reported:
            yield FileChange(path=path, kind=kind)
    if report is not None:
        for event in report.events(absolute=True):
            yield event
    if held is not None:
        yield held


async def _watched_turn(workspace: Path, rules: GitRules, inner: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """A sandboxed turn with no journal: the git check alone, on walks of its own."""
    watch = GitWatch(workspace, rules, journaled=False)
    held: Complete | None = None
    report = QuarantineReport(workspace)
    try:
        watch.begin()
        async for event in inner:
            if isinstance(event, Complete):
                held = event
                continue
            yield event
    finally:
        report = watch.settle()
    for event in report.events(absolute=True):
        yield event
    if held is not None:
        yield held


def git_rules_for_session(session: ProviderSession) -> GitRules | None:
    """What a sandboxed session's turns may leave of git in the workspace (its stored
    ``--sandbox-policy``, read once; a policy that no longer loads allows nothing); None
    when the program runs outside the envelope (``sandbox`` option ``none``)."""
    values = getattr(session.provider, "option_values", None)
    mode = values.get("sandbox") if isinstance(values, dict) else None
    if not mode or mode == "none":
        return None
    kept = session.state.get(_GIT_RULES_KEY)
    if isinstance(kept, GitRules):
        return kept
    rules = GitRules()
    policy_file: object = None
    if session.store is not None:
        try:
            record = session.store.get(session.session_id)
        except SeamlineError:
            record = None
        policy_file = record.run_options.get("sandbox_policy") if record is not None else None
    if isinstance(policy_file, str) and policy_file:
        try:
            # The envelope always mounts the workspace's own .git configuration read-only.
            rules = GitRules(nested_repositories=load_policy(policy_file).nested_repositories)
        except SeamlineError:
            rules = GitRules()
    session.state[_GIT_RULES_KEY] = rules
    return rules


def _absolute(workspace: Path, path: str) -> str:
    full = Path(path) if os.path.isabs(path) else workspace / path
    return os.path.normpath(full)
