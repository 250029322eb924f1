"""The edit journal: every change a tool makes to the workspace, with what was there before.

The journal is one SQLite file beside the session store (``store.db`` ->
``store.edits.db``). A *run* is a session id (the ``session_id`` of the ``session``
event); each journaled tool call of the run is a *step*, numbered from 1. For each path a
step changed, the journal keeps the state before (absent, a file with its bytes and mode,
a symlink with its target, a folder with its mode) and a fingerprint of the state after.
File contents live once each, by SHA-256, in a blobs table.

``write_file`` and ``edit_file`` journal the one path they touch; ``shell`` journals the
difference between a scan of the workspace before and after the command (a scan reads
only files whose stat changed: see :mod:`seamline.sandbox.file_index`; in a git repository,
no tracked file unchanged since the index and no ignored path: see
:mod:`seamline.sandbox.git_view`). A revert is
planned whole and checked before it changes anything (:mod:`seamline.sandbox.revert_plan`). :meth:`EditJournal.revert`
walks the steps back, newest first, so the workspace returns byte for byte to how it was
before the run, or after a given step.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest, PermissionDenied, SandboxViolation
from seamline.events import FileChangeKind
from seamline.sandbox.file_index import ABSENT, FileIndex, PathState, ScanNotes, ScanProgress
from seamline.sandbox.git_view import GIT_PREFIX, IGNORED_DIR, IGNORED_PREFIX, GitView, PendingGitView, read_git_blobs
from seamline.sandbox.revert_plan import apply_plan, check_plan, plan_restore, real_folders, safe_rel

__all__ = ["EditJournal", "JournalStep", "PathState", "RevertReport", "journal_path_for"]

#: Files larger than this are fingerprinted but their content is not kept.
MAX_JOURNALED_BYTES: Final = 64 * 1024 * 1024
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, workspace TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, tool TEXT NOT NULL, call_id TEXT NOT NULL, at REAL NOT NULL,
  reverted_at REAL, PRIMARY KEY (run_id, step));
CREATE TABLE IF NOT EXISTS entries (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, seq INTEGER NOT NULL, path TEXT NOT NULL,
  before_kind TEXT NOT NULL, before_data TEXT, before_mode INTEGER,
  after_kind TEXT NOT NULL, after_data TEXT, after_mode INTEGER,
  PRIMARY KEY (run_id, step, seq));
CREATE TABLE IF NOT EXISTS blobs (hash TEXT PRIMARY KEY, data BLOB NOT NULL);
"""


def journal_path_for(store_path: str | os.PathLike[str]) -> Path:
    """Where the journal of a session store lives: beside it, ``<stem>.edits.db``."""
    store = Path(store_path)
    return store.with_name(f"{store.stem}.edits.db")


@dataclass(frozen=True, slots=True)
class JournalStep:
    """One journaled tool call and the paths it changed."""

    step: int
    tool: str
    call_id: str
    paths: tuple[str, ...]
    #: Paths git ignores that the step changed (stat only: created ones are removed by a revert).
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RevertReport:
    """What a revert did."""

    run_id: str
    workspace: Path
    to_step: int
    steps_undone: int
    restored: tuple[str, ...]
    #: Ignored files changed or deleted by the run, whose content was never kept: left as they are.
    left: tuple[str, ...] = ()


