"""Process and memory limits on the whole envelope (an agent program run in bubblewrap).

Each envelope start gets a ``pids`` cgroup and a ``memory`` cgroup of its own, made as the
tool sandbox makes them for one command (:mod:`seamline.sandbox.pids`,
:mod:`seamline.sandbox.memory`): a small launcher writes its own pid into both and then
execs bubblewrap, so every process of the envelope (the egress bridge, the program, every
thread and every process its tools start) is born inside. The cgroups are removed when the
envelope ends; forks the limit refused (``pids.events``) and processes the kernel killed
for memory (``oom_kill``) are counted and go into the turn's envelope report.

A limit someone asked for (a policy's ``[limits]``, ``-o max_processes=…``) holds or
nothing runs. The defaults hold wherever a cgroup can be made; where none can, the
process limit falls back to ``RLIMIT_NPROC`` as in the tool sandbox (not for the host's
root, which it does not bind), the memory limit is not applied (``RLIMIT_AS`` per process
would stop Node and Bun, which reserve far more address space than they use), and the
envelope report names what does not hold (``limits_unenforced``).

>>> limits = EnvelopeLimits.from_options({"max_processes": "64"})
>>> limits.max_processes, sorted(limits.explicit)
(64, ['max_processes'])
"""

from __future__ import annotations

import contextlib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest, SandboxViolation
from seamline.sandbox.memory import MemoryCgroup, memory_cgroup_base
from seamline.sandbox.pids import PidsCgroup, own_v1_cgroup, own_v2_cgroup, pids_cgroup_base, read_text

__all__ = [
    "COMMAND_ONLY_LIMITS",
    "DEFAULT_MAX_PROCESSES",
    "LIMIT_OPTIONS",
    "EnvelopeCgroups",
    "EnvelopeLimits",
    "check_envelope_limits",
    "default_memory_bytes",
    "envelope_limit_facts",
    "open_envelope_cgroups",
    "policy_limit_options",
]

#: tasks (processes and threads) of one envelope: the program's own threads (Claude Code
#: about a dozen, Codex one per core), the bridge, and what the model's tools start
DEFAULT_MAX_PROCESSES: Final = 512
DEFAULT_TMP_BYTES: Final = 512 * 1024**2
#: the provider options (and policy ``[limits]``) the envelope applies
LIMIT_OPTIONS: Final = ("max_processes", "memory_bytes", "tmp_bytes")
#: policy limits of one tool-sandbox command, which a whole long-lived program cannot take
COMMAND_ONLY_LIMITS: Final = ("wall_s", "cpu_s", "output_bytes")
# bubblewrap's own processes in the cgroup, on top of max_processes (as in the tool sandbox)
_BWRAP_OVERHEAD: Final = 2
_MIN_DEFAULT_MEMORY: Final = 2 * 1024**3
_V1_MEMORY: Final = Path("/sys/fs/cgroup/memory")
_CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
# $0 is how many cgroup.procs files follow; the shell writes its pid to each, then execs the
# rest (bubblewrap). The same launcher as the tool sandbox's (seamline.sandbox.runtime).
_JOIN_CGROUPS: Final = 'n=$0; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
_LAUNCHER_SHELL: Final = "/bin/sh"


