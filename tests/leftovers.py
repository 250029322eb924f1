"""What a process leaves behind: its descendant processes, its open file descriptors and
the runtime folders under a given root, read from ``/proc`` and the file system. Used by
the many-agents tests to check that closing sessions, races and pipelines leaves nothing.

A process seen alive is remembered with its start time, so a pid the kernel reused for an
unrelated process is not mistaken for a leftover; a process that outlived its parent (and
was adopted by init) is still found by its pid.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Leftovers", "descendants", "fd_targets", "still_alive"]


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19]), fields[0]


def descendants(root: int | None = None) -> dict[int, int]:
    """Every live (non-zombie) descendant of ``root`` (default: this process): pid -> start time."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        found = _stat(int(entry.name))
        if found is None or found[2] in ("Z", "X"):
            continue
        children.setdefault(found[0], []).append(int(entry.name))
        starts[int(entry.name)] = found[1]
    seen: dict[int, int] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in starts:
            continue
        seen[pid] = starts[pid]
        todo.extend(children.get(pid, ()))
    return seen


def still_alive(seen: dict[int, int]) -> list[str]:
    """The processes of ``seen`` that still run (same pid, same start time), with their
    command lines."""
    left: list[str] = []
    for pid, start in seen.items():
        found = _stat(pid)
        if found is None or found[1] != start or found[2] in ("Z", "X"):
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        left.append(f"{pid}: {argv[:160]}")
    return left


def fd_targets(pid: int | None = None) -> list[str]:
    """What ``pid``'s (default: this process's) open file descriptors point at."""
    base = Path(f"/proc/{pid or os.getpid()}/fd")
    targets: list[str] = []
    for fd in base.iterdir():
        try:
            targets.append(os.readlink(fd))
        except OSError:
            continue  # closed while listed (the listing's own descriptor among them)
    return sorted(targets)


@dataclass
class Leftovers:
    """A before-and-after check of one process: take a baseline with :meth:`baseline`,
    :meth:`watch` while the work runs (so every process it starts is remembered), then
    :meth:`problems` once it closed: processes that still run, descriptors over the
    baseline, entries under the watched folders."""

    folders: tuple[Path, ...] = ()
    pid: int | None = None
    #: descriptors over the baseline that are allowed, by target, up to a count each
    fds_allowed: dict[str, int] = field(default_factory=dict[str, int])
    fds: list[str] = field(default_factory=list[str])
    seen: dict[int, int] = field(default_factory=dict[int, int])
    #: descendants that ran before the work (another test's server in the same worker)
    before: dict[int, int] = field(default_factory=dict[int, int])

    def baseline(self) -> None:
        self.fds = fd_targets(self.pid)
        self.before = descendants(self.pid)
        self.seen = {}

    def watch(self) -> int:
        """Remember the live descendants the work started; how many there are now."""
        now = self._new(descendants(self.pid))
        self.seen.update(now)
        return len(now)

    def problems(self) -> list[str]:
        found = [f"process left: {line}" for line in still_alive(self.seen)]
        found += [
            f"process left: {pid} (a descendant)" for pid in self._new(descendants(self.pid)) if pid not in self.seen
        ]
        now = fd_targets(self.pid)
        extra = list(now)
        for target in self.fds:
            if target in extra:
                extra.remove(target)
        for target, count in self.fds_allowed.items():
            for _ in range(count):
                if target in extra:
                    extra.remove(target)
        if extra:
            found.append(f"{len(extra)} file descriptors over the baseline: {extra}")
        for folder in self.folders:
            if folder.is_dir() and (entries := sorted(p.name for p in folder.iterdir())):
                found.append(f"left in {folder}: {entries}")
        return found

    def _new(self, alive: dict[int, int]) -> dict[int, int]:
        return {pid: start for pid, start in alive.items() if self.before.get(pid) != start}