class EditJournal:
    """The journal file; see the module docstring."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            # Stat keys and hashes, kept in this file: only changed files are read again.
            self.index = FileIndex(self._db)
            self._runs: dict[str, str] = {}  # run id -> its workspace, as journaled
        except sqlite3.DatabaseError as exc:
            raise InvalidRequest(f"cannot use edit journal {self.path}: {exc}") from None

    def close(self) -> None:
        self.index.close()
        self._db.close()

    # -- recording -----------------------------------------------------------------------

    @contextlib.contextmanager
    def track(
        self,
        *,
        run_id: str,
        workspace: Path,
        tool: str,
        call_id: str,
        paths: list[Path] | None = None,
        on_change: Callable[[str, FileChangeKind], None] | None = None,
        skip_dirs: frozenset[str] = frozenset(),
        number_at_end: bool = False,
        before_notes: ScanNotes | None = None,
        after_notes: ScanNotes | None = None,
        progress: ScanProgress | None = None,
        on_ignored_change: Callable[[str, FileChangeKind], None] | None = None,
    ) -> Iterator[None]:
        """Journal one tool call: ``paths`` (inside ``workspace``) or, with None, the whole tree
        (less the folders named in ``skip_dirs``, such as ``.git``).

        ``on_change(relpath, kind)`` hears each change found (kind: created, edited, deleted).
        The step is recorded even when the call fails half-way. Steps are numbered when
        they start, so that calls that overlap (parallel tool calls) are undone in reverse
        start order and the earliest "before" is restored last; ``number_at_end`` numbers
        the step in the transaction that records it (one write transaction, not two), for
        callers whose steps never overlap (a session's turns). ``before_notes`` and
        ``after_notes`` hear what the scans before and after the call left out and read
        (the git check of :mod:`seamline.sandbox.git_quarantine` needs no walk of its own).
        ``progress`` hears how far each of the two scans has come, when one runs long.

        In a git work tree a whole-tree scan asks git first (:mod:`seamline.sandbox.git_view`):
        tracked files unchanged since the index are not read and their content is copied
        out of git's object store only when the step changed them; paths git ignores are
        stat only, and their changes go to ``on_ignored_change`` instead of ``on_change``.
        """
        root = workspace.resolve()
        self._ensure_run(run_id, root)
        step = None if number_at_end else self._reserve_step(run_id, tool, call_id)
        # A single path brings its folders: write_file may create them, and revert removes them.
        rels = None if paths is None else list(dict.fromkeys(a for p in paths for a in _with_ancestors(_rel(root, p))))
        # A watched workspace's scan drains the watch: git was asked at its first walk.
        pending = PendingGitView(str(root)) if rels is None and not self.index.watching(str(root)) else None
        before = self._scan(root, rels, skip_dirs, before_notes, progress, pending)
        view = pending.get() if pending is not None else None
        try:
            yield
        finally:
            self._record(
                run_id,
                step,
                root,
                rels,
                skip_dirs,
                before,
                (on_change, on_ignored_change),
                tool=tool,
                call_id=call_id,
                notes=after_notes,
                progress=progress,
                view=view,
            )

    def _ensure_run(self, run_id: str, root: Path) -> None:
        known = self._runs.get(run_id)
        if known is None:
            row = self._db.execute("SELECT workspace FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                self._db.execute("INSERT INTO runs VALUES (?, ?, ?)", (run_id, str(root), time.time()))
                known = str(root)
            else:
                known = str(row[0])
            self._runs[run_id] = known
        if known != str(root):
            raise SandboxViolation(f"run {run_id} is journaled for workspace {known}, not {root}")

    def _scan(
        self,
        root: Path,
        rels: list[str] | None,
        skip_dirs: frozenset[str] = frozenset(),
        notes: ScanNotes | None = None,
        progress: ScanProgress | None = None,
        view: GitView | PendingGitView | None = None,
    ) -> dict[str, PathState]:
        # One transaction for every blob a scan stores, not one per file.
        with self._db:
            self._db.execute("BEGIN")
            return self.index.scan(
                str(root),
                rels,
                skip=self.path.name,
                max_bytes=MAX_JOURNALED_BYTES,
                skip_dirs=skip_dirs,
                notes=notes,
                progress=progress,
                view=view,
            )

    def _reserve_step(self, run_id: str, tool: str, call_id: str) -> int:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            return self._new_step(run_id, tool, call_id)

    def _new_step(self, run_id: str, tool: str, call_id: str) -> int:
        row = self._db.execute("SELECT COALESCE(MAX(step), 0) FROM steps WHERE run_id = ?", (run_id,)).fetchone()
        step = int(row[0]) + 1
        self._db.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?, NULL)", (run_id, step, tool, call_id, time.time()))
        return step

    def _record(
        self,
        run_id: str,
        step: int | None,
        root: Path,
        rels: list[str] | None,
        skip_dirs: frozenset[str],
        before: dict[str, PathState],
        hearers: tuple[Callable[[str, FileChangeKind], None] | None, Callable[[str, FileChangeKind], None] | None],
        *,
        tool: str,
        call_id: str,
        notes: ScanNotes | None = None,
        progress: ScanProgress | None = None,
        view: GitView | None = None,
    ) -> None:
        """The scan after the call and the step's entries (and, ``step`` None, the step
        itself): one write transaction. The content of a changed file that was git's
        (``git:<id>``) is copied out of git's object store here, while git still has it."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            after = self.index.scan(
                str(root),
                rels,
                skip=self.path.name,
                max_bytes=MAX_JOURNALED_BYTES,
                skip_dirs=skip_dirs,
                notes=notes,
                progress=progress,
                view=view,
            )
            if step is None:
                step = self._new_step(run_id, tool, call_id)
            # Two scans of one watch differ only where the later one looked again.
            pool = self.index.changed_between(before, after)
            if pool is None:
                pool = set(before) | set(after)
            changed = sorted(p for p in pool if before.get(p, ABSENT) != after.get(p, ABSENT))
            self._keep_git_content(root, [before[p] for p in changed if p in before])
            for seq, rel in enumerate(changed):
                b, a = before.get(rel, ABSENT), after.get(rel, ABSENT)
                self._db.execute(
                    "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, step, seq, rel, b.kind, b.data, b.mode, a.kind, a.data, a.mode),
                )
        on_change, on_ignored = hearers
        for rel in changed:
            b, a = before.get(rel, ABSENT), after.get(rel, ABSENT)
            if a.kind == "dir" and b.kind == "dir":
                continue
            hear = on_ignored if _ignored(b) or _ignored(a) else on_change
            if hear is not None:
                hear(rel, "created" if b.kind == "absent" else "deleted" if a.kind == "absent" else "edited")

    def _keep_git_content(self, root: Path, states: list[PathState]) -> None:
        wanted = {s.data for s in states if s.kind == "file" and s.data and s.data.startswith(GIT_PREFIX)}
        missing = [
            d for d in sorted(wanted) if self._db.execute("SELECT 1 FROM blobs WHERE hash = ?", (d,)).fetchone() is None
        ]
        if not missing:
            return
        found = read_git_blobs(str(root), [d.removeprefix(GIT_PREFIX) for d in missing])
        # A blob git no longer has (history rewritten and pruned during the step) stays
        # missing: a revert that needs it refuses and says so.
        self._db.executemany(
            "INSERT OR IGNORE INTO blobs VALUES (?, ?)", [(f"{GIT_PREFIX}{oid}", data) for oid, data in found.items()]
        )

    # -- reading and reverting -------------------------------------------------------------

    def steps(self, run_id: str) -> list[JournalStep]:
        """The journaled steps of a run that are not reverted, oldest first."""
        rows = self._db.execute(
            "SELECT step, tool, call_id FROM steps WHERE run_id = ? AND reverted_at IS NULL ORDER BY step", (run_id,)
        ).fetchall()
        out: list[JournalStep] = []
        for step, tool, call_id in rows:
            paths: list[str] = []
            ignored: list[str] = []
            for path, bk, bd, ak, ad in self._db.execute(
                "SELECT path, before_kind, before_data, after_kind, after_data FROM entries "
                "WHERE run_id = ? AND step = ? ORDER BY seq",
                (run_id, step),
            ):
                hidden = _ignored(PathState(bk, bd)) or _ignored(PathState(ak, ad))
                (ignored if hidden else paths).append(path)
            out.append(JournalStep(step=step, tool=tool, call_id=call_id, paths=tuple(paths), ignored=tuple(ignored)))
        return out

    def workspace_of(self, run_id: str) -> Path:
        row = self._db.execute("SELECT workspace FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise InvalidRequest(f"no journal for run {run_id!r} in {self.path}")
        return Path(row[0])

    def run_ids(self) -> list[str]:
        """Every journaled run's id."""
        return [str(row[0]) for row in self._db.execute("SELECT run_id FROM runs")]

    def revert(self, run_id: str, *, to_step: int = 0, force: bool = False) -> RevertReport:
        """Undo the steps after ``to_step`` (0: the whole run), newest first.

        Refuses, changing nothing, when a path no longer looks as the run left it (someone
        changed it since), unless ``force``.
        """
        root = self.workspace_of(run_id)
        if not root.is_dir():
            raise InvalidRequest(f"workspace {root} of run {run_id} is gone")
        if to_step < 0:
            raise InvalidRequest("--to must be 0 or a step number")
        rows = self._db.execute(
            "SELECT e.step, e.seq, e.path, e.before_kind, e.before_data, e.before_mode, "
            "e.after_kind, e.after_data, e.after_mode FROM entries e JOIN steps s "
            "ON s.run_id = e.run_id AND s.step = e.step "
            "WHERE e.run_id = ? AND e.step > ? AND s.reverted_at IS NULL ORDER BY e.step DESC, e.seq DESC",
            (run_id, to_step),
        ).fetchall()
        if not force:
            latest: dict[str, PathState] = {}
            for _s, _q, rel, *_b, ak, ad, am in rows:
                latest.setdefault(rel, PathState(ak, ad, am))
            seen_as = _fresh_view(root, latest)
            drift = [rel for rel, want in latest.items() if not _same(self._state_fresh(root, rel, seen_as), want)]
            if drift:
                shown = ", ".join(sorted(drift)[:10])
                raise PermissionDenied(
                    f"the workspace changed since run {run_id} ({shown}); nothing reverted (use --force to overwrite)"
                )
        # Plan the whole revert, check it, then apply: refused means nothing changed.
        want = plan_restore(rows)
        # An ignored file's content was never kept: it stays as it is (a created one is removed).
        left = sorted(rel for rel, state in want.items() if _ignored(state) and state.kind == "file")
        for rel in left:
            del want[rel]
        for rel, state in sorted(want.items()):
            if (
                state.kind == "file"
                and self._db.execute("SELECT 1 FROM blobs WHERE hash = ?", (state.data,)).fetchone() is None
            ):
                if (state.data or "").startswith(GIT_PREFIX):
                    raise InvalidRequest(
                        f"the content of {rel!r} was git's blob {(state.data or '')[len(GIT_PREFIX) :][:12]}, "
                        "which git no longer had when the step was recorded; nothing reverted"
                    )
                raise InvalidRequest(
                    f"the journal lacks the content of {rel!r} (over {MAX_JOURNALED_BYTES} bytes, only its size "
                    "and times were journaled); nothing reverted"
                )
        check_plan(root, want)
        apply_plan(root, want, blob=self._blob)
        seen_as = _fresh_view(root, want)
        wrong = [rel for rel, state in want.items() if not _same(self._state_fresh(root, rel, seen_as), state)]
        if wrong:
            raise SandboxViolation(f"revert of run {run_id} could not restore {', '.join(sorted(wrong)[:10])} exactly")
        restored = [r[2] for r in rows]
        # Undone steps stay in the journal, marked, so the record is kept and not undone twice.
        with self._db:
            self._db.execute("BEGIN")
            steps_undone = self._db.execute(
                "UPDATE steps SET reverted_at = ? WHERE run_id = ? AND step > ? AND reverted_at IS NULL",
                (time.time(), run_id, to_step),
            ).rowcount
        return RevertReport(
            run_id=run_id,
            workspace=root,
            to_step=to_step,
            steps_undone=int(steps_undone),
            restored=tuple(r for r in dict.fromkeys(restored) if r not in left),
            left=tuple(left),
        )

    def _state_fresh(self, root: Path, rel: str, view: GitView | None = None) -> PathState:
        self.index.forget(str(root), rel)
        if not real_folders(root, safe_rel(rel)):
            return ABSENT  # behind a link: not in the workspace
        return self._scan(root, [rel], view=view)[rel]

    def _blob(self, digest: str) -> bytes:
        row = self._db.execute("SELECT data FROM blobs WHERE hash = ?", (digest,)).fetchone()
        if row is None:
            raise InvalidRequest(f"the journal lacks the content {digest[:12]}; cannot restore it")
        return bytes(row[0])


def _ignored(state: PathState) -> bool:
    return state.data is not None and (state.data == IGNORED_DIR or state.data.startswith(IGNORED_PREFIX))


def _fresh_view(root: Path, states: dict[str, PathState]) -> GitView:
    """How to look at paths again so that they compare with ``states``: a file that was
    git's blob is hashed as git hashes it, an ignored one is looked at by stat only."""
    index = {rel: s.data[len(GIT_PREFIX) :] for rel, s in states.items() if s.data and s.data.startswith(GIT_PREFIX)}
    ignored = [rel for rel, s in states.items() if s.kind == "file" and _ignored(s)]
    return GitView(str(root), index=index, ignored_files=ignored, asks_git=False)


def _with_ancestors(rel: str) -> list[str]:
    parts = Path(rel).parts
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _same(now: PathState, want: PathState) -> bool:
    if now.kind != want.kind:
        return False
    return now.kind == "dir" or now.data == want.data


def _rel(root: Path, path: Path) -> str:
    full = path if path.is_absolute() else root / path
    try:
        return full.relative_to(root).as_posix()
    except ValueError:
        raise SandboxViolation(f"{path} is outside the workspace {root}") from None
