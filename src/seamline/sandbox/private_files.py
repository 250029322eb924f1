"""Writing seamline's own files where a sandboxed program may have planted a link.

An agent program in the envelope runs whatever its model asks, and it can write some of
the folders seamline later writes into (its private home; its runtime folder, before that
was bound read-only). ``Path.write_text`` or ``shutil.copy2`` there follows a link the
program planted and writes a host file it could never see; a file rewritten in place keeps
whatever the program put into it, mode and all, until seamline writes it again. So:

- every folder on the way is opened relative to the one above it (``dir_fd``) with
  ``O_DIRECTORY | O_NOFOLLOW``: a link anywhere is refused, whenever it appears;
- a file is written to a new name made with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (its mode
  set with ``fchmod``, on the file itself) and renamed over the target (``os.replace``
  with ``src_dir_fd``/``dst_dir_fd``): a link, or a file the program left, at the target is
  replaced, never followed nor written into;
- a folder of seamline's own must be a real folder of this user, not a link (a link at its
  name is removed and the folder made anew).

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "hook.py").symlink_to("/etc/hostname")
>>> write_private_file(folder, "hook.py", b"print('ours')\\n", mode=0o700).is_symlink()
False
>>> oct((folder / "hook.py").stat().st_mode & 0o777)
'0o700'
>>> import shutil; shutil.rmtree(folder)
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from seamline.errors import SandboxViolation

__all__ = [
    "PrivatePathRefused",
    "ensure_private_folder",
    "open_folder",
    "read_file_beneath",
    "replace_file_at",
    "write_private_file",
]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class PrivatePathRefused(SandboxViolation):
    """A path seamline will not write or read its own file through: a link, or not a
    folder (a file) of this user."""


@contextlib.contextmanager
def open_folder(
    root: Path, parts: Sequence[str] = (), *, create: bool = False, folder_mode: int = 0o700
) -> Iterator[int]:
    """A descriptor of the folder ``root/parts...``. ``root``'s last component and each
    of ``parts`` are opened with ``O_NOFOLLOW``; ``create`` makes missing ones
    (``folder_mode``, less the umask). Raises :class:`PrivatePathRefused` for a link or a
    non-folder on the way."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _refused(exc, root) from None
    try:
        for part in parts:
            child = _open_child(fd, part, root, create=create, mode=folder_mode)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_child(parent: int, part: str, root: Path, *, create: bool, mode: int) -> int:
    """The folder ``part`` under ``parent``, opened without following a link."""
    if part in ("", ".", "..") or "/" in part:
        raise PrivatePathRefused(f"{root}: {part!r} is not a plain name")
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, mode, dir_fd=parent)
        return os.open(part, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _refused(exc, root / part) from None


def replace_file_at(
    folder: int, name: str, data: bytes, *, mode: int = 0o600, times_ns: tuple[int, int] | None = None
) -> None:
    """Put ``data`` at ``name`` in the open ``folder``, as a new file (``mode``) renamed
    over whatever was there: a link at ``name`` is replaced, never followed."""
    if not name or name in (".", "..") or "/" in name:
        raise PrivatePathRefused(f"{name!r} is not a plain file name")
    temp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, _NEW_FLAGS, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(data)
        os.fchmod(fd, mode)
        if times_ns is not None:
            os.utime(fd, ns=times_ns)
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
    finally:
        os.close(fd)


def write_private_file(folder: Path, name: str, data: bytes | str, *, mode: int = 0o600) -> Path:
    """Write seamline's file ``folder/name`` (``mode``) without following a link, at
    ``folder`` itself or at ``name``; the path written."""
    payload = data.encode() if isinstance(data, str) else data
    with open_folder(folder) as fd:
        replace_file_at(fd, name, payload, mode=mode)
    return folder / name


def ensure_private_folder(path: Path) -> Path:
    """``path`` as a folder of this user's, mode 0700: made when missing; a link or a file
    left at its name is removed (never followed) and the folder made anew; a folder of
    another user is refused (:class:`PrivatePathRefused`). Its parent is trusted."""
    for _ in range(3):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                raise PrivatePathRefused(f"{path} is not a private folder of this user")
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
        return path
    raise PrivatePathRefused(f"{path}: something keeps taking the place of seamline's folder")


def read_file_beneath(
    root: Path, relative: Sequence[str], *, limit: int = 256 * 1024**2
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``root/relative...`` (at most ``limit``) and its
    status, read without following a link on the way or at the end."""
    if not relative:
        raise PrivatePathRefused(f"{root}: no file named")
    *folders, name = relative
    with open_folder(root, folders) as parent:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise _refused(exc, root.joinpath(*relative)) from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise PrivatePathRefused(f"{root.joinpath(*relative)} is not a regular file")
        if found.st_size > limit:
            raise PrivatePathRefused(f"{root.joinpath(*relative)} is larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise PrivatePathRefused(f"{root.joinpath(*relative)} is larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks), found
    finally:
        os.close(fd)


def _refused(exc: OSError, path: Path) -> Exception:
    """``ELOOP``/``ENOTDIR`` (a link or a file where a folder was asked) as a refusal; any
    other error as it is."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return PrivatePathRefused(f"{path} is a link or not a folder; refused (links are never followed)")
    return exc
