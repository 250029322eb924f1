"""How a revert puts the workspace back: plan every path, check the plan, then apply it.

A run may have swapped a folder for a symlink (or the reverse). Restoring paths one by
one, newest first, would then write through the link, or restore a file into a folder
that a later restore replaces. So the revert first works out the one state each path
must end in (the state before the earliest undone step), checks that every path to be
restored sits in real folders once the plan is applied, and refuses before any change
when it does not. Only then does it remove, deepest first (never through a link), and
create, shallowest first.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from seamline.errors import SandboxViolation
from seamline.sandbox.file_index import PathState

__all__ = ["apply_plan", "check_plan", "plan_restore", "real_folders", "safe_rel"]


def safe_rel(rel: str) -> str:
    """``rel`` when it is a plain relative path inside the workspace; refused otherwise."""
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts or not parts:
        raise SandboxViolation(f"journal path {rel!r} is not inside the workspace")
    return rel


def plan_restore(rows: Sequence[Sequence[Any]]) -> dict[str, PathState]:
    """The end state of every path: ``rows`` come newest first, so the earliest "before" wins."""
    want: dict[str, PathState] = {}
    for row in rows:
        rel, kind, data, mode = row[2], row[3], row[4], row[5]
        want[safe_rel(rel)] = PathState(kind, data, mode)
    return want


def check_plan(root: Path, want: Mapping[str, PathState]) -> None:
    """Refuse (nothing changed yet) a plan that would leave a restored path behind a link."""
    for rel, state in want.items():
        if state.kind == "absent":
            continue
        for folder in _ancestors(rel):
            planned = want.get(folder)
            if planned is not None:
                ok = planned.kind == "dir"
            else:
                ok = _kind(root / folder) in ("dir", "absent")
            if not ok:
                raise SandboxViolation(
                    f"cannot restore {rel!r} exactly: its folder {folder!r} would not be a real folder; nothing reverted"
                )


def apply_plan(root: Path, want: Mapping[str, PathState], *, blob: Callable[[str], bytes]) -> None:
    """Remove what differs (deepest first), then create (shallowest first), then folder modes."""
    for rel in sorted(want, key=_depth, reverse=True):
        if not real_folders(root, rel):
            continue  # beyond a link: not in the workspace; the link itself goes at its own level
        target = root / rel
        kind = _kind(target)
        if kind == "absent" or (kind == "dir" and want[rel].kind == "dir"):
            continue
        if kind == "dir":
            shutil.rmtree(target)
        else:
            target.unlink()
    for rel in sorted(want, key=_depth):
        state = want[rel]
        if state.kind == "absent":
            continue
        target = root / rel
        for folder in _ancestors(rel):
            if _kind(root / folder) == "absent":
                (root / folder).mkdir()
        if not real_folders(root, rel):
            raise SandboxViolation(f"cannot restore {rel!r}: a folder on its path is not a real folder")
        if state.kind == "dir":
            if _kind(target) != "dir":
                target.mkdir()
        elif state.kind == "link":
            os.symlink(state.data or "", target)
        else:
            data = blob(state.data or "")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            if state.mode is not None:
                os.chmod(target, state.mode)
    # Folder modes last, deepest first: a read-only folder must not stop its contents.
    for rel in sorted(want, key=_depth, reverse=True):
        state = want[rel]
        if state.kind == "dir" and state.mode is not None:
            os.chmod(root / rel, state.mode)


def _kind(path: Path) -> str:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        return "link"
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def real_folders(root: Path, rel: str) -> bool:
    """Whether every folder above ``rel`` exists and is a real folder, not a link."""
    return all(_kind(root / folder) == "dir" for folder in _ancestors(rel))


def _ancestors(rel: str) -> list[str]:
    parts = Path(rel).parts
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _depth(rel: str) -> int:
    return len(Path(rel).parts)
