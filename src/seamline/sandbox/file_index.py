"""The journal's view of a workspace: a scan that hashes only what changed.

Each file is known by its stat key (size, mtime, ctime, inode, mode) and the SHA-256 of
its content. The keys live in the journal file (``file_index``), so a later call, or a
later run in a new process, re-reads only files whose key changed; everything else is one
``lstat`` per path. A file whose change time is too close to the moment it was read
("racily clean", as git calls it: the clock may not have ticked between two writes of the
same size) is hashed again at the next scan rather than trusted.

A whole-tree scan also puts an ``inotify`` watch on every folder it walks
(:mod:`seamline.sandbox.tree_watch`): the next whole-tree scan of the same workspace
drains it instead of walking, looks again only at the paths its events name, and returns a
:class:`Snapshot` that :meth:`FileIndex.changed_between` compares with an earlier one on
those paths only. A watch that lost track, or a git index changed since git was asked,
makes the next scan walk again.

Files over the journal's content cap are never read: their state is their stat key
(``unhashed:…``), so an 8 GB sparse file costs one ``lstat``, and a revert that would need
its old content refuses and says so.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Literal

from seamline.sandbox.git_view import GIT_PREFIX, IGNORED_DIR, IGNORED_PREFIX, GitView, PendingGitView
from seamline.sandbox.tree_watch import TreeChanges, TreeWatch
from seamline.store_files import is_store_entry

__all__ = ["ABSENT", "UNHASHED_PREFIX", "FileIndex", "PathState", "ScanNotes", "ScanProgress", "Snapshot", "StateKind"]

StateKind = Literal["absent", "file", "link", "dir"]
UNHASHED_PREFIX: Final = "unhashed:"
#: How close to its change time a file may be read before its key is not trusted.
RACY_WINDOW_NS: Final = 20_000_000

_FORMAT: Final = 0o170000  # stat.S_IFMT's mask: the kind of file
_PERMISSIONS: Final = 0o7777  # stat.S_IMODE's mask

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
_EPOCHS: Final = itertools.count(1)


class Snapshot(dict[str, PathState]):
    """A whole-tree scan's states, marked with where it stands in its watch's history
    (``epoch``: one per whole walk, 0 for none; ``gen``: one per scan since), so that two
    scans of the same watch are compared on what changed between them only."""

    __slots__ = ("epoch", "gen")

    def __init__(self, states: dict[str, PathState], epoch: int = 0, gen: int = 0) -> None:
        super().__init__(states)
        self.epoch = epoch
        self.gen = gen


@dataclass(slots=True, eq=False)
class _Tracked:
    """One workspace's last whole-tree scan and the watch that keeps it current."""

    watch: TreeWatch
    shape: tuple[str, frozenset[str], int]  # skip, skip_dirs, max_bytes
    states: dict[str, PathState]
    skipped: set[str]
    view: GitView | None
    epoch: int = field(default_factory=lambda: next(_EPOCHS))
    gen: int = 0
    log: list[set[str]] = field(
        default_factory=lambda: list[set[str]]()
    )  # log[g - 1]: the paths scan g looked at again


