"""Reading and writing a file beneath a folder without following a single link.

seamline acts on the host for a program it does not trust: an ACP agent asks its client
(seamline) to read and write text files (``fs/read_text_file``, ``fs/write_text_file``),
and the agent, or whatever runs inside its envelope, can plant links and race folders in
the workspace. A check of ``Path.resolve()`` followed by ``open()`` loses that race (the
folder checked is not the folder opened), so here every component is opened relative to
the folder above it (``dir_fd``) with ``O_NOFOLLOW`` (:mod:`seamline.sandbox.private_files`
does the walking and the writing): a link anywhere on the way is refused, whatever it
points at and whenever it appears.

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
>>> read_text_beneath(root, "out/hostname")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
seamline.sandbox.confined_files.ConfinedPathRefused: out/hostname: .../out is a link or not a folder; refused (links are never followed)
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from seamline.sandbox.private_files import PrivatePathRefused, open_folder, read_file_beneath, replace_file_at

__all__ = ["ConfinedPathRefused", "read_text_beneath", "relative_beneath", "write_text_beneath"]

_MAX_READ: Final = 64 * 1024 * 1024


class ConfinedPathRefused(PrivatePathRefused):
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
            prefix = base.rstrip("/") + "/"
            if given.startswith(prefix):
                given = given[len(prefix) :]
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
    with _refusals(raw_path):
        data, _ = read_file_beneath(Path(os.path.realpath(root)), parts, limit=_MAX_READ)
    return data.decode("utf-8", errors="replace"), Path(root, *parts)


def write_text_beneath(root: Path, raw_path: str, content: str) -> tuple[Path, bool]:
    """Write ``content`` (UTF-8) to ``raw_path`` beneath ``root``, making missing folders;
    the path and whether the file existed. Raises :class:`ConfinedPathRefused` or
    :class:`OSError`; nothing is written outside ``root``, through a link, or into ``.git``."""
    parts = relative_beneath(root, raw_path)
    if any(p.casefold() == ".git" for p in parts):
        raise ConfinedPathRefused(f"{raw_path}: .git is read-only to the agent; refused")
    *folders, name = parts
    with _refusals(raw_path), open_folder(Path(os.path.realpath(root)), folders, create=True, folder_mode=0o777) as fd:
        mode, existed = 0o644, False
        try:
            found = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(found.st_mode):
                raise ConfinedPathRefused(f"{raw_path}: {name} is a link; refused (links are never followed)")
            if not stat.S_ISREG(found.st_mode):
                raise ConfinedPathRefused(f"{raw_path}: not a regular file; refused")
            mode, existed = stat.S_IMODE(found.st_mode), True
        # A rename replaces whatever is at ``name`` by now (a link planted since the look
        # above included) and never writes through it, nor through a hard link.
        replace_file_at(fd, name, content.encode("utf-8"), mode=mode)
    return Path(root, *parts), existed


@contextlib.contextmanager
def _refusals(raw_path: str) -> Iterator[None]:
    """A refusal of the walk, named for the path the agent asked for."""
    try:
        yield
    except ConfinedPathRefused:
        raise
    except PrivatePathRefused as exc:
        raise ConfinedPathRefused(f"{raw_path}: {exc}") from None
