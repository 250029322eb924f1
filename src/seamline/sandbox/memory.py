"""A memory limit for the whole sandbox through the ``memory`` cgroup controller.

``RLIMIT_AS`` (what ``prlimit --as`` sets) limits each process's address space on its
own: ten processes each just under it use ten times the limit together, and programs
that reserve large address ranges (Go, the JVM) fail under it with plenty of memory
free. A memory cgroup limits what the sandbox's processes use together, and says when
it had to kill one (``oom_kill`` in ``memory.events`` or ``memory.oom_control``).

cgroup v2: the cgroup seamline runs in must delegate ``memory`` (listed in its
``cgroup.subtree_control``). cgroup v1: the ``memory`` hierarchy must be writable. When
neither holds, the limit falls back to ``RLIMIT_AS`` per process, and ``seamline sandbox
check`` says so.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from seamline.sandbox.pids import empty_and_remove, own_v1_cgroup, own_v2_cgroup, read_text, remove_stale

__all__ = ["MemoryCgroup", "memory_cgroup_base"]

_V1_MOUNT: Final = Path("/sys/fs/cgroup/memory")
_V2_MOUNT: Final = Path("/sys/fs/cgroup")
_PARENT_NAME: Final = "seamline"


def memory_cgroup_base() -> tuple[Path | None, str]:
    """A folder where per-command memory cgroups can be made, or ``None`` and the reason."""
    if (_V2_MOUNT / "cgroup.controllers").exists():
        own = own_v2_cgroup()
        if own is None or "memory" not in read_text(own / "cgroup.subtree_control").split():
            return None, "the cgroup v2 seamline runs in does not delegate the memory controller"
        parent = own
    elif (_V1_MOUNT / "cgroup.procs").exists():
        own = own_v1_cgroup("memory", _V1_MOUNT)
        parent = own if own is not None and own.is_dir() else _V1_MOUNT
    else:
        return None, "no memory cgroup controller is mounted"
    base = parent / _PARENT_NAME
    try:
        base.mkdir(exist_ok=True)
        remove_stale(base)
        probe = MemoryCgroup.create(base, limit_bytes=64 * 1024 * 1024)
        probe.remove()
    except OSError as exc:
        return None, f"cannot create a memory cgroup under {parent}: {exc.strerror}"
    return base, f"memory cgroup under {base}"


@dataclass(slots=True)
class MemoryCgroup:
    """One command's memory cgroup: made with a limit (no swap), read for kills, removed."""

    path: Path

    @classmethod
    def create(cls, base: Path, *, limit_bytes: int) -> MemoryCgroup:
        import os

        path = base / f"cmd-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        group = cls(path)
        try:
            if (path / "memory.max").exists():
                (path / "memory.max").write_text(str(limit_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                # memsw (memory + swap) may only be set at or above the memory limit.
                if (path / "memory.memsw.limit_in_bytes").exists():
                    try:
                        (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
                    except OSError:
                        pass  # swap accounting is off: no swap to limit
        except OSError:
            group.remove()
            raise
        return group

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def oom_kills(self) -> int:
        """How many processes the limit killed."""
        for name in ("memory.events", "memory.oom_control"):
            for line in read_text(self.path / name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
        return 0

    def remove(self) -> None:
        empty_and_remove(self.path)
