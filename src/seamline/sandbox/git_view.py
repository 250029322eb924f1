"""What git already knows of a workspace, for the edit journal's scan of a big repository.

A workspace that is (or lies inside) a git work tree gets one ``git ls-files`` and one
``git status`` before a whole-tree scan, and from them:

- **tracked files unchanged since the index**: their content is the index's blob, which
  git's object store keeps, so the scan neither reads nor copies them; their state is
  ``git:<blob id>``. The journal copies a blob out of git (``git cat-file``) only for a
  path a step changed, when the step is recorded, so a later ``git gc`` cannot take it;
- **ignored paths** (``.gitignore``, ``.git/info/exclude``, ``core.excludesFile``): stat
  only, never read: a file's state is ``ignored:<size>:<mtime>:<ctime>:<inode>``, a
  folder's data is ``ignored``. Paths a turn creates are asked of ``git check-ignore``;
  a new folder whose every entry is ignored (``__pycache__``) counts as ignored too.

A file the scan does read that git tracks is hashed as git hashes it too: when it matches
the index's blob, its state is ``git:<id>`` and nothing is copied. Any other file is
read and kept as before (SHA-256). Every git call runs with this process's git pointers
removed, no hooks, no fsmonitor, no submodule recursion (:func:`host_git_environment`),
full stat checks and no optional locks; a git that fails, is missing, or refuses the
repository leaves the scan as it was without git.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Final

from seamline.transport.env import compose_env, host_git_environment

__all__ = [
    "GIT_PREFIX",
    "IGNORED_DIR",
    "IGNORED_PREFIX",
    "GitView",
    "PendingGitView",
    "git_blob_id",
    "git_view",
    "read_git_blobs",
]

GIT_PREFIX: Final = "git:"
IGNORED_PREFIX: Final = "ignored:"
#: The data of an ignored folder's state.
IGNORED_DIR: Final = "ignored"
#: How long a git call may take before the scan goes on without git.
GIT_TIMEOUT_S: Final = 120.0
#: Files changed this close to (or after) ``git status`` started are read, not trusted.
_TRUST_MARGIN_NS: Final = 50_000_000
_SAFE_CONFIG: Final = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.checkStat", "default"),
    ("core.trustctime", "true"),
    ("core.untrackedCache", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
_POINTERS: Final = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
)
_FILE_MODES: Final = frozenset({"100644", "100755"})


def _git(root: str, args: list[str], *, stdin: bytes | None = None) -> bytes | None:
    argv = ["git", "--no-optional-locks"]
    for key, value in _SAFE_CONFIG:
        argv += ["-c", f"{key}={value}"]
    env = host_git_environment(
        compose_env(None, dict.fromkeys(_POINTERS), {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": None})
    )
    try:
        done = subprocess.run(
            [*argv, *args], cwd=root, env=env, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None  # no git, no folder, or too slow: the scan goes on without it
    return done.stdout if done.returncode == 0 else None


def git_blob_id(data: bytes, algorithm: str = "sha1") -> str:
    """The id git gives ``data`` as a blob."""
    h = hashlib.new(algorithm)
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


class GitView:
    """One look at the repository around a workspace; see the module docstring. Paths are
    relative to the workspace."""

    def __init__(
        self,
        root: str,
        *,
        index: Mapping[str, str],
        dirty: Iterable[str] = (),
        ignored_dirs: Iterable[str] = (),
        ignored_files: Iterable[str] = (),
        since_ns: int = 0,
        asks_git: bool = True,
        index_file: str | None = None,
        index_key: tuple[int, int, int, int] | None = None,
    ) -> None:
        self.root = root
        self.index = dict(index)
        self.dirty = set(dirty)
        self.ignored_dirs = set(ignored_dirs)
        self.ignored_files = set(ignored_files)
        self.since_ns = since_ns
        self.asks_git = asks_git
        #: git's index file and its stat as it was before git looked (see :meth:`stale`).
        self.index_file = index_file
        self._index_key = index_key if index_key is not None or not index_file else _stat_key(index_file)
        #: Paths the first scan with this view saw: a later scan asks git about the others.
        self.seen: set[str] | None = None
        self._under: dict[str, bool] = {"": False}

    def stale(self) -> bool:
        """Whether git's index changed since this look (a commit, a checkout, ``git add``):
        a blob this view vouches for may then be let go, so a later scan asks git again.
        While the index is unchanged, it still holds every blob it vouched for, so ``git
        gc`` keeps them."""
        return self.index_file is not None and _stat_key(self.index_file) != self._index_key

    def trusted_oid(self, rel: str, mtime_ns: int, ctime_ns: int) -> str | None:
        """The blob id of a tracked file git found unchanged since the index, unless it
        changed after (or too near) the moment git looked."""
        oid = self.index.get(rel)
        if oid is None or rel in self.dirty or self.since_ns == 0:
            return None
        if max(mtime_ns, ctime_ns) + _TRUST_MARGIN_NS >= self.since_ns:
            return None
        return oid

    def vouches(self, rel: str, digest: str) -> bool:
        """Whether the index holds ``digest`` (``git:<id>``) for ``rel``, as git last saw it."""
        return self.index.get(rel) == digest[len(GIT_PREFIX) :] and rel not in self.dirty

    def is_ignored(self, rel: str) -> bool:
        return rel in self.ignored_files or rel in self.ignored_dirs or self._folder_ignored(rel.rpartition("/")[0])

    def _folder_ignored(self, folder: str) -> bool:
        known = self._under.get(folder)
        if known is None:
            known = folder in self.ignored_dirs or self._folder_ignored(folder.rpartition("/")[0])
            self._under[folder] = known
        return known

    def classify_new(self, entries: list[tuple[str, bool]]) -> None:
        """Ask git which of the paths the scan found that the view has not seen (``(rel,
        is_folder)``) are ignored; a new folder all of whose entries are ignored is too."""
        if self.seen is None:
            return
        new = [(rel, folder) for rel, folder in entries if rel not in self.seen and rel not in self.index]
        ask = [rel for rel, _ in new if not self.is_ignored(rel)]
        if not ask or not self.asks_git:
            return
        out = _git(self.root, ["check-ignore", "-z", "--stdin"], stdin=b"".join(os.fsencode(r) + b"\0" for r in ask))
        hits = {os.fsdecode(p) for p in (out or b"").split(b"\0") if p}
        folders = {rel for rel, folder in new if folder}
        self.ignored_dirs |= hits & folders
        self.ignored_files |= hits - folders
        self._under = {"": False}
        # A new folder holding only ignored entries (``__pycache__``): deepest first.
        kept: dict[str, bool] = {}
        for rel, folder in sorted(new, key=lambda e: e[0].count("/"), reverse=True):
            ignored = self.is_ignored(rel) or (folder and kept.get(rel) is True)
            parent = rel.rpartition("/")[0]
            if parent in folders:
                kept[parent] = kept.get(parent, True) and bool(ignored)
            if folder and ignored and not self.is_ignored(rel):
                self.ignored_dirs.add(rel)
                self._under = {"": False}

    def matches(self, data: bytes, oid: str) -> bool:
        """Whether ``data`` is the blob ``oid`` (a SHA-256 repository's ids are 64 digits)."""
        return git_blob_id(data, "sha256" if len(oid) == 64 else "sha1") == oid


def read_git_blobs(root: str, oids: Iterable[str]) -> dict[str, bytes]:
    """The content of each blob that the repository around ``root`` still has."""
    wanted = sorted(set(oids))
    if not wanted:
        return {}
    out = _git(root, ["cat-file", "--batch"], stdin="".join(f"{o}\n" for o in wanted).encode())
    found: dict[str, bytes] = {}
    pos = 0
    data = out or b""
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break
        header = data[pos:end].split()
        pos = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            found[header[0].decode()] = data[pos : pos + size]
            pos += size + 1
    return found


def _stat_key(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def work_tree_prefix(root: str) -> str | None:
    """Where ``root`` lies in its git work tree (``""`` at the top, ``sub/`` below it);
    None when it is in none, or git cannot say (missing, failing, refusing the repository)."""
    where = _work_tree(root)
    return where[0] if where is not None else None


def _work_tree(root: str) -> tuple[str, str | None] | None:
    """:func:`work_tree_prefix` and the path of git's index file."""
    head = _git(root, ["rev-parse", "--is-inside-work-tree", "--show-prefix", "--git-path", "index"])
    if head is None:
        return None
    lines = head.decode("utf-8", "surrogateescape").split("\n")
    if not lines or lines[0] != "true":
        return None
    index = lines[2] if len(lines) > 2 and lines[2] else None
    return (lines[1] if len(lines) > 1 else ""), (os.path.join(root, index) if index else None)


def git_view(root: str, where: tuple[str, str | None] | None = None) -> GitView | None:
    """What git knows of the workspace ``root``; None when it is not in a work tree or git
    cannot say. ``where``: its prefix in the work tree and git's index file, when known."""
    if where is None:
        where = _work_tree(root)
    if where is None:
        return None
    prefix, index_file = where
    index_key = _stat_key(index_file) if index_file else None
    since = time.time_ns()
    listing: list[bytes | None] = []
    lister = threading.Thread(target=lambda: listing.append(_git(root, ["ls-files", "-v", "-s", "-z"])), daemon=True)
    lister.start()  # the index and the status at once: two processes, two cores
    status = _git(
        root,
        [
            "status",
            "--porcelain=v2",
            "-z",
            "--ignored=traditional",
            "--untracked-files=normal",
            "--no-renames",
            "--",
            ".",
        ],
    )
    lister.join()
    listed = listing[0] if listing else None
    if listed is None or status is None:
        return None
    index: dict[str, str] = {}
    for record in listed.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        parts = meta.split(b" ")
        # "H": cached, trusted by stat; lowercase (assume-unchanged) and "S" (skip-worktree) never are.
        if len(parts) == 4 and parts[0] == b"H" and parts[3] == b"0" and parts[1].decode() in _FILE_MODES:
            index[os.fsdecode(path)] = parts[2].decode()
    dirty: set[str] = set()
    ignored_dirs: set[str] = set()
    ignored_files: set[str] = set()
    for record in status.split(b"\0"):
        if not record:
            continue
        text = os.fsdecode(record)
        kind = text[:1]
        if kind == "u" or (kind == "1" and text[3:4] != "."):  # unmerged, or the file is not the index's
            dirty.add(text.split(" ", 8 if kind == "1" else 10)[-1])
        elif kind == "!":
            name = text[2:]
            (ignored_dirs if name.endswith("/") else ignored_files).add(name.rstrip("/"))
    strip = len(prefix)
    if prefix and prefix.rstrip("/") in ignored_dirs:
        return None  # the workspace is itself an ignored folder: scanned as without git
    return GitView(
        root,
        index=index,
        dirty={p[strip:] for p in dirty if p.startswith(prefix)},
        ignored_dirs={p[strip:] for p in ignored_dirs if p.startswith(prefix) and p[strip:]},
        ignored_files={p[strip:] for p in ignored_files if p.startswith(prefix)},
        since_ns=since,
        index_file=index_file,
        index_key=index_key,  # as it was before git read it
    )


class PendingGitView:
    """:func:`git_view` running in a thread, so that a scan walks the tree while git looks
    (a walk needs no answer from git; only what it then reads does)."""

    def __init__(self, root: str) -> None:
        self._result: list[GitView | None] = []
        where = _work_tree(root)  # a few milliseconds: no repository, no thread
        #: Whether ``root`` is in a git work tree at all (else :meth:`get` is None).
        self.in_work_tree = where is not None
        self._thread: threading.Thread | None = None
        if where is not None:
            self._thread = threading.Thread(target=lambda: self._result.append(git_view(root, where)), daemon=True)
            self._thread.start()

    def get(self) -> GitView | None:
        if self._thread is not None:
            self._thread.join()
        return self._result[0] if self._result else None
