"""Later whole-tree scans of a big repository drain an inotify watch instead of walking
(issue 44): they look only at what changed, and journal exactly what a walk would have,
byte for byte back on revert; a folder moved (its watches would name the old paths) or a
changed git index makes the next scan walk again."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from seamline.events import FileChangeKind
from seamline.sandbox.journal import EditJournal, JournalStep
from seamline.sandbox.tree_watch import ENV_SWITCH, watching_enabled
from tests.sandbox.test_journal_git import TRACKED, git, make_repo, old_times

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
    pytest.mark.skipif(not watching_enabled(), reason="not on this machine: no inotify (Linux only)"),
]
_GIT = frozenset({".git"})


def _tree(repo: Path) -> dict[str, bytes | None]:
    """Every path outside .git: a file's bytes (None for a folder)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs:
            out[os.path.relpath(os.path.join(dirpath, name), repo)] = None
        for name in files:
            out[os.path.relpath(os.path.join(dirpath, name), repo)] = Path(dirpath, name).read_bytes()
    return out


def _turn(journal: EditJournal, repo: Path, act: Callable[[], None]) -> tuple[JournalStep, dict[str, FileChangeKind]]:
    heard: dict[str, FileChangeKind] = {}
    with journal.track(
        run_id="r",
        workspace=repo,
        tool="t",
        call_id="c",
        skip_dirs=_GIT,
        number_at_end=True,
        on_change=heard.__setitem__,
        on_ignored_change=heard.__setitem__,
    ):
        act()
    return journal.steps("r")[-1], heard


def _agent(repo: Path) -> None:
    """What one turn of an agent does to the repository."""
    (repo / "src" / "m001.py").write_bytes(b"edited\n")
    (repo / "src" / "m002.py").unlink()
    os.chmod(repo / "src" / "m003.py", 0o755)
    (repo / "pkg" / "deep").mkdir(parents=True)
    (repo / "pkg" / "deep" / "new.py").write_bytes(b"new\n")
    (repo / "src" / "__pycache__").mkdir()
    (repo / "src" / "__pycache__" / "m001.cpython-311.pyc").write_bytes(b"\0bytecode")
    (repo / "build" / "out.o").write_bytes(b"\x7fELF new build\n")
    shutil.rmtree(repo / "build" / "gone")


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "walked"])
def test_a_drained_scan_journals_what_a_walk_does_and_reads_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> None:
    if not watched:
        monkeypatch.setenv(ENV_SWITCH, "0")
    repo = make_repo(tmp_path)
    (repo / "build" / "gone").mkdir()
    (repo / "build" / "gone" / "x.o").write_bytes(b"x")
    old_times(repo)
    want = _tree(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    try:
        _turn(journal, repo, lambda: None)
        read_before = journal.index.hashed_files
        step, heard = _turn(journal, repo, lambda: _agent(repo))
        assert sorted(step.paths) == ["pkg", "pkg/deep", "pkg/deep/new.py", "src/m001.py", "src/m002.py", "src/m003.py"]
        assert sorted(step.ignored) == [
            "build/gone",
            "build/gone/x.o",
            "build/out.o",
            "src/__pycache__",
            "src/__pycache__/m001.cpython-311.pyc",
        ]
        assert heard["src/m002.py"] == "deleted" and heard["src/m001.py"] == "edited" and heard["pkg"] == "created"
        # Read: the edited file, the new one and the one whose mode changed; nothing of the
        # other tracked files, nothing ignored.
        assert journal.index.hashed_files - read_before == 3
        # Watched: one walk (the first scan), three drains; walked: four walks.
        assert (journal.index.walks, journal.index.drains) == ((1, 3) if watched else (4, 0))
        report = journal.revert("r")
        # Ignored files' old content is never kept: left as the run left them; the rest is back.
        assert report.left == ("build/gone/x.o", "build/out.o")
        now = _tree(repo)
        assert now.pop("build/out.o") == b"\x7fELF new build\n"
        assert now.pop("build/gone") is None  # the folder is back, empty: x.o's content was never kept
        assert {k: v for k, v in want.items() if not k.startswith(("build/gone", "build/out.o"))} == now
        assert os.stat(repo / "src" / "m003.py").st_mode & 0o777 != 0o755
    finally:
        journal.close()


def test_after_a_folder_moves_its_files_are_journaled_under_their_new_paths(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    old_times(repo)
    want = _tree(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    try:
        _turn(journal, repo, lambda: None)
        step, _ = _turn(journal, repo, lambda: os.rename(repo / "src", repo / "lib"))
        assert len(step.paths) == 2 * (TRACKED + 1)  # every file and the folder, at both places
        assert journal.index.walks == 2  # the move made the watch let go: the scan after walked
        for k in (5, 6):  # watched again, under the new names
            step, _ = _turn(journal, repo, lambda k=k: (repo / "lib" / f"m{k:03}.py").write_bytes(b"later\n"))
            assert step.paths == (f"lib/m{k:03}.py",)
        assert journal.index.walks == 2
        journal.revert("r")
        assert _tree(repo) == want
    finally:
        journal.close()


def test_a_commit_between_turns_makes_the_next_scan_ask_git_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    try:
        _turn(journal, repo, lambda: None)
        _turn(journal, repo, lambda: None)
        assert journal.index.walks == 1
        (repo / "src" / "m004.py").write_bytes(b"committed\n")
        git(repo, "commit", "--quiet", "-am", "between")
        old_times(repo)
        step, _ = _turn(journal, repo, lambda: (repo / "src" / "m004.py").write_bytes(b"agent\n"))
        assert step.paths == ("src/m004.py",) and journal.index.walks == 2
        journal.revert("r")
        assert (
            hashlib.sha256((repo / "src" / "m004.py").read_bytes()).digest() == hashlib.sha256(b"committed\n").digest()
        )
    finally:
        journal.close()


def _inotify_fds() -> int:
    fds = os.listdir("/proc/self/fd")
    found = 0
    for fd in fds:
        try:
            found += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            continue
    return found


def test_a_scan_that_fails_keeps_no_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not watching_enabled():
        pytest.skip("not on this machine: no inotify")
    import seamline.sandbox.file_index as file_index

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    real_walk = file_index.walk_tree

    def failing_walk(*args: object, **kwargs: object) -> object:
        yield from real_walk(*args, **kwargs)  # type: ignore[arg-type]
        raise OSError("the disk went away")

    monkeypatch.setattr(file_index, "walk_tree", failing_walk)
    before = _inotify_fds()
    journal = EditJournal(tmp_path / "s.edits.db")
    try:
        with pytest.raises(OSError, match="disk went away"):
            with journal.track(run_id="r", workspace=ws, tool="t", call_id="c"):
                pass
        assert _inotify_fds() == before
    finally:
        journal.close()
