"""The files of the SQLite stores this process holds open, which nothing else may open.

SQLite keeps POSIX advisory locks on a database file; closing *any* descriptor of it in
this process drops them all, after which concurrent writers corrupt the database. The
store (:mod:`seamline.sessions.sqlite_file`) counts its files here while they are open,
and the engine's file tools and the edit journal ask :func:`is_store_file` before they
open a file. The registry lives below both, so the engine never imports the store.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Final

__all__ = ["is_store_entry", "is_store_file", "track"]

# The files of the SQLite stores this process holds open. Opening and closing one of them
# outside SQLite (a read tool, a hash) drops every POSIX lock this process holds on it, and
# concurrent writers then corrupt the database: such code asks :func:`is_store_file` first.
_LIVE_PATHS: dict[str, int] = {}
_LIVE_INODES: dict[tuple[int, int], int] = {}
_STORE_SUFFIXES: Final = ("", "-wal", "-shm", "-journal", ".usage")  # .usage: its usage journals


def is_store_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file of a store this process has open (the database, its WAL,
    shared memory or journal, or the folder of its usage journals), which must never be opened outside the store's connection."""
    if not _LIVE_PATHS:
        return False
    real = os.path.realpath(path)
    if real in _LIVE_PATHS:
        return True
    try:
        info = os.stat(real)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) in _LIVE_INODES  # a hard link to the database


def is_store_entry(real_path: str, st: os.stat_result) -> bool:
    """:func:`is_store_file` for a path with no link in its folders (a scan that never
    follows links into folders knows it) and its ``lstat`` ``st``: no ``realpath``, no
    system call, unless the entry is itself a link."""
    if not _LIVE_PATHS:
        return False
    if stat.S_ISLNK(st.st_mode):
        return is_store_file(real_path)
    return real_path in _LIVE_PATHS or (st.st_dev, st.st_ino) in _LIVE_INODES


def track(path: str, delta: int) -> None:
    """Count a store at ``path`` as opened (``+1``) or closed (``-1``) by this process."""
    real = os.path.realpath(path)
    keys: list[tuple[dict[Any, int], Any]] = [(_LIVE_PATHS, real + suffix) for suffix in _STORE_SUFFIXES]
    try:
        info = os.stat(real)
        keys.append((_LIVE_INODES, (info.st_dev, info.st_ino)))
    except OSError:
        pass
    for table, key in keys:
        count = table.get(key, 0) + delta
        if count > 0:
            table[key] = count
        else:
            table.pop(key, None)
