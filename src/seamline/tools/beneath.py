"""Open files beneath the workspace folder without ever following a link out of it.

A path is checked first (:meth:`Workspace.resolve`), but a folder can be swapped for a
symlink between that check and the open (a sandboxed shell running beside the host tool
can do it). So the host-side tools open from a descriptor of the workspace folder, one
component at a time, each with ``O_NOFOLLOW``: a link that appeared after the check makes
the open fail instead of leading outside.

Files with more than one hard link are refused for writing: the other name may be
outside the workspace and a write would land there.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest, SandboxViolation

__all__ = ["open_beneath", "open_dir_beneath", "parts_beneath", "regular_file", "writable_file"]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LINK_ERRORS: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EMLINK})


def parts_beneath(root: Path, real: Path) -> list[str]:
    """The components of ``real`` (a resolved path) below ``root``."""
    return list(real.relative_to(root).parts)


@contextmanager
def open_dir_beneath(root: Path, parts: list[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder ``root/parts...``, reached without following links;
    with ``create``, missing folders are made on the way."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts:
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise InvalidRequest(f"no such folder: {'/'.join(parts)}") from None
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = _open_dir_step(name, fd)
            except OSError as exc:
                if exc.errno in _LINK_ERRORS:
                    raise SandboxViolation(
                        f"{name!r} is a link or not a folder; refused (it may lead outside)"
                    ) from None
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _open_dir_step(name: str, fd: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in _LINK_ERRORS:
            raise SandboxViolation(f"{name!r} is a link or not a folder; refused (it may lead outside)") from None
        raise


def open_beneath(root: Path, parts: list[str], flags: int, mode: int = 0o666, *, create_dirs: bool = False) -> int:
    """Open ``root/parts...`` with ``flags`` plus ``O_NOFOLLOW``; no component may be a link."""
    if not parts:
        raise InvalidRequest("not a file: the workspace folder itself")
    with open_dir_beneath(root, parts[:-1], create=create_dirs) as dir_fd:
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SandboxViolation(f"{'/'.join(parts)!r} is a link; refused (it may lead outside)") from None
            raise


def regular_file(root: Path, parts: list[str]) -> tuple[int, os.stat_result]:
    """Open a file for reading: only a regular file (never a FIFO, device or socket,
    whose open or read could block or never end)."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    try:
        fd = open_beneath(root, parts, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InvalidRequest(f"no such file: {'/'.join(parts)}") from None
    except PermissionError:
        raise InvalidRequest(f"not readable: {'/'.join(parts)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidRequest(f"not a regular file: {'/'.join(parts)} ({_kind(st.st_mode)})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def writable_file(root: Path, parts: list[str]) -> tuple[int, bool]:
    """Open (or create) a regular file for writing, not yet truncated; and whether it existed.
    A file with another hard link is refused: the write would reach that other name."""
    try:
        fd = open_beneath(root, parts, os.O_WRONLY | os.O_NONBLOCK, create_dirs=True)
        existed = True
    except FileNotFoundError:
        fd = open_beneath(root, parts, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, create_dirs=True)
        existed = False
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise InvalidRequest(f"not a regular file: {'/'.join(parts)} (a FIFO)") from None
        if exc.errno == errno.EISDIR:
            raise InvalidRequest(f"not a file: {'/'.join(parts)} is a folder") from None
        if exc.errno == errno.EACCES:
            raise InvalidRequest(f"not writable: {'/'.join(parts)}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidRequest(f"not a regular file: {'/'.join(parts)} ({_kind(st.st_mode)})")
        if st.st_nlink > 1:
            raise SandboxViolation(
                f"{'/'.join(parts)} has {st.st_nlink} hard links; writing it would change the other names too "
                "(which may be outside the workspace)"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, existed


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"