def default_memory_bytes() -> int:
    """Half of the memory seamline may use (the machine's, or less where seamline's own
    memory cgroup is limited), and never under 2 GiB: the host and seamline itself keep
    the rest, so a runaway envelope is killed before the host's own OOM killer picks."""
    return max(_memory_ceiling() // 2, _MIN_DEFAULT_MEMORY)


def _memory_ceiling() -> int:
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limits = [total]
    if (_CGROUP_ROOT / "cgroup.controllers").exists():
        own, name = own_v2_cgroup(), "memory.max"
    else:
        own, name = own_v1_cgroup("memory", _V1_MEMORY), "memory.limit_in_bytes"
    root = _CGROUP_ROOT if name == "memory.max" else _V1_MEMORY
    while own is not None and own.is_relative_to(root):
        value = read_text(own / name).strip()
        if value.isdigit():
            limits.append(int(value))
        if own == root:
            break
        own = own.parent
    return min(limits)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvelopeLimits:
    """The limits of one envelope and which of them were asked for (``explicit``): an
    asked-for limit that cannot hold here is refused; a default degrades, and says so."""

    max_processes: int = DEFAULT_MAX_PROCESSES
    memory_bytes: int = field(default_factory=default_memory_bytes)
    tmp_bytes: int = DEFAULT_TMP_BYTES
    explicit: frozenset[str] = frozenset()

    @classmethod
    def from_options(cls, options: Mapping[str, str | None]) -> EnvelopeLimits:
        """The limits the provider options ``max_processes``, ``memory_bytes`` and
        ``tmp_bytes`` give (each a positive whole number); the defaults for the others."""
        given: dict[str, int] = {}
        for name in LIMIT_OPTIONS:
            value = options.get(name)
            if value is None or value == "":
                continue
            try:
                number = int(value)
            except ValueError:
                number = 0
            if number <= 0:
                raise InvalidRequest(f"option {name} must be a positive whole number, not {value!r}")
            given[name] = number
        return cls(**given, explicit=frozenset(given))


def policy_limit_options(policy_file: str | os.PathLike[str]) -> dict[str, str]:
    """The provider options that carry a policy's ``[limits]`` to a program in the
    envelope (only those the file names). A limit of one tool-sandbox command
    (``wall_s``, ``cpu_s``, ``output_bytes``) means nothing for a whole program that runs
    its own tools: it is refused (:class:`InvalidRequest`), never ignored."""
    from seamline.sandbox.policy import load_policy

    policy = load_policy(policy_file)  # checks the whole file first
    path = Path(policy_file)
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    named = data.get("limits", {}) if isinstance(data, dict) else {}
    unusable = [name for name in COMMAND_ONLY_LIMITS if name in named]
    if unusable:
        raise InvalidRequest(
            f"sandbox policy {policy_file}: [limits] {', '.join(unusable)} bound one command of seamline's own "
            "tool sandbox; a program in the envelope runs its own tools, so they cannot apply to it. Nothing was "
            "run. Leave them out of the policy (a turn's time limit is the provider option turn_timeout)"
        )
    return {name: str(getattr(policy.limits, name)) for name in LIMIT_OPTIONS if name in named}


@dataclass(slots=True)
class _Plan:
    """Where the envelope's cgroups can be made, and what cannot hold (with why)."""

    pids_base: Path | None
    memory_base: Path | None
    nproc: int | None
    unenforced: list[str]
    refused: list[str]


def _plan(limits: EnvelopeLimits, *, prlimit: str | None) -> _Plan:
    pids_base, pids_why = pids_cgroup_base()
    memory_base, memory_why = memory_cgroup_base()
    plan = _Plan(pids_base=pids_base, memory_base=memory_base, nproc=None, unenforced=[], refused=[])
    if pids_base is None:
        if os.geteuid() != 0 and prlimit is not None:
            plan.nproc = limits.max_processes + _BWRAP_OVERHEAD
        else:
            why = "RLIMIT_NPROC does not bind the host's root" if os.geteuid() == 0 else "prlimit is missing"
            target = plan.refused if "max_processes" in limits.explicit else plan.unenforced
            target.append(f"max_processes: {pids_why}, and {why}")
    if memory_base is None:
        target = plan.refused if "memory_bytes" in limits.explicit else plan.unenforced
        target.append(f"memory_bytes: {memory_why}")
    return plan


@dataclass(slots=True)
class EnvelopeCgroups:
    """One envelope start's cgroups (either may be ``None`` where none could be made)."""

    pids: PidsCgroup | None = None
    memory: MemoryCgroup | None = None
    #: ``RLIMIT_NPROC`` for the program where no pids cgroup could be made (not root)
    nproc: int | None = None
    prlimit: str | None = None
    #: the limits that do not hold here, and why (defaults only: an asked-for one is refused)
    unenforced: tuple[str, ...] = ()
    _final: tuple[int | None, int | None] | None = None

    def launcher(self, argv: list[str]) -> list[str]:
        """``argv`` (bubblewrap's command line) behind the launcher that joins the cgroups
        first, so that bubblewrap and everything it starts are born inside them."""
        procs = [str(g.procs_file) for g in (self.pids, self.memory) if g is not None]
        if not procs:
            return argv
        return [_LAUNCHER_SHELL, "-c", _JOIN_CGROUPS, str(len(procs)), *procs, *argv]

    def inner_prefix(self) -> list[str]:
        """What goes before the program inside the envelope: ``prlimit --nproc`` where the
        process limit rests on ``RLIMIT_NPROC``, else nothing."""
        if self.nproc is None or self.prlimit is None:
            return []
        return [self.prlimit, f"--nproc={self.nproc}", "--"]

    def forks_refused(self) -> int | None:
        """Forks the pids limit refused so far (``None``: no pids cgroup counts them)."""
        if self._final is not None:
            return self._final[0]
        return self.pids.refused_forks() if self.pids is not None else None

    def oom_kills(self) -> int | None:
        """Processes killed for the memory limit so far (``None``: no memory cgroup)."""
        if self._final is not None:
            return self._final[1]
        return self.memory.oom_kills() if self.memory is not None else None

    def remove(self) -> None:
        """Keep the final counts, then kill what is left inside and remove the cgroups
        (blocking: run it in a thread). Safe to call again."""
        if self._final is None:
            self._final = (self.forks_refused(), self.oom_kills())
        for group in (self.pids, self.memory):
            if group is not None:
                with contextlib.suppress(OSError):
                    group.remove()


def check_envelope_limits(limits: EnvelopeLimits, *, who: str, prlimit: str | None = None) -> None:
    """Raise :class:`SandboxViolation` where a limit that was asked for cannot hold here."""
    _checked(limits, who=who, prlimit=prlimit)


def _checked(limits: EnvelopeLimits, *, who: str, prlimit: str | None) -> _Plan:
    plan = _plan(limits, prlimit=prlimit)
    if plan.refused:
        raise SandboxViolation(
            f"{who}: the envelope's limits cannot be applied here: {'; '.join(plan.refused)}. Nothing was run. "
            "Fix: give seamline a writable pids and memory cgroup (see `seamline sandbox check`), "
            "or leave the limit out"
        )
    return plan


def open_envelope_cgroups(limits: EnvelopeLimits, *, who: str, prlimit: str | None = None) -> EnvelopeCgroups:
    """Make the cgroups of one envelope start, or raise :class:`SandboxViolation` (nothing
    run) where a limit that was asked for cannot hold here."""
    plan = _checked(limits, who=who, prlimit=prlimit)
    made = EnvelopeCgroups(nproc=plan.nproc, prlimit=prlimit, unenforced=tuple(plan.unenforced))
    try:
        if plan.pids_base is not None:
            made.pids = PidsCgroup.create(plan.pids_base, max_pids=limits.max_processes + _BWRAP_OVERHEAD)
        if plan.memory_base is not None:
            made.memory = MemoryCgroup.create(plan.memory_base, limit_bytes=limits.memory_bytes)
    except OSError as exc:
        made.remove()
        raise SandboxViolation(
            f"{who}: cannot set the envelope's limits up: {exc.strerror or exc}. Nothing was run"
        ) from None
    return made


def envelope_limit_facts() -> dict[str, str]:
    """What ``seamline sandbox check`` says of the envelope's limits on this machine."""
    plan = _plan(EnvelopeLimits(), prlimit=_prlimit())
    if plan.pids_base is not None:
        process = f"pids cgroup per envelope under {plan.pids_base} (default {DEFAULT_MAX_PROCESSES} tasks)"
    elif plan.nproc is not None:
        process = (
            f"RLIMIT_NPROC in the envelope's user namespace (default {DEFAULT_MAX_PROCESSES}; no pids cgroup, "
            "so refused forks are not counted)"
        )
    else:
        process = f"none ({plan.unenforced[0]}); a policy's max_processes is refused"
    if plan.memory_base is not None:
        memory = f"memory cgroup per envelope under {plan.memory_base} (default {_gib(default_memory_bytes())})"
    else:
        memory = f"none ({plan.unenforced[-1]}); a policy's memory_bytes is refused"
    return {"envelope_process_limit": process, "envelope_memory_limit": memory}


def _prlimit() -> str | None:
    from seamline.sandbox.bwrap import find_prlimit

    return find_prlimit()


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"
