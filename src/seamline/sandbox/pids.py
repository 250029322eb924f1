"""Process-count limits through the ``pids`` cgroup controller.

``RLIMIT_NPROC`` is not enough on its own: the kernel exempts processes whose user is the
host's root, and a sandbox started by root maps its user to host root. A ``pids`` cgroup
holds for every user and also counts refused forks (``pids.events``), so a command that
tried to exceed its limit is known for certain, not guessed from its output.

Each sandboxed command gets a cgroup of its own under ``<pids mount>/seamline``; the
launcher writes its own pid into it and then execs bubblewrap, so every process of the
sandbox is born inside it. The cgroup is removed after the command.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "PidsCgroup",
    "empty_and_remove",
    "own_v1_cgroup",
    "own_v2_cgroup",
    "pids_cgroup_base",
    "read_text",
    "remove_stale",
]

_V1_MOUNT: Final = Path("/sys/fs/cgroup/pids")
_V2_MOUNT: Final = Path("/sys/fs/cgroup")
_PARENT_NAME: Final = "seamline"


def pids_cgroup_base() -> tuple[Path | None, str]:
    """A folder where per-command pids cgroups can be made, or ``None`` and the reason."""
    candidates: list[Path] = []
    if (_V1_MOUNT / "cgroup.procs").exists():
        candidates.append(_V1_MOUNT)
    elif (_V2_MOUNT / "cgroup.controllers").exists():
        own = own_v2_cgroup()
        if own is not None and "pids" in _read(own / "cgroup.subtree_control").split():
            candidates.append(own)
    if not candidates:
        return None, "no pids cgroup controller is mounted where seamline can use it (/sys/fs/cgroup/pids)"
    base = candidates[0] / _PARENT_NAME
    try:
        base.mkdir(exist_ok=True)
        remove_stale(base)
        probe = base / f"probe-{uuid.uuid4().hex[:8]}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return None, f"cannot create a pids cgroup under {candidates[0]}: {exc.strerror}"
    return base, f"pids cgroup under {base}"


@dataclass(slots=True)
class PidsCgroup:
    """One command's pids cgroup: made with a limit, read for refused forks, removed."""

    path: Path

    @classmethod
    def create(cls, base: Path, *, max_pids: int) -> PidsCgroup:
        path = base / f"cmd-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        (path / "pids.max").write_text(str(max_pids))
        return cls(path)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def refused_forks(self) -> int:
        """How many forks the limit refused (``max`` in ``pids.events``)."""
        for line in _read(self.path / "pids.events").splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self) -> None:
        empty_and_remove(self.path)


def empty_and_remove(path: Path) -> None:
    """Kill what is left inside a cgroup and remove it (it must be empty first)."""
    for _ in range(100):
        pids = [int(p) for p in _read(path / "cgroup.procs").split() if p.isdigit()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def remove_stale(base: Path) -> None:
    """Remove empty cgroups left by a seamline that was killed mid-command."""
    for child in base.glob("cmd-*"):
        owner = child.name.split("-")[1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists() and not _read(child / "cgroup.procs").strip():
            with contextlib.suppress(OSError):
                child.rmdir()


def own_v1_cgroup(controller: str, mount: Path) -> Path | None:
    """This process's cgroup in the v1 hierarchy of ``controller`` (mounted at ``mount``)."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, names, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controller in names.split(","):
            return mount / path.lstrip("/")
    return None


def own_v2_cgroup() -> Path | None:
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        if line.startswith("0::"):
            return _V2_MOUNT / line[3:].lstrip("/")
    return None


def read_text(path: Path) -> str:
    """A cgroup file's text, or "" when it cannot be read."""
    return _read(path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
