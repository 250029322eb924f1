"""The journal's view of a workspace: a scan that hashes only what changed.

Each file is known by its stat key (size, mtime, ctime, inode, mode) and the SHA-256 of
its content. The keys live in the journal file (``file_index``), so a later call, or a
later run in a new process, re-reads only files whose key changed; everything else is one
``lstat`` per path. A file whose change time is too close to the moment it was read
("racily clean", as git calls it: the clock may not have ticked between two writes of the
same size) is hashed again at the next scan rather than trusted.

Files over the journal's content cap are never read: their state is their stat key
(``unhashed:…``), so an 8 GB sparse file costs one ``lstat``, and a revert that would need
its old content refuses and says so.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Literal

from seamline.sandbox.git_view import GIT_PREFIX, IGNORED_DIR, IGNORED_PREFIX, GitView, PendingGitView
from seamline.store_files import is_store_entry

__all__ = ["ABSENT", "UNHASHED_PREFIX", "FileIndex", "PathState", "ScanNotes", "ScanProgress", "StateKind"]

StateKind = Literal["absent", "file", "link", "dir"]
UNHASHED_PREFIX: Final = "unhashed:"
#: How close to its change time a file may be read before its key is not trusted.
RACY_WINDOW_NS: Final = 20_000_000

#: How many paths a whole-tree scan walks between two looks at the clock (its progress).
PROGRESS_EVERY: Final = 256

INDEX_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS file_index (
  workspace TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
  ctime_ns INTEGER NOT NULL, ino INTEGER NOT NULL, mode INTEGER NOT NULL, hash TEXT NOT NULL,
  PRIMARY KEY (workspace, path));
"""


@dataclass(frozen=True, slots=True)
class PathState:
    """One path at one moment. ``data`` is the content hash (file) or target (link)."""

    kind: StateKind
    data: str | None = None
    mode: int | None = None


ABSENT: Final = PathState("absent")


@dataclass(slots=True)
class ScanNotes:
    """What a scan saw besides the states, for a caller that checks the tree without
    walking it again: the folders a whole-tree scan left out (``skip_dirs``, relative
    paths, e.g. every ``.git``), and, through ``on_read``, each file's bytes as the scan
    reads them (only files whose stat key changed are read)."""

    skipped: list[str] = field(default_factory=list)
    on_read: Callable[[str, bytes], None] | None = None


