"""The journal scales: only changed files are read, and a sparse giant is never read.

Counts, never wall time: ``EditJournal.index`` counts the files and bytes it read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import seamline.sandbox.file_index as file_index
from seamline.errors import InvalidRequest
from seamline.sandbox.journal import EditJournal
from tests.sandbox.conftest import tree_digest


@pytest.fixture(autouse=True)
def _no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # Files made a moment ago are "racily clean" and read again; the counts here are
    # about files the clock has moved past, so the window is closed for these tests.
    monkeypatch.setattr(file_index, "RACY_WINDOW_NS", 0)


def _tree(ws: Path, n: int) -> None:
    for i in range(n):
        folder = ws / f"d{i % 10}" / f"e{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\n")


def test_only_changed_files_are_read_again_even_by_a_new_process(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _tree(ws, 300)
    start = tree_digest(ws)
    journal = EditJournal(tmp_path / "j.db")
    with journal.track(run_id="r1", workspace=ws, tool="shell", call_id="c1"):
        assert journal.index.hashed_files == 300  # the first scan of a workspace reads it once
        (ws / "d1" / "e1" / "f1.txt").write_text("changed\n")
        (ws / "d2" / "new.txt").write_text("new\n")
    assert journal.index.hashed_files == 302  # the scan after: the two changed files only
    with journal.track(run_id="r1", workspace=ws, tool="shell", call_id="c2"):
        pass
    assert journal.index.hashed_files == 302  # nothing changed, nothing read
    journal.close()

    # A later run in a new process: the index lives in the journal file.
    again = EditJournal(tmp_path / "j.db")
    with again.track(run_id="r2", workspace=ws, tool="shell", call_id="c1"):
        (ws / "d3" / "e3" / "f3.txt").write_text("changed too\n")
    assert again.index.hashed_files == 1
    assert [s.paths for s in again.steps("r2")] == [("d3/e3/f3.txt",)]
    again.revert("r2")
    again.revert("r1")
    assert tree_digest(ws) == start
    again.close()


def test_a_sparse_giant_is_never_read(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    giant = ws / "disk.img"
    with giant.open("wb") as fh:
        fh.truncate(8 * 1024**3)  # 8 GiB, all hole
    (ws / "small.txt").write_text("small\n")
    journal = EditJournal(tmp_path / "j.db")
    with journal.track(run_id="r1", workspace=ws, tool="shell", call_id="c1"):
        (ws / "small.txt").write_text("SMALL\n")
    with journal.track(run_id="r1", workspace=ws, tool="write_file", call_id="c2", paths=[giant]):
        with giant.open("r+b") as fh:
            fh.seek(4 * 1024**3)
            fh.write(b"x")
    assert journal.index.hashed_bytes < 1024  # two reads of small.txt, none of the giant
    assert [s.paths for s in journal.steps("r1")] == [("small.txt",), ("disk.img",)]
    # Its old content was never kept: a revert that needs it refuses and says so.
    with pytest.raises(InvalidRequest, match=r"lacks the content of 'disk\.img'.*only its size"):
        journal.revert("r1")
    assert (ws / "small.txt").read_text() == "SMALL\n"
    journal.close()