class FileIndex:
    """Stat keys and hashes of the files of each workspace, kept in the journal's database.

    ``hashed_files`` and ``hashed_bytes`` count what was read, for tests and benchmarks.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._db.executescript(INDEX_SCHEMA)
        self._known: dict[str, dict[str, tuple[_Key, str, bool]]] = {}
        self._tracked: dict[str, _Tracked] = {}
        self._rows: list[tuple[str, str, int, int, int, int, int, str]] = []
        self.hashed_files = 0
        self.hashed_bytes = 0
        #: Whole-tree scans that walked the tree, and those that only drained a watch.
        self.walks = 0
        self.drains = 0

    def close(self) -> None:
        """Write the stat keys still held back and let go of every watch."""
        if self._rows:
            with self._db:
                self._db.execute("BEGIN")
                self._flush()
        for tracked in self._tracked.values():
            tracked.watch.close()
        self._tracked.clear()

    def watching(self, root: str) -> bool:
        """Whether the next whole-tree scan of ``root`` may drain a watch instead of walking
        (then it needs no fresh look from git)."""
        tracked = self._tracked.get(root)
        if tracked is None or not tracked.watch.intact:
            return False
        return tracked.view is None or not tracked.view.stale()

    def changed_between(self, before: dict[str, PathState], after: dict[str, PathState]) -> set[str] | None:
        """The paths that may differ between two whole-tree scans of one watch (None: any)."""
        if not (isinstance(before, Snapshot) and isinstance(after, Snapshot)):
            return None
        if not before.epoch or before.epoch != after.epoch or before.gen > after.gen:
            return None
        tracked = next((t for t in self._tracked.values() if t.epoch == before.epoch), None)
        if tracked is None:
            return None
        out: set[str] = set()
        for paths in tracked.log[before.gen : after.gen]:
            out |= paths
        return out

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
        # The stat keys of git's files an earlier scan found are written now, in this
        # scan's transaction: a whole-tree walk before a turn hands its snapshot back
        # without paying for tens of thousands of rows (the scan after the turn pays, while
        # the agent is done), and a key written late is still the key that was seen.
        self._flush()
        return self._scan(root, rels, skip, max_bytes, skip_dirs, notes, progress, view)

    def _flush(self) -> None:
        if self._rows:
            self._db.executemany("INSERT OR REPLACE INTO file_index VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self._rows)
            self._rows.clear()

    def _scan(
        self,
        root: str,
        rels: list[str] | None,
        skip: str,
        max_bytes: int,
        skip_dirs: frozenset[str],
        notes: ScanNotes | None,
        progress: ScanProgress | None,
        view: GitView | PendingGitView | None,
    ) -> dict[str, PathState]:
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
        wanted_skips = notes.skipped if notes is not None else None
        skipped: list[str] = []
        shape = (skip, skip_dirs, max_bytes)
        tracked = self._tracked.get(root)
        if tracked is not None:
            fresh = tracked.shape == shape and (tracked.view is None or not tracked.view.stale())
            changes = tracked.watch.drain() if fresh else None
            if changes is not None:
                return self._drained(root, tracked, changes, known, on_read, wanted_skips, progress)
            tracked.watch.close()
            del self._tracked[root]
            if view is None and tracked.view is not None:
                view = PendingGitView(root)  # the watch lost track: git helps the walk again
        watch = TreeWatch.open(os.path.realpath(root))
        on_dir = watch.add if watch is not None else None
        ready: GitView | None = None
        if progress is not None:
            progress.begin()
        try:
            if isinstance(view, PendingGitView) and not view.in_work_tree:
                view = None
            if view is None:
                for rel, st in walk_tree(root, skip, skip_dirs, skipped, on_dir=on_dir):
                    states[rel] = self._state(root, rel, st, known, max_bytes, on_read)
                    if progress is not None and not len(states) % PROGRESS_EVERY:
                        progress.seen(len(states))
            else:
                # Walk first: the paths the turn made are asked of git (ignored?) in one call.
                found: list[tuple[str, os.stat_result]] = []
                for entry in walk_tree(root, skip, skip_dirs, skipped, on_dir=on_dir):
                    found.append(entry)
                    if progress is not None and not len(found) % PROGRESS_EVERY:
                        progress.seen(len(found))
                ready = view.get() if isinstance(view, PendingGitView) else view
                if ready is not None and ready.seen is not None:  # a first look has seen nothing yet
                    ready.classify_new([(rel, stat.S_ISDIR(st.st_mode)) for rel, st in found])
                for rel, st in found:
                    states[rel] = self._state(root, rel, st, known, max_bytes, on_read, ready)
                if ready is not None and ready.seen is None:
                    ready.seen = set(states)
        except BaseException:
            if watch is not None:
                watch.close()  # a scan that failed keeps no watch: its descriptor goes
            raise
        finally:
            if progress is not None:
                progress.end()
        self.walks += 1
        if wanted_skips is not None:
            wanted_skips.extend(skipped)
        gone = [rel for rel in known if rel not in states]
        for rel in gone:
            del known[rel]
        self._db.executemany("DELETE FROM file_index WHERE workspace = ? AND path = ?", [(root, r) for r in gone])
        if watch is None:
            return Snapshot(states)
        if not watch.intact:
            watch.close()
            return Snapshot(states)
        tracked = _Tracked(watch, shape, dict(states), set(skipped), ready)
        self._tracked[root] = tracked
        return Snapshot(states, tracked.epoch, 0)

    def _drained(
        self,
        root: str,
        tracked: _Tracked,
        changes: TreeChanges,
        known: dict[str, tuple[_Key, str, bool]],
        on_read: Callable[[str, bytes], None] | None,
        skipped: list[str] | None,
        progress: ScanProgress | None,
    ) -> Snapshot:
        """A whole-tree scan from the watch's events: only the paths they name are looked
        at again, and the folders created or deleted walked again or dropped."""
        skip, skip_dirs, max_bytes = tracked.shape
        states = tracked.states
        todo = set(changes.paths)
        found: dict[str, os.stat_result] = {}
        for folder in sorted(changes.folders):
            prefix = f"{folder}/"
            todo.update(r for r in states if r.startswith(prefix))
            tracked.skipped = {r for r in tracked.skipped if r != folder and not r.startswith(prefix)}
        if progress is not None:
            progress.begin()
        try:
            for folder in sorted(changes.folders):
                if folder.rpartition("/")[2] in skip_dirs or not _real_dir(root, folder):
                    continue
                newly: list[str] = []
                for rel, st in walk_tree(root, skip, skip_dirs, newly, on_dir=tracked.watch.add, start=folder):
                    found[rel] = st
                    if progress is not None and not len(found) % PROGRESS_EVERY:
                        progress.seen(len(found))
                tracked.skipped.update(newly)
            todo.update(found)
            looked: dict[str, os.stat_result | None] = {}
            for rel in todo:
                now = found.get(rel)
                if now is None:
                    now = _lstat_inside(root, rel, skip, skip_dirs)
                    if now is not None and stat.S_ISDIR(now.st_mode) and rel.rpartition("/")[2] in skip_dirs:
                        tracked.skipped.add(rel)
                        now = None
                    elif now is None:
                        tracked.skipped.discard(rel)
                looked[rel] = now
            view = tracked.view
            if view is not None:
                view.classify_new([(rel, stat.S_ISDIR(st.st_mode)) for rel, st in looked.items() if st is not None])
            gone: list[str] = []
            for rel, seen in looked.items():
                if seen is None:
                    if states.pop(rel, None) is not None or rel in known:
                        gone.append(rel)
                        known.pop(rel, None)
                    continue
                states[rel] = self._state(root, rel, seen, known, max_bytes, on_read, view)
        finally:
            if progress is not None:
                progress.end()
        self._db.executemany("DELETE FROM file_index WHERE workspace = ? AND path = ?", [(root, r) for r in gone])
        if skipped is not None:
            skipped.extend(sorted(tracked.skipped))
        tracked.gen += 1
        tracked.log.append(set(looked))
        self.drains += 1
        return Snapshot(states, tracked.epoch, tracked.gen)

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
        kind = st.st_mode & _FORMAT
        mode = st.st_mode & _PERMISSIONS
        if kind == stat.S_IFLNK:
            try:
                return PathState("link", os.readlink(os.path.join(root, rel)), None)
            except FileNotFoundError:
                return ABSENT
        ignored = view is not None and view.is_ignored(rel)
        if kind != stat.S_IFREG:
            if kind == stat.S_IFDIR:
                return PathState("dir", IGNORED_DIR if ignored else None, mode)
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
            self._rows.append((root, rel, *key, digest))  # written by the next scan or close(), all at once
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
    root: str,
    skip: str,
    skip_dirs: frozenset[str] = frozenset(),
    skipped: list[str] | None = None,
    *,
    on_dir: Callable[[str], None] | None = None,
    start: str = "",
) -> Iterator[tuple[str, os.stat_result]]:
    """Every path under ``root`` with its lstat, never following links into folders; names
    starting with ``skip`` are left out; folders named in ``skip_dirs`` (``.git``) are left
    out with all they hold, their relative paths added to ``skipped``. ``on_dir`` hears each
    folder (relative) before it is listed; ``start``: walk only that folder (relative, a
    real folder), its paths still relative to ``root``."""
    # Below the real root, a folder the walk enters is never a link: an entry's path is real.
    real_root = os.path.realpath(root)
    stack = [start]
    while stack:
        rel_dir = stack.pop()
        if on_dir is not None:
            on_dir(rel_dir)
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


def _real_dir(root: str, rel: str) -> bool:
    """Whether ``rel`` is a folder reached through real folders only (no link on the way)."""
    path = root
    for part in rel.split("/"):
        path = os.path.join(path, part)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
    return True


def _lstat_inside(root: str, rel: str, skip: str, skip_dirs: frozenset[str]) -> os.stat_result | None:
    """The lstat of ``rel`` as a walk would see it; None when a walk would not see it (gone,
    behind a link or a left-out folder, the journal's or a store's own file)."""
    parent, _, name = rel.rpartition("/")
    if name.startswith(skip) or any(p in skip_dirs for p in parent.split("/") if p):
        return None
    if parent and not _real_dir(root, parent):
        return None
    path = os.path.join(root, rel)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return None if is_store_entry(path, st) else st