class ScanProgress:
    """How far a long whole-tree scan has come, told to ``show``: nothing for a scan that
    ends within ``after`` seconds; past that, the count of paths walked so far, at most every
    ``every`` seconds, and ``show(None)`` once a scan it showed is over. The scan looks at
    the clock once every :data:`PROGRESS_EVERY` paths, so a fast scan costs nothing more.

    A big repository's first scan (every file hashed) takes seconds to minutes, and it
    blocks the event loop, so ``show`` is called there and then, on the scanning thread."""

    def __init__(
        self,
        show: Callable[[int | None], None],
        *,
        after: float = 1.0,
        every: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.show = show
        self.after = after
        self.every = every
        self._clock = clock
        self._started = 0.0
        self._shown_at: float | None = None

    def begin(self) -> None:
        self._started = self._clock()
        self._shown_at = None

    def seen(self, count: int) -> None:
        now = self._clock()
        if now - self._started < self.after:
            return
        if self._shown_at is not None and now - self._shown_at < self.every:
            return
        self._shown_at = now
        self.show(count)

    def end(self) -> None:
        if self._shown_at is not None:
            self._shown_at = None
            self.show(None)


_Key = tuple[int, int, int, int, int]  # size, mtime_ns, ctime_ns, ino, mode


class FileIndex:
    """Stat keys and hashes of the files of each workspace, kept in the journal's database.

    ``hashed_files`` and ``hashed_bytes`` count what was read, for tests and benchmarks.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._db.executescript(INDEX_SCHEMA)
        self._known: dict[str, dict[str, tuple[_Key, str, bool]]] = {}
        self.hashed_files = 0
        self.hashed_bytes = 0

    def scan(
        self,
        root: str,
        rels: list[str] | None,
        *,
        skip: str,
        max_bytes: int,
        skip_dirs: frozenset[str] = frozenset(),
        notes: ScanNotes | None = None,
        progress: ScanProgress | None = None,
        view: GitView | PendingGitView | None = None,
    ) -> dict[str, PathState]:
        """The state of ``rels`` (None: every path under ``root``). Content read is stored
        in the ``blobs`` table; the caller holds one transaction for the whole scan.
        ``notes`` hears what the scan left out and read; ``progress``, how far a long
        whole-tree scan has come; ``view``, what git knows (:mod:`seamline.sandbox.git_view`):
        with it, tracked files unchanged since the index and ignored paths are not read."""
        known = self._load(root)
        states: dict[str, PathState] = {}
        on_read = notes.on_read if notes is not None else None
        if rels is not None:
            if isinstance(view, PendingGitView):
                view = view.get()
            for rel in rels:
                try:
                    st = os.lstat(os.path.join(root, rel))
                except (FileNotFoundError, NotADirectoryError):
                    states[rel] = ABSENT
                    continue
                states[rel] = self._state(root, rel, st, known, max_bytes, on_read, view)
            return states
        skipped = notes.skipped if notes is not None else None
        if progress is not None:
            progress.begin()
        try:
            if isinstance(view, PendingGitView) and not view.in_work_tree:
                view = None
            if view is None:
                for rel, st in walk_tree(root, skip, skip_dirs, skipped):
                    states[rel] = self._state(root, rel, st, known, max_bytes, on_read)
                    if progress is not None and not len(states) % PROGRESS_EVERY:
                        progress.seen(len(states))
            else:
                # Walk first: the paths the turn made are asked of git (ignored?) in one call.
                found: list[tuple[str, os.stat_result]] = []
                for entry in walk_tree(root, skip, skip_dirs, skipped):
                    found.append(entry)
                    if progress is not None and not len(found) % PROGRESS_EVERY:
                        progress.seen(len(found))
                ready = view.get() if isinstance(view, PendingGitView) else view
                if ready is not None:
                    ready.classify_new([(rel, stat.S_ISDIR(st.st_mode)) for rel, st in found])
                for rel, st in found:
                    states[rel] = self._state(root, rel, st, known, max_bytes, on_read, ready)
                if ready is not None and ready.seen is None:
                    ready.seen = set(states)
        finally:
            if progress is not None:
                progress.end()
        gone = [rel for rel in known if rel not in states]
        for rel in gone:
            del known[rel]
        self._db.executemany("DELETE FROM file_index WHERE workspace = ? AND path = ?", [(root, r) for r in gone])
        return states

    def forget(self, root: str, rel: str) -> None:
        """Drop what is known of one path (it will be read again)."""
        self._load(root).pop(rel, None)

    def _load(self, root: str) -> dict[str, tuple[_Key, str, bool]]:
        known = self._known.get(root)
        if known is None:
            known = {}
            for path, size, mtime, ctime, ino, mode, digest in self._db.execute(
                "SELECT path, size, mtime_ns, ctime_ns, ino, mode, hash FROM file_index WHERE workspace = ?", (root,)
            ):
                known[path] = ((size, mtime, ctime, ino, mode), digest, False)
            self._known[root] = known
        return known

    def _state(
        self,
        root: str,
        rel: str,
        st: os.stat_result,
        known: dict[str, tuple[_Key, str, bool]],
        max_bytes: int,
        on_read: Callable[[str, bytes], None] | None = None,
        view: GitView | None = None,
    ) -> PathState:
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            try:
                return PathState("link", os.readlink(os.path.join(root, rel)), None)
            except FileNotFoundError:
                return ABSENT
        ignored = view is not None and view.is_ignored(rel)
        if stat.S_ISDIR(st.st_mode):
            return PathState("dir", IGNORED_DIR if ignored else None, mode)
        if not stat.S_ISREG(st.st_mode):
            return PathState("file", "special", mode)
        if ignored:
            # Stat only, never read nor kept (build output, virtual environments, caches).
            return PathState(
                "file", f"{IGNORED_PREFIX}{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}", mode
            )
        key: _Key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, mode)
        if st.st_size > max_bytes:
            # Never read: the stat key is the fingerprint (a sparse giant costs one lstat).
            return PathState("file", f"{UNHASHED_PREFIX}size={st.st_size}:ctime={st.st_ctime_ns}:ino={st.st_ino}", mode)
        cached = known.get(rel)
        if cached is not None and cached[0] == key and not cached[2]:
            # git's blob only while the index still holds it: else git may have let it go.
            if not cached[1].startswith(GIT_PREFIX) or (view is not None and view.vouches(rel, cached[1])):
                return PathState("file", cached[1], mode)
        oid = view.trusted_oid(rel, st.st_mtime_ns, st.st_ctime_ns) if view is not None else None
        if oid is not None:
            # git found it unchanged since the index: the object store has its content.
            digest = f"{GIT_PREFIX}{oid}"
            known[rel] = (key, digest, False)
            self._db.execute(
                "INSERT OR REPLACE INTO file_index VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (root, rel, *key, digest)
            )
            return PathState("file", digest, mode)
        read_at = time.time_ns()
        try:
            with open(os.path.join(root, rel), "rb") as fh:
                data = fh.read(max_bytes + 1)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return ABSENT
        if on_read is not None:
            on_read(rel, data)
        self.hashed_files += 1
        self.hashed_bytes += len(data)
        tracked = view.index.get(rel) if view is not None else None
        if tracked is not None and view is not None and view.matches(data, tracked):
            digest = f"{GIT_PREFIX}{tracked}"  # the index's blob: git keeps it, no copy
        else:
            digest = hashlib.sha256(data).hexdigest()
            self._db.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, data))
        racy = max(st.st_mtime_ns, st.st_ctime_ns) + RACY_WINDOW_NS >= read_at
        known[rel] = (key, digest, racy)
        if racy:
            # Read again next time; not kept for another process either.
            self._db.execute("DELETE FROM file_index WHERE workspace = ? AND path = ?", (root, rel))
        else:
            self._db.execute(
                "INSERT OR REPLACE INTO file_index VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (root, rel, *key, digest)
            )
        return PathState("file", digest, mode)


def walk_tree(
    root: str, skip: str, skip_dirs: frozenset[str] = frozenset(), skipped: list[str] | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """Every path under ``root`` with its lstat, never following links into folders; names
    starting with ``skip`` are left out; folders named in ``skip_dirs`` (``.git``) are left
    out with all they hold, their relative paths added to ``skipped``."""
    # Below the real root, a folder the walk enters is never a link: an entry's path is real.
    real_root = os.path.realpath(root)
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            it = os.scandir(os.path.join(real_root, rel_dir) if rel_dir else real_root)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        with it:
            for entry in it:
                if entry.name.startswith(skip):
                    continue  # the journal's own files
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if is_store_entry(entry.path, st):
                    continue  # an open store's files: reading them breaks its locks
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if entry.name in skip_dirs and stat.S_ISDIR(st.st_mode):
                    if skipped is not None:
                        skipped.append(rel)
                    continue
                yield rel, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(rel)
