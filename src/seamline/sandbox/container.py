"""The ``container`` backend: the surrounding container is the boundary.

Chosen only when the user says so (``--sandbox container``): seamline then trusts that
the container it runs in is disposable and isolated. The command runs directly, in the
workspace, with the policy's environment allowlist, the command guard and the resource
limits; there are no mounts or namespaces of seamline's own, so ``/inputs`` read-only and
network off are the container's business. ``seamline sandbox check`` says so.
"""

from __future__ import annotations

from seamline.sandbox.layout import LaunchPlan, Layout, limit_prefix
from seamline.sandbox.policy import SandboxPolicy

__all__ = ["ContainerBackend"]


class ContainerBackend:
    """Runs commands in the surrounding container, with the policy's env and limits."""

    name = "container"
    isolates = False

    def __init__(self, *, prlimit: str) -> None:
        self.prlimit = prlimit

    def plan(
        self, command: str, *, layout: Layout, policy: SandboxPolicy, nproc_rlimit: bool, memory_rlimit: bool = True
    ) -> LaunchPlan:
        env = policy.environment()
        env.update(
            {
                "PWD": str(layout.workspace),
                "WORKSPACE": str(layout.workspace),
                "OUTPUTS": str(layout.outputs),
                "SCRATCH": str(layout.outputs / "scratch"),
                "INPUTS": str(layout.inputs) if layout.inputs is not None else "",
            }
        )
        argv = [
            *limit_prefix(self.prlimit, policy, nproc_rlimit=nproc_rlimit, memory_rlimit=memory_rlimit),
            "/bin/sh",
            "-c",
            command,
        ]
        return LaunchPlan(argv=argv, env=env, cwd=layout.workspace)
