"""Reading and writing a file beneath a folder without following a single link.

seamline acts on the host for a program it does not trust: an ACP agent asks its client
(seamline) to read and write text files (``fs/read_text_file``, ``fs/write_text_file``),
and the agent, or whatever runs inside its envelope, can plant links and race folders in
the workspace. A check of ``Path.resolve()`` followed by ``open()`` loses that race (the
folder checked is not the folder opened), so here every component is opened relative to
the folder above it (``dir_fd``) with ``O_NOFOLLOW``: a link anywhere on the way is
refused, whatever it points at and whenever it appears.

The rules are the envelope's, so the host never does for the agent what the sandbox would
not let it do:

- nothing outside the folder: an absolute path must lie beneath it, ``..`` is refused;
- no link is followed, in the folders on the way or at the end;
- ``.git`` (any component, any case) is read-only: the envelope mounts a repository's
  configuration read-only, and a write there runs on the user's next ``git status``;
- only regular files: a FIFO, a socket or a device is refused (a FIFO would block);
- a write goes to a new file renamed over the old one, so a hard link to a file elsewhere
  is replaced, never written through.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> write_text_beneath(root, "notes/a.txt", "hi")[1]
False
>>> read_text_beneath(root, str(root / "notes" / "a.txt"))[0]
'hi'
>>> _ = (root / "out").symlink_to("/etc")
>>> read_text_beneath(root, "out/hostname")
Traceback (most recent call last):
...
seamline.sandbox.confined_files.ConfinedPathRefused: out/hostname: out is a link; refused (links are never followed)
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from seamline.errors import SandboxViolation

__all__ = ["ConfinedPathRefused", "read_text_beneath", "relative_beneath", "write_text_beneath"]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_READ: Final = 64 * 1024 * 1024


class ConfinedPathRefused(SandboxViolation):
    """A path the confined read or write refuses: outside the folder, through a link,
    into ``.git``, or not a regular file."""


def relative_beneath(root: Path, raw_path: str) -> tuple[str, ...]:
    """The components of ``raw_path`` below ``root`` (an absolute path must lie beneath
    ``root`` or its real path; a relative one is taken from ``root``). Refuses ``..``,
    an empty path, a NUL, and the folder itself."""
    if not isinstance(raw_path, str) or not raw_path or "\0" in raw_path:
        raise ConfinedPathRefused("a path is required (a string without NUL)")
    given = os.path.normpath(raw_path)
    if os.path.isabs(given):
        for base in dict.fromkeys((os.path.normpath(str(root)), os.path.realpath(root))):
            if given.startswith(base.rstrip("/") + "/"):
                given = given[len(base.rstrip("/")) + 1 :]
                break
        else:
            raise ConfinedPathRefused(f"{raw_path} is outside the workspace {root}; refused")
    parts = tuple(p for p in given.split("/") if p not in ("", "."))
    if not parts or ".." in parts:
        raise ConfinedPathRefused(f"{raw_path} is outside the workspace {root}; refused")
    return parts


def read_text_beneath(root: Path, raw_path: str) -> tuple[str, Path]:
    """The text of the regular file ``raw_path`` beneath ``root`` (UTF-8, bad bytes
    replaced), and its path; raises :class:`ConfinedPathRefused` or :class:`OSError`."""
    parts = relative_beneath(root, raw_path)
    with _folder(root, parts[:-1], raw_path, create=False) as folder:
        fd = _open_leaf(folder, parts, raw_path, _READ_FLAGS)
        with os.fdopen(fd, "rb") as fh:
            found = os.fstat(fh.fileno())
            if not stat.S_ISREG(found.st_mode):
                raise ConfinedPathRefused(f"{raw_path}: not a regular file; refused")
            os.set_blocking(fh.fileno(), True)
            data = fh.read(_MAX_READ + 1)
    if len(data) > _MAX_READ:
        raise ConfinedPathRefused(f"{raw_path}: larger than {_MAX_READ // (1024 * 1024)} MiB; refused")
    return data.decode("utf-8", errors="replace"), Path(root, *parts)


def write_text_beneath(root: Path, raw_path: str, content: str) -> tuple[Path, bool]:
    """Write ``content`` (UTF-8) to ``raw_path`` beneath ``root``, making missing folders;
    the path and whether the file existed. Raises :class:`ConfinedPathRefused` or
    :class:`OSError`; nothing is written outside ``root``, through a link, or into ``.git``."""
    parts = relative_beneath(root, raw_path)
    _refuse_git(parts, raw_path)
    data = content.encode("utf-8")
    with _folder(root, parts[:-1], raw_path, create=True) as folder:
        name = parts[-1]
        mode = 0o644
        existed = False
        try:
            found = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(found.st_mode):
                raise ConfinedPathRefused(f"{raw_path}: {name} is a link; refused (links are never followed)")
            if not stat.S_ISREG(found.st_mode):
                raise ConfinedPathRefused(f"{raw_path}: not a regular file; refused")
            existed, mode = True, stat.S_IMODE(found.st_mode)
        temp = f".{name[:64]}.seamline-{secrets.token_hex(6)}"
        fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fh.fileno(), mode)
            # A rename replaces whatever is at ``name`` now (a link planted since the look
            # above included) and never writes through it.
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=folder)
            raise
    return Path(root, *parts), existed


def _refuse_git(parts: tuple[str, ...], raw_path: str) -> None:
    if any(p.casefold() == ".git" for p in parts):
        raise ConfinedPathRefused(f"{raw_path}: .git is read-only to the agent; refused")


@contextlib.contextmanager
def _folder(root: Path, parts: tuple[str, ...], raw_path: str, *, create: bool) -> Iterator[int]:
    """An open descriptor of the folder ``parts`` beneath ``root``, reached one component
    at a time without following links (missing folders made when ``create``)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                child = _open_dir_refusing_links(fd, part, raw_path)
            except OSError as exc:
                raise _refusal(exc, raw_path, part, fd) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_dir_refusing_links(parent: int, part: str, raw_path: str) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _refusal(exc, raw_path, part, parent) from None


def _open_leaf(folder: int, parts: tuple[str, ...], raw_path: str, flags: int) -> int:
    try:
        return os.open(parts[-1], flags, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        raise _refusal(exc, raw_path, parts[-1], folder) from None


def _refusal(exc: OSError, raw_path: str, part: str, parent: int) -> Exception:
    """What an ``open`` with ``O_NOFOLLOW`` failing on ``part`` means: a link (``ELOOP``;
    ``ENOTDIR`` when a folder was asked for), something else that is no folder, or the
    error itself."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
        return exc
    try:
        link = stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        link = exc.errno == errno.ELOOP
    if link:
        return ConfinedPathRefused(f"{raw_path}: {part} is a link; refused (links are never followed)")
    return ConfinedPathRefused(f"{raw_path}: {part} is not a folder; refused")
