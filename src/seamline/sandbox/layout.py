"""The sandbox layout: which host folders stand behind /workspace, /inputs and /outputs."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from seamline.sandbox.policy import SandboxPolicy

__all__ = [
    "INNER_INPUTS",
    "INNER_OUTPUTS",
    "INNER_SCRATCH",
    "INNER_WORKSPACE",
    "Layout",
    "LaunchPlan",
    "SandboxBackend",
]

INNER_WORKSPACE: Final = "/workspace"
INNER_INPUTS: Final = "/inputs"
INNER_OUTPUTS: Final = "/outputs"
INNER_SCRATCH: Final = "/outputs/scratch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Host folders of one sandbox. ``inputs`` None means an empty read-only /inputs."""

    workspace: Path
    outputs: Path
    inputs: Path | None = None
    #: ``network.allow``: (the egress proxy's unix socket outside, its port inside); see
    #: :mod:`seamline.sandbox.egress`
    egress: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchPlan:
    """How to start one command: argv, the environment of the started process, its cwd,
    and file descriptors the process inherits (a seccomp program); :meth:`close` them
    once it started."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    pass_fds: tuple[int, ...] = ()

    def close(self) -> None:
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class SandboxBackend(Protocol):
    """Turns a shell command into a launch plan that confines it."""

    name: str
    #: whether the backend itself isolates (mounts, namespaces) or trusts its surroundings
    isolates: bool

    def plan(
        self, command: str, *, layout: Layout, policy: SandboxPolicy, nproc_rlimit: bool, memory_rlimit: bool = True
    ) -> LaunchPlan: ...


def limit_prefix(prlimit: str, policy: SandboxPolicy, *, nproc_rlimit: bool, memory_rlimit: bool = True) -> list[str]:
    """``prlimit`` arguments that set CPU and (when asked: no cgroup holds them) memory and
    process limits, then run."""
    lim = policy.limits
    # Soft CPU limit sends SIGXCPU (reported as such); the hard one, a second later, kills.
    argv = [prlimit, f"--cpu={lim.cpu_s}:{lim.cpu_s + 1}", "--core=0"]
    if memory_rlimit:
        argv.append(f"--as={lim.memory_bytes}")
    if nproc_rlimit:
        argv.append(f"--nproc={lim.max_processes}")
    return [*argv, "--"]
