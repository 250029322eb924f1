"""The edit journal on its own: recording steps, reverting to any step, refusing drift."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest, PermissionDenied, SandboxViolation
from seamline.sandbox.journal import EditJournal, journal_path_for
from tests.sandbox.conftest import tree_digest


def _track(journal: EditJournal, ws: Path, call: str, paths: list[Path] | None = None) -> AbstractContextManager[None]:
    return journal.track(run_id="run-1", workspace=ws, tool="t", call_id=call, paths=paths)


def test_journal_lives_beside_the_store(tmp_path: Path) -> None:
    assert journal_path_for(tmp_path / "store.db") == tmp_path / "store.edits.db"


def test_each_step_reverts_to_the_state_after_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"A0")
    journal = EditJournal(tmp_path / "j.db")
    states = [tree_digest(ws)]
    with _track(journal, ws, "c1"):
        (ws / "a.txt").write_bytes(b"A1")
        (ws / "b").mkdir()
        (ws / "b" / "c.bin").write_bytes(bytes(range(256)))
    states.append(tree_digest(ws))
    with _track(journal, ws, "c2", [ws / "b" / "c.bin"]):
        (ws / "b" / "c.bin").unlink()
    states.append(tree_digest(ws))
    with _track(journal, ws, "c3"):
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
    with pytest.raises(RuntimeError), _track(journal, ws, "c1"):
        (ws / "half.txt").write_text("half")
        raise RuntimeError("tool failed half-way")
    journal.revert("run-1")
    assert list(ws.iterdir()) == []


def test_drift_is_refused_unless_forced(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    journal = EditJournal(tmp_path / "j.db")
    with _track(journal, ws, "c1"):
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
        with _track(journal, ws, "c1", [tmp_path / "elsewhere.txt"]):
            pass
    with _track(journal, ws, "c2"):
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


def test_files_over_the_cap_are_fingerprinted_and_revert_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import seamline.sandbox.journal as journal_module

    monkeypatch.setattr(journal_module, "MAX_JOURNALED_BYTES", 10)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(b"x" * 100)
    (ws / "small.txt").write_text("small")
    journal = EditJournal(tmp_path / "j.db")
    with _track(journal, ws, "c1"):
        (ws / "big.bin").write_bytes(b"y" * 100)
        (ws / "small.txt").write_text("SMALL")
    with pytest.raises(InvalidRequest, match=r"lacks the content of 'big\.bin'"):
        journal.revert("run-1")
    assert (ws / "small.txt").read_text() == "SMALL"  # refused before anything changed


def test_overlapping_calls_revert_exactly(tmp_path: Path) -> None:
    """Parallel tool calls overlap; steps numbered at start make a full revert exact."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f1").write_text("original")
    start = tree_digest(ws)
    journal = EditJournal(tmp_path / "j.db")
    with _track(journal, ws, "shell-call"):
        (ws / "f1").write_text("by the shell")
        with _track(journal, ws, "write-call", [ws / "f1", ws / "f2"]):
            (ws / "f1").write_text("by write_file")
            (ws / "f2").write_text("new")
        (ws / "f3").write_text("late")
    assert [s.call_id for s in journal.steps("run-1")] == ["shell-call", "write-call"]
    journal.revert("run-1")
    assert tree_digest(ws) == start


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_a_folder_replaced_by_a_symlink_is_restored_exactly(tmp_path: Path, where: str) -> None:
    ws = tmp_path / "ws"
    (ws / "d" / "sub").mkdir(parents=True)
    (ws / "d" / "f.txt").write_text("mine")
    (ws / "d" / "sub" / "g.txt").write_text("deep")
    (ws / "other").mkdir()
    (ws / "other" / "x.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("host file")
    start, host_before = tree_digest(ws), tree_digest(outside)
    journal = EditJournal(tmp_path / "j.db")
    with _track(journal, ws, "c1"):
        import shutil

        shutil.rmtree(ws / "d")
        os.symlink("other" if where == "inside" else str(outside), ws / "d")
    report = journal.revert("run-1")
    assert report.steps_undone == 1
    assert tree_digest(ws) == start
    assert tree_digest(outside) == host_before
    journal.close()


def test_a_symlink_replaced_by_a_folder_is_restored_exactly(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "other").mkdir(parents=True)
    (ws / "other" / "x.txt").write_text("x")
    os.symlink("other", ws / "d")
    start = tree_digest(ws)
    journal = EditJournal(tmp_path / "j.db")
    with _track(journal, ws, "c1"):
        (ws / "d").unlink()
        (ws / "d").mkdir()
        (ws / "d" / "x.txt").write_text("a new file in a real folder")
    journal.revert("run-1")
    assert tree_digest(ws) == start
    assert (ws / "other" / "x.txt").read_text() == "x"


def test_a_revert_that_cannot_be_exact_changes_nothing(tmp_path: Path) -> None:
    """The plan is checked whole before the first change: a path whose folder would have
    to stay a link (it was a link before the run too) is refused, nothing touched."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("A0")
    journal = EditJournal(tmp_path / "j.db")
    with _track(journal, ws, "c1"):
        (ws / "a.txt").write_text("A1")
    with _track(journal, ws, "c2"):
        (ws / "d").mkdir()
        (ws / "d" / "f.txt").write_text("f")
    # Forge a journal that asks for d/f.txt inside a d that must be a link.
    journal._db.execute("UPDATE entries SET before_kind = 'link', before_data = '/etc' WHERE path = 'd'")
    journal._db.execute("UPDATE entries SET before_kind = 'file', before_data = after_data WHERE path = 'd/f.txt'")
    now = tree_digest(ws)
    with pytest.raises(SandboxViolation, match=r"d/f\.txt"):
        journal.revert("run-1")
    assert tree_digest(ws) == now
