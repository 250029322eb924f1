"""A private folder per session for what seamline hands a program it starts: the sockets of
the approval hook and the egress proxy, the envelope's private home. Short paths (a unix
socket's path must stay under 108 bytes), mode 0700, removed by :func:`remove_runtime_dir`.

The whole-process sandbox binds this folder at the same path inside, read-only: a hook or a
bridge running inside reaches the sockets seamline serves outside (``connect`` needs no
write), but cannot replace a socket, the hook program or a settings file seamline wrote.
The one place inside it the program may write is :func:`ensure_expose_dir`, where the
envelope's bridge makes the sockets of servers the program runs. seamline writes here only
through :mod:`seamline.sandbox.private_files` (no link is ever followed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

from seamline.sandbox.private_files import ensure_private_folder

__all__ = ["EXPOSE_FOLDER", "ensure_expose_dir", "ensure_runtime_dir", "remove_runtime_dir", "runtime_root"]

_STATE_KEY: Final = "runtime_dir"
#: the subfolder the envelope binds read-write (its bridge makes sockets there)
EXPOSE_FOLDER: Final = "expose"


def runtime_root() -> Path:
    """``$XDG_RUNTIME_DIR/seamline`` when that is a private folder of ours, else
    ``<tmp>/seamline-<uid>``."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.stat(xdg).st_uid == os.getuid():
        return Path(xdg) / "seamline"
    return Path(tempfile.gettempdir()) / f"seamline-{os.getuid()}"


def ensure_runtime_dir(session_id: str, state: dict[str, Any] | None = None) -> Path:
    """The session's runtime folder, made (0700) when missing; kept in ``state`` when given.
    It is a real folder of this user's: a link found at its name is replaced, not followed."""
    kept = state.get(_STATE_KEY) if state is not None else None
    if isinstance(kept, Path) and not kept.is_symlink() and kept.is_dir():
        return kept
    root = runtime_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.is_symlink() or root.stat().st_uid != os.getuid():
        raise PermissionError(f"{root} is not a private folder of this user")
    os.chmod(root, 0o700)
    short = hashlib.sha256(f"{session_id}:{os.getpid()}".encode()).hexdigest()[:12]
    folder = ensure_private_folder(root / short)
    if state is not None:
        state[_STATE_KEY] = folder
    return folder


def ensure_expose_dir(runtime: Path) -> Path:
    """``runtime``'s subfolder for the sockets the envelope's bridge makes (the only part of
    the runtime folder the envelope may write), a real folder of this user's (0700)."""
    return ensure_private_folder(runtime / EXPOSE_FOLDER)


def remove_runtime_dir(state: dict[str, Any]) -> None:
    """Remove the session's runtime folder (when one was made), sockets and all."""
    folder = state.pop(_STATE_KEY, None)
    if isinstance(folder, Path):
        shutil.rmtree(folder, ignore_errors=True)
