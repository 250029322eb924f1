"""The edit journal on its own: recording steps, reverting to any step, refusing drift."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest, PermissionDenied, SandboxViolation
from seamline.sandbox.journal import EditJournal, journal_path_for
from tests.sandbox.conftest import tree_digest


def _track(journal: EditJournal, ws: Path, call: str, paths: list[Path] | None = None) -> object:
    return journal.track(run_id="run-1", workspace=ws, tool="t", call_id=call, paths=paths)


def test_journal_lives_beside_the_store(tmp_path: Path) -> None:
    assert journal_path_for(tmp_path / "store.db") == tmp_path / "store.edits.db"


def test_each_step_reverts_to_the_state_after_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"A0")
    journal = EditJournal(tmp_path / "j.db")
    states = [tree_digest(ws)]
    with _track(journal, ws, "c1"):  # type: ignore[attr-defined]
        (ws / "a.txt").write_bytes(b"A1")
        (ws / "b").mkdir()
        (ws / "b" / "c.bin").write_bytes(bytes(range(256)))
    states.append(tree_digest(ws))
    with _track(journal, ws, "c2", [ws / "b" / "c.bin"]):  # type: ignore[attr-defined]
        (ws / "b" / "c.bin").unlink()
    states.append(tree_digest(ws))
    with _track(journal, ws, "c3"):  # type: ignore[attr-defined]
        os.symlink("a.txt", ws / "ln")
        (ws / "a.txt").chmod(0o600)
    states.append(tree_digest(ws))
    assert [s.paths for s in journal.steps("run-1")] == [("a.txt", "b", "b/c.bin"), ("b/c.bin",), ("a.txt", "ln")]
    for to in (2, 1, 0):
        report = journal.revert("run-1", to_step=to)
        assert report.steps_undone == 1
        assert tree_digest(ws) == states[to]
    assert journal.steps("run-1") == []
    journal.close()


def test_a_failed_call_is_still_journaled(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    journal = EditJournal(tmp_path / "j.db")
    with pytest.raises(RuntimeError), _track(journal, ws, "c1"):  # type: ignore[attr-defined]
        (ws / "half.txt").write_text("half")
        raise RuntimeError("tool failed half-way")
    journal.revert("run-1")
    assert list(ws.iterdir()) == []


def test_drift_is_refused_unless_forced(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    journal = EditJournal(tmp_path / "j.db")
    with _track(journal, ws, "c1"):  # type: ignore[attr-defined]
        (ws / "a.txt").write_text("by the agent")
    (ws / "a.txt").write_text("by a person")
    with pytest.raises(PermissionDenied, match="changed since"):
        journal.revert("run-1")
    assert (ws / "a.txt").read_text() == "by a person"
    journal.revert("run-1", force=True)
    assert not (ws / "a.txt").exists()


def test_bad_requests_are_classified(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    journal = EditJournal(tmp_path / "j.db")
    with pytest.raises(InvalidRequest, match="no journal"):
        journal.revert("unknown")
    with pytest.raises(SandboxViolation):
        with _track(journal, ws, "c1", [tmp_path / "elsewhere.txt"]):  # type: ignore[attr-defined]
            pass
    with _track(journal, ws, "c2"):  # type: ignore[attr-defined]
        pass
    with pytest.raises(SandboxViolation, match="journaled for workspace"):
        with journal.track(run_id="run-1", workspace=tmp_path, tool="t", call_id="c3"):
            pass
    with pytest.raises(InvalidRequest, match="--to"):
        journal.revert("run-1", to_step=-1)
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"garbage" * 100)
    with pytest.raises(InvalidRequest, match="cannot use edit journal"):
        EditJournal(bad)
