"""What changed in a scanned tree since the last look, from the kernel (Linux ``inotify``).

The edit journal's first whole-tree scan of a workspace puts a watch on every folder it
walks (before listing it, so nothing changed after the listing goes unseen). A later scan
drains the watch's events instead of walking the tree again: the paths named by an event
are looked at again (one ``lstat``, a read only when the stat key changed), a folder
created or deleted is walked (and watched) or dropped whole. So a later turn costs what
the turn changed, not what the tree holds.

The watch gives up, and the next scan walks the whole tree again, when the kernel drops
events (its queue overflowed), a watched folder was moved or renamed (its watches would
name the wrong paths), the workspace itself was moved, or a folder could not be watched
(``fs.inotify.max_user_watches``). Without ``inotify`` (not Linux, ``SEAMLINE_JOURNAL_WATCH=0``)
every scan walks the tree, as before. Writes through a shared memory map (``mmap``),
through a hard link from a folder outside the tree, or from another machine (a network
file system) raise no event: a file changed only that way between two scans is not seen
until something else touches it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Final

__all__ = ["ENV_SWITCH", "TreeChanges", "TreeWatch", "watching_enabled"]

_IN_MODIFY: Final = 0x2
_IN_ATTRIB: Final = 0x4
_IN_CLOSE_WRITE: Final = 0x8
_IN_MOVED_FROM: Final = 0x40
_IN_MOVED_TO: Final = 0x80
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
_IN_UNMOUNT: Final = 0x2000
_IN_Q_OVERFLOW: Final = 0x4000
_IN_IGNORED: Final = 0x8000
_IN_ONLYDIR: Final = 0x01000000
_IN_DONT_FOLLOW: Final = 0x02000000
_IN_ISDIR: Final = 0x40000000
_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = 0o2000000
_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
_EVENT: Final = struct.Struct("iIII")
#: Set to ``0`` to have every journal scan walk the whole tree (no ``inotify``).
ENV_SWITCH: Final = "SEAMLINE_JOURNAL_WATCH"


def watching_enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get(ENV_SWITCH, "1") != "0"


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        except (OSError, AttributeError):
            return None
        _libc = lib
    return _libc


@dataclass(slots=True)
class TreeChanges:
    """What a drain found: ``paths`` to look at again, ``folders`` created or deleted
    (walked again, or dropped whole, with all they held). Relative paths."""

    paths: set[str] = field(default_factory=lambda: set[str]())
    folders: set[str] = field(default_factory=lambda: set[str]())


class TreeWatch:
    """``inotify`` watches on the folders of one tree; see the module docstring. Not
    thread-safe: the journal's scans of a workspace run one at a time."""

    def __init__(self, root: str, fd: int, lib: ctypes.CDLL) -> None:
        self.root = root
        self._fd = fd
        self._lib = lib
        self._rel_of: dict[int, str] = {}
        self._wd_of: dict[str, int] = {}
        #: False once the watch lost track: the next scan must walk the whole tree.
        self.intact = True

    @classmethod
    def open(cls, root: str) -> TreeWatch | None:
        """A watch with no folder yet; None where ``inotify`` is not to be had."""
        if not watching_enabled():
            return None
        lib = _lib()
        if lib is None:
            return None
        fd = int(lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
        if fd < 0:
            return None
        return cls(root, fd, lib)

    def add(self, rel_dir: str) -> None:
        """Watch one folder (call before listing it)."""
        if not self.intact:
            return
        path = os.path.join(self.root, rel_dir) if rel_dir else self.root
        wd = int(self._lib.inotify_add_watch(self._fd, os.fsencode(path), _MASK))
        if wd < 0:
            if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR):
                return  # gone already: its parent's event says so
            self.intact = False  # out of watches (or refused): walk the tree next time
            return
        old = self._rel_of.get(wd)
        if old is not None and old != rel_dir:
            self.intact = False  # the same folder under two names: moved
            return
        self._rel_of[wd] = rel_dir
        self._wd_of[rel_dir] = wd

    @property
    def folders(self) -> int:
        return len(self._wd_of)

    def drain(self) -> TreeChanges | None:
        """The changes since the last drain; None when the watch lost track (walk the
        whole tree, and open a new watch)."""
        changes = TreeChanges()
        while self.intact:
            try:
                buf = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                self.intact = False
                break
            if not buf:
                break
            self._parse(buf, changes)
        return changes if self.intact else None

    def _parse(self, buf: bytes, changes: TreeChanges) -> None:
        pos = 0
        while pos + _EVENT.size <= len(buf):
            wd, mask, _cookie, size = _EVENT.unpack_from(buf, pos)
            name = buf[pos + _EVENT.size : pos + _EVENT.size + size].rstrip(b"\0")
            pos += _EVENT.size + size
            if mask & (_IN_Q_OVERFLOW | _IN_UNMOUNT) or wd < 0:
                self.intact = False
                return
            rel_dir = self._rel_of.get(wd)
            if mask & _IN_IGNORED:
                if rel_dir is not None:
                    self._rel_of.pop(wd, None)
                    if self._wd_of.get(rel_dir) == wd:
                        del self._wd_of[rel_dir]
                continue
            if rel_dir is None:
                continue
            if mask & _IN_MOVE_SELF or (mask & _IN_DELETE_SELF and not rel_dir):
                self.intact = False  # a folder moved (its watches name the old paths), or the root went
                return
            if not name:
                continue
            rel = f"{rel_dir}/{os.fsdecode(name)}" if rel_dir else os.fsdecode(name)
            changes.paths.add(rel)
            if mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_DELETE | _IN_MOVED_TO | _IN_MOVED_FROM):
                if mask & _IN_MOVED_FROM and self._watches_under(rel):
                    self.intact = False
                    return
                changes.folders.add(rel)

    def _watches_under(self, rel: str) -> bool:
        prefix = f"{rel}/"
        return rel in self._wd_of or any(r.startswith(prefix) for r in self._wd_of)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.intact = False
