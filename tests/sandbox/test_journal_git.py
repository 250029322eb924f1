"""The edit journal in a git work tree (issue 44, big repositories): tracked files
unchanged since the index are not copied (git's object store has them), a changed one's
content is copied out of git when the step is recorded and comes back byte for byte,
paths git ignores are stat only and are not reported as the agent's changes, and
seamline's own preparation of ``.git`` for the sandbox is never the command's change."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.sandbox.file_index import PROGRESS_EVERY, ScanProgress
from seamline.sandbox.git_view import PendingGitView
from seamline.sandbox.journal import EditJournal

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

TRACKED = 300
_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(cwd: Path, *args: str) -> str:
    who = ["-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    done = subprocess.run(["git", *who, *args], cwd=cwd, env=_ENV, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(root: Path) -> Path:
    """TRACKED committed files, a .gitignore for *.pyc and build/, an ignored build/."""
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    for k in range(TRACKED):
        (repo / "src" / f"m{k:03}.py").write_bytes(f"value = {k}\n".encode() * 10 + bytes([k % 256]))
    (repo / ".gitignore").write_text("*.pyc\nbuild/\n")
    git(repo, "init", "--quiet")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "init")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_bytes(b"\x7fELF old build\n")
    return repo


def old_times(repo: Path) -> None:
    """Let the files be older than the journal's trust margin (50 ms): a file changed
    as git looks is read, not trusted."""
    time.sleep(0.1)


def blob_keys(journal: EditJournal) -> list[str]:
    """The contents the journal file keeps."""
    with contextlib.closing(sqlite3.connect(journal.path)) as db:
        return [str(r[0]) for r in db.execute("SELECT hash FROM blobs")]


def test_tracked_files_unchanged_since_the_index_are_neither_read_nor_copied(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "src" / "m001.py").write_text("changed before the run\n")  # differs from the index
    for k in range(4):
        (repo / f"notes{k}.txt").write_text(f"untracked {k}\n")
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        pass
    # Read and kept: the changed tracked file, the 4 untracked ones and the .gitignore? No:
    # .gitignore is tracked and unchanged. The ignored build/out.o is never read.
    assert journal.index.hashed_files == 5, journal.index.hashed_files
    assert len(blob_keys(journal)) == 5
    assert journal.steps("r")[0].paths == ()


def test_a_tracked_file_changed_or_deleted_comes_back_from_gits_store(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    old_times(repo)
    edited, gone = repo / "src" / "m007.py", repo / "src" / "m008.py"
    want_edited, want_gone = edited.read_bytes(), gone.read_bytes()
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        edited.write_bytes(b"rewritten\n")
        gone.unlink()
    # Later the user rewrites history and prunes: the old blobs leave git's object store.
    forget_history(repo)
    assert subprocess.run(["git", "cat-file", "-e", git_blob(want_edited)], cwd=repo, env=_ENV).returncode != 0
    assert journal.steps("r")[0].paths == ("src/m007.py", "src/m008.py")
    # Only the two changed files were copied, out of git, when the step was recorded.
    assert sorted(k for k in blob_keys(journal) if k.startswith("git:")) == sorted(
        f"git:{git_blob(b)}" for b in (want_edited, want_gone)
    )
    report = journal.revert("r")
    assert edited.read_bytes() == want_edited and gone.read_bytes() == want_gone
    assert sorted(report.restored) == ["src/m007.py", "src/m008.py"]


def forget_history(repo: Path) -> None:
    git(repo, "checkout", "--quiet", "--orphan", "other")
    git(repo, "read-tree", "--empty")
    git(repo, "branch", "-D", "--quiet", "main")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "--quiet", "--prune=now")


def test_a_blob_git_lost_during_the_step_makes_revert_refuse_and_say_so(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    old_times(repo)
    edited = repo / "src" / "m007.py"
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        edited.write_bytes(b"rewritten\n")
        forget_history(repo)  # the agent itself prunes the blob before the step is recorded
    with pytest.raises(InvalidRequest, match="git no longer had"):
        journal.revert("r")
    assert edited.read_bytes() == b"rewritten\n"  # nothing reverted


def git_blob(data: bytes) -> str:
    from seamline.sandbox.git_view import git_blob_id

    return git_blob_id(data)


def test_an_untracked_file_changed_comes_back(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    notes = repo / "notes.txt"
    notes.write_bytes(b"mine, not committed\n")
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        notes.write_bytes(b"the agent's\n")
    journal.revert("r")
    assert notes.read_bytes() == b"mine, not committed\n"


def test_ignored_paths_are_journaled_by_stat_not_reported_and_removed_when_created(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    heard: list[str] = []
    quiet: list[str] = []
    with journal.track(
        run_id="r",
        workspace=repo,
        tool="t",
        call_id="c",
        skip_dirs=frozenset({".git"}),
        on_change=lambda rel, kind: heard.append(rel),
        on_ignored_change=lambda rel, kind: quiet.append(rel),
    ):
        (repo / "made.txt").write_text("made\n")
        (repo / "src" / "__pycache__").mkdir()
        (repo / "src" / "__pycache__" / "m001.cpython-311.pyc").write_bytes(b"\x00bytecode")
        (repo / "build" / "out.o").write_bytes(b"\x7fELF new build\n")
    assert heard == ["made.txt"]
    assert sorted(quiet) == ["build/out.o", "src/__pycache__", "src/__pycache__/m001.cpython-311.pyc"]
    step = journal.steps("r")[0]
    assert step.paths == ("made.txt",)
    assert sorted(step.ignored) == sorted(quiet)
    assert journal.index.hashed_files == 1  # made.txt: nothing ignored was read
    report = journal.revert("r")
    assert not (repo / "made.txt").exists() and not (repo / "src" / "__pycache__").exists()
    # The old build output was never kept: it is left as the run left it, and said so.
    assert report.left == ("build/out.o",)
    assert (repo / "build" / "out.o").read_bytes() == b"\x7fELF new build\n"


def test_a_folder_that_is_no_repository_is_scanned_as_before(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.pyc").write_bytes(b"kept\n")
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=plain, tool="t", call_id="c"):
        (plain / "a.pyc").write_bytes(b"changed\n")
    assert journal.steps("r")[0].paths == ("a.pyc",)
    journal.revert("r")
    assert (plain / "a.pyc").read_bytes() == b"kept\n"


def test_a_file_git_is_told_to_assume_unchanged_is_read_all_the_same(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    hidden = repo / "src" / "m005.py"
    git(repo, "update-index", "--assume-unchanged", "src/m005.py")
    hidden.write_bytes(b"changed, and git is told not to look\n")
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        hidden.write_bytes(b"the agent's\n")
    journal.revert("r")
    assert hidden.read_bytes() == b"changed, and git is told not to look\n"


def test_the_repositorys_own_configuration_runs_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    planted = tmp_path / "PWNED"
    git(repo, "config", "core.fsmonitor", f"touch {planted}; false")
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        (repo / "src" / "m003.py").write_text("x\n")
    assert not planted.exists()
    assert journal.index.hashed_files == 1  # git answered: the scan still trusted the index


def test_a_long_scan_in_a_repository_is_shown(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    journal = EditJournal(tmp_path / "s.edits.db")
    shown: list[int | None] = []
    progress = ScanProgress(shown.append, after=0.0, every=0.0)
    with journal.track(
        run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"}), progress=progress
    ):
        pass
    assert PROGRESS_EVERY in shown and shown[-1] is None


def test_a_file_known_as_gits_blob_is_read_again_once_the_index_lets_the_blob_go(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    old_times(repo)
    edited = repo / "src" / "m007.py"
    want = edited.read_bytes()
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="one", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        pass  # the journal now knows src/m007.py as git's blob, by its stat
    forget_history(repo)  # between two runs: the blob leaves git's store, the file is untouched
    old_times(repo)
    with journal.track(run_id="two", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        edited.write_bytes(b"rewritten\n")
    journal.revert("two")
    assert edited.read_bytes() == want


def index_rows(journal: EditJournal) -> int:
    """The stat keys the journal file holds (what a later process trusts without reading)."""
    with contextlib.closing(sqlite3.connect(journal.path)) as db:
        return int(db.execute("SELECT COUNT(*) FROM file_index").fetchone()[0])


def test_the_scan_before_a_turn_leaves_the_stat_keys_to_the_scan_after_it(tmp_path: Path) -> None:
    """The prompt waits for the scan before the turn; writing a row per tracked file then
    cost a fifth of it. The rows are written by the scan after the turn."""
    repo = make_repo(tmp_path)
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal.track(run_id="r", workspace=repo, tool="t", call_id="c", skip_dirs=frozenset({".git"})):
        assert index_rows(journal) == 0
    assert index_rows(journal) == TRACKED + 1  # the sources and .gitignore, git's blobs
    journal.close()


def test_closing_the_journal_writes_the_stat_keys_its_last_scan_found(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    old_times(repo)
    journal = EditJournal(tmp_path / "s.edits.db")
    with journal._db:
        journal._db.execute("BEGIN")
        journal.index.scan(
            str(repo),
            None,
            skip="s.edits.db",
            max_bytes=1 << 20,
            skip_dirs=frozenset({".git"}),
            view=PendingGitView(str(repo)),
        )
    assert index_rows(journal) == 0
    journal.close()
    assert index_rows(journal) == TRACKED + 1
