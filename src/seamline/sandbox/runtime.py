"""The task-scoped sandbox that the shell tool runs its commands in.

:meth:`Sandbox.run_shell` checks a command with the :class:`CommandGuard`, runs it through
the backend within the policy's limits, and turns a limit it hit into a classified
``sandbox`` error. :meth:`Sandbox.execute` runs without the guard: it is the boundary
alone, which the escape tests use to show containment of what the guard cannot read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest, SandboxViolation
from seamline.sandbox.egress import AllowList, EgressGate, Refusal
from seamline.sandbox.guard import CommandGuard
from seamline.sandbox.layout import Layout, SandboxBackend
from seamline.sandbox.memory import MemoryCgroup
from seamline.sandbox.pids import PidsCgroup
from seamline.sandbox.policy import SandboxPolicy
from seamline.sandbox.process import CommandOutcome, run_bounded

__all__ = ["Sandbox", "ShellOutcome"]

# Processes bubblewrap itself keeps in the cgroup (launcher/bwrap, the namespace's init).
_BWRAP_OVERHEAD: Final = 2
_PROXY_PORT: Final = 3128
_BRIDGE_TASKS: Final = 16
_MESSAGE_OUTPUT: Final = 4000
# $0 is how many cgroup.procs files follow; the shell writes its pid to each, then execs the rest.
_JOIN_CGROUPS: Final = 'n=$0; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'


@dataclass(frozen=True, slots=True)
class ShellOutcome:
    """A bounded run plus what the sandbox learned about it."""

    outcome: CommandOutcome
    refused_forks: int
    oom_kills: int = 0


class Sandbox:
    """One sandbox for a run: a backend, a policy, the workspace and the outputs folder.

    ``pids_base`` is the folder for per-command pids cgroups; ``None`` means the process
    limit rests on ``RLIMIT_NPROC`` (see :mod:`seamline.sandbox.pids`). ``memory_base``
    likewise for memory cgroups; ``None`` means ``RLIMIT_AS`` per process
    (see :mod:`seamline.sandbox.memory`).
    """

    def __init__(
        self,
        *,
        backend: SandboxBackend,
        workspace: Path,
        policy: SandboxPolicy,
        outputs: Path,
        pids_base: Path | None,
        memory_base: Path | None = None,
    ) -> None:
        self.backend = backend
        self.policy = policy
        self.pids_base = pids_base
        self.memory_base = memory_base
        outputs.mkdir(parents=True, exist_ok=True)
        (outputs / "scratch").mkdir(exist_ok=True)
        self.layout = Layout(workspace=workspace.resolve(), outputs=outputs.resolve(), inputs=policy.inputs)
        host = () if backend.isolates else tuple(p for p in (workspace, outputs, policy.inputs) if p is not None)
        self.guard = CommandGuard(workspace_root=self.layout.workspace, policy=policy, host_layout=host)
        #: connections the egress proxy refused (``network.allow``), over the sandbox's life
        self.egress_refused: list[Refusal] = []

    def prepare_workspace(self) -> None:
        """Make what the backend's mounts need in the workspace (bubblewrap: the ``.git``
        entries it pins read-only), before an edit journal's scan of a command, so that
        they are not journaled as the command's changes."""
        if self.backend.name == "bwrap" and not self.policy.git_config_writable:
            from seamline.sandbox.bwrap import prepare_git_guard

            prepare_git_guard(self.layout.workspace)

    def scoped(self, name: str) -> Sandbox:
        """A sandbox for a sub-agent: its own workspace, ``.seamline/agents/<name>`` inside
        this one (so the parent sees what it made), and the same inputs, outputs and policy."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name) or ".." in name:
            raise InvalidRequest(f"sub-agent name {name!r}: use letters, digits, '.', '_' and '-'")
        child = self.layout.workspace / ".seamline" / "agents" / name
        child.mkdir(parents=True, exist_ok=True)
        return Sandbox(
            backend=self.backend,
            workspace=child,
            policy=self.policy,
            outputs=self.layout.outputs,
            pids_base=self.pids_base,
            memory_base=self.memory_base,
        )

    async def run_shell(self, command: str, *, timeout: float | None = None) -> str:
        """Guard, run, classify: ``exit code N`` and the output, or a classified error."""
        self.guard.check(command)
        wall = self.policy.limits.wall_s if timeout is None else min(timeout, self.policy.limits.wall_s)
        seen = len(self.egress_refused)
        result = await self.execute(command, wall_s=wall)
        self._classify(result, wall)
        text = result.outcome.output.decode("utf-8", errors="replace")
        refused = self.egress_refused[seen:]
        if refused:
            names = ", ".join(sorted({f"{r.host}:{r.port}" for r in refused}))
            text += f"\n[seamline egress: refused {len(refused)} connection(s) to {names}: not on network.allow]"
        return f"exit code {result.outcome.returncode}\n{text}"

    async def execute(self, command: str, *, wall_s: float | None = None) -> ShellOutcome:
        """Run ``command`` in the sandbox with no guard; limits still hold."""
        limits = self.policy.limits
        pids: PidsCgroup | None = None
        memory: MemoryCgroup | None = None
        try:
            try:
                if self.pids_base is not None:
                    # The egress bridge (network.allow) is one more process, with a thread per connection.
                    extra = _BRIDGE_TASKS if self.policy.network_allow else 0
                    pids = PidsCgroup.create(self.pids_base, max_pids=limits.max_processes + _BWRAP_OVERHEAD + extra)
                if self.memory_base is not None:
                    memory = MemoryCgroup.create(self.memory_base, limit_bytes=limits.memory_bytes)
            except OSError as exc:
                raise SandboxViolation(f"cannot set the sandbox limits up: {exc.strerror}; nothing ran") from None
            gate = await self._egress_gate()
            layout = self.layout
            if gate is not None:
                layout = dataclasses.replace(layout, egress=(str(gate.proxy_socket), _PROXY_PORT))
            plan = self.backend.plan(
                command,
                layout=layout,
                policy=self.policy,
                nproc_rlimit=pids is None,
                memory_rlimit=memory is None,
            )
            argv = plan.argv
            procs = [str(g.procs_file) for g in (pids, memory) if g is not None]
            if procs:
                # The launcher joins the cgroups, then becomes bwrap: every sandbox process is born inside.
                argv = ["/bin/sh", "-c", _JOIN_CGROUPS, str(len(procs)), *procs, *argv]
            try:
                outcome = await run_bounded(
                    argv,
                    env=plan.env,
                    cwd=plan.cwd,
                    wall_s=limits.wall_s if wall_s is None else wall_s,
                    output_bytes=limits.output_bytes,
                    pass_fds=plan.pass_fds,
                )
            except OSError as exc:
                raise SandboxViolation(f"cannot start the sandbox ({argv[0]}): {exc.strerror}; nothing ran") from None
            finally:
                plan.close()
                if gate is not None:
                    await gate.close()
                    shutil.rmtree(gate.folder, ignore_errors=True)
                    self.egress_refused += gate.refused
            refused = pids.refused_forks() if pids is not None else 0
            oom_kills = memory.oom_kills() if memory is not None else 0
        finally:
            for group in (pids, memory):
                if group is not None:
                    with contextlib.suppress(OSError):
                        await asyncio.to_thread(group.remove)
        return ShellOutcome(outcome=outcome, refused_forks=refused, oom_kills=oom_kills)

    async def _egress_gate(self) -> EgressGate | None:
        """``network.allow`` with bubblewrap: a gate for this command, in a short private folder."""
        if not self.policy.network_allow or self.backend.name != "bwrap":
            return None
        folder = Path(tempfile.mkdtemp(prefix="sl-egress-"))
        gate = EgressGate(folder=folder, allow=AllowList.parse(self.policy.network_allow))
        try:
            await gate.start()
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise SandboxViolation(f"cannot start the egress proxy: {exc.strerror}; nothing ran") from None
        return gate

    def _classify(self, result: ShellOutcome, wall: float) -> None:
        out = result.outcome
        limits = self.policy.limits
        head = out.output[:_MESSAGE_OUTPUT].decode("utf-8", errors="replace")
        if out.flooded:
            raise SandboxViolation(
                f"the command printed more than the output cap of {limits.output_bytes} bytes and was stopped; "
                f"first {min(len(out.output), _MESSAGE_OUTPUT)} bytes:\n{head}\n"
                f"[output truncated at {limits.output_bytes} bytes]"
            )
        if out.timed_out:
            raise SandboxViolation(f"the command ran past the wall-time limit of {wall:g}s and was stopped")
        if result.oom_kills:
            raise SandboxViolation(
                f"the sandbox used more than its memory limit of {_size(limits.memory_bytes)} and "
                f"{result.oom_kills} process(es) were killed; output:\n{head}"
            )
        if result.refused_forks:
            raise SandboxViolation(
                f"the command tried to start more than {limits.max_processes} processes "
                f"({result.refused_forks} refused); output:\n{head}"
            )
        if self.backend.name == "bwrap" and out.returncode != 0 and out.output.startswith(b"bwrap: "):
            # bubblewrap's own failure (namespaces, mounts): the command never ran.
            raise SandboxViolation(f"the sandbox could not start: {head.strip()}")
        if out.returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
            raise SandboxViolation(f"the command used more than its {limits.cpu_s}s of CPU time and was stopped")


def _size(n: int) -> str:
    mib = n / (1024 * 1024)
    return f"{mib:g} MiB" if mib >= 1 else f"{n} bytes"
