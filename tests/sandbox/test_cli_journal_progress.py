"""A long scan of the workspace by an agent CLI's edit journal is shown: before the first
turn of a big repository it takes seconds to minutes, the program has not started yet and
the scan holds the event loop, so without it the terminal stays silent."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import seamline.providers.programs.journal as cli_journal
from seamline.cli.display import TextDisplay, show_journal_scans
from seamline.events import Complete, Event, Text
from seamline.providers.programs.journal import journaled_turn, show_scans
from seamline.sandbox.file_index import PROGRESS_EVERY, ScanProgress
from seamline.sandbox.tree_watch import ENV_SWITCH, watching_enabled
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted

FILES = 2 * PROGRESS_EVERY + 40


async def _turn(ws: Path) -> AsyncIterator[Event]:
    (ws / "made.txt").write_text("made\n")
    yield Text(text="done")
    yield Complete(outcome="completed", stop_reason="end_turn", text="done")


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for k in range(FILES):
        (ws / f"f{k}.txt").write_text(f"{k}\n")
    return ws


def _journaled_turn(tmp_path: Path, ws: Path, show: object) -> list[Event]:
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> list[Event]:
        provider = scripted([])
        session = await provider.open(store=store, workspace=ws)
        if show is not None:
            show(session)  # type: ignore[operator]
        try:
            return [e async for e in journaled_turn(session, "claude-code", _turn(ws))]
        finally:
            await provider.close(session)

    try:
        return asyncio.run(go())
    finally:
        store.close()


def _scans(shown: list[int | None]) -> list[list[int]]:
    """What was shown, one list of counts per scan (each scan ends with a None)."""
    assert shown and shown[-1] is None, shown
    scans: list[list[int]] = [[]]
    for count in shown[:-1]:
        if count is None:
            scans.append([])
        else:
            scans[-1].append(count)
    return scans


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "walked"])
def test_a_long_scan_before_and_after_the_turn_is_shown_then_cleared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> None:
    monkeypatch.setattr(cli_journal, "SCAN_SHOWN_AFTER", 0.0)  # every scan counts as long
    if not watched:
        monkeypatch.setenv(ENV_SWITCH, "0")
    ws = _workspace(tmp_path)
    shown: list[int | None] = []
    events = _journaled_turn(tmp_path, ws, lambda session: show_scans(session, shown.append))
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"
    scans = _scans(shown)
    # The scan before the turn walks the tree; the one after walks it again, or, watched
    # (inotify), looks only at the one path the turn made: too few paths to show.
    assert len(scans) == (1 if watched and watching_enabled() else 2)
    for counts in scans:
        # First told at the first look at the clock; then only larger counts, never past the tree.
        assert counts[0] == PROGRESS_EVERY
        assert counts == sorted(set(counts)) and counts[-1] <= FILES + 1
        assert all(c % PROGRESS_EVERY == 0 for c in counts)


def test_a_scan_nobody_asked_to_see_or_shorter_than_the_threshold_shows_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_journal, "SCAN_SHOWN_AFTER", 0.0)
    ws = _workspace(tmp_path)
    assert isinstance(_journaled_turn(tmp_path, ws, None)[-1], Complete)  # no show_scans: no cost, no call
    monkeypatch.setattr(cli_journal, "SCAN_SHOWN_AFTER", 3600.0)
    shown: list[int | None] = []
    _journaled_turn(tmp_path, ws, lambda session: show_scans(session, shown.append))
    assert shown == []


def test_scan_progress_waits_for_the_threshold_and_redraws_at_most_every_interval() -> None:
    now = [100.0]
    shown: list[int | None] = []
    progress = ScanProgress(shown.append, after=1.0, every=0.1, clock=lambda: now[0])
    progress.begin()
    progress.seen(256)
    now[0] += 0.5
    progress.seen(512)
    progress.end()
    assert shown == []  # a scan under a second: nothing shown, nothing to clear
    progress.begin()
    for step, count in [(0.5, 256), (0.6, 512), (0.05, 768), (0.06, 1024), (0.2, 1280)]:
        now[0] += step
        progress.seen(count)
    progress.end()
    assert shown == [512, 1024, 1280, None]


def test_the_terminal_shows_the_scan_line_and_clears_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_journal, "SCAN_SHOWN_AFTER", 0.0)
    err = io.StringIO()
    display = TextDisplay(out=io.StringIO(), err=err, progress=True)
    events = _journaled_turn(tmp_path, _workspace(tmp_path), lambda session: show_journal_scans(display, session))
    drawn = err.getvalue()
    assert f"scanning the workspace for the edit journal… {PROGRESS_EVERY:,} files" in drawn
    assert drawn.endswith("\r\x1b[K")  # the line cleared once the scan after the turn was over
    assert isinstance(events[-1], Complete)
    quiet = io.StringIO()  # not a terminal (or --json): nothing drawn
    _journaled_turn(
        tmp_path, tmp_path / "ws", lambda s: show_journal_scans(TextDisplay(out=io.StringIO(), err=quiet), s)
    )
    assert quiet.getvalue() == ""
