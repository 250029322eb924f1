"""A private folder per session for what seamline hands a program it starts: the sockets of
the approval hook and the egress proxy, the envelope's private home. Short paths (a unix
socket's path must stay under 108 bytes), mode 0700, removed by :func:`remove_runtime_dir`.

The whole-process sandbox binds this folder at the same path inside, read-write, so a hook
or a bridge running inside reaches the sockets seamline serves outside.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ensure_runtime_dir", "remove_runtime_dir", "runtime_root"]

_STATE_KEY = "runtime_dir"


def runtime_root() -> Path:
    """``$XDG_RUNTIME_DIR/seamline`` when that is a private folder of ours, else
    ``<tmp>/seamline-<uid>``."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.stat(xdg).st_uid == os.getuid():
        return Path(xdg) / "seamline"
    return Path(tempfile.gettempdir()) / f"seamline-{os.getuid()}"


def ensure_runtime_dir(session_id: str, state: dict[str, Any] | None = None) -> Path:
    """The session's runtime folder, made (0700) when missing; kept in ``state`` when given."""
    if state is not None and isinstance(state.get(_STATE_KEY), Path) and state[_STATE_KEY].is_dir():
        return state[_STATE_KEY]  # type: ignore[no-any-return]
    root = runtime_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.is_symlink() or root.stat().st_uid != os.getuid():
        raise PermissionError(f"{root} is not a private folder of this user")
    os.chmod(root, 0o700)
    short = hashlib.sha256(f"{session_id}:{os.getpid()}".encode()).hexdigest()[:12]
    folder = root / short
    folder.mkdir(mode=0o700, exist_ok=True)
    if state is not None:
        state[_STATE_KEY] = folder
    return folder


def remove_runtime_dir(state: dict[str, Any]) -> None:
    """Remove the session's runtime folder (when one was made), sockets and all."""
    folder = state.pop(_STATE_KEY, None)
    if isinstance(folder, Path):
        shutil.rmtree(folder, ignore_errors=True)
