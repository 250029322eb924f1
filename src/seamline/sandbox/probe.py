"""What isolation this machine can give, and the sandbox a run asks for.

:func:`probe` runs the real bubblewrap: each namespace alone (user, network, pid with a
fresh /proc), then the exact command line seamline uses. Inside containers some of these
fail (no user namespaces, /proc cannot be mounted), so only the real arguments tell.
:func:`open_sandbox` turns ``auto``, ``bwrap`` or ``container`` into a :class:`Sandbox`
or refuses with guidance naming the fix. There is no unisolated fallback.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from seamline.errors import SandboxViolation
from seamline.sandbox.bwrap import BwrapBackend, find_bwrap, find_prlimit
from seamline.sandbox.container import ContainerBackend
from seamline.sandbox.layout import Layout, SandboxBackend
from seamline.sandbox.memory import memory_cgroup_base
from seamline.sandbox.pids import pids_cgroup_base
from seamline.sandbox.policy import SandboxPolicy
from seamline.sandbox.runtime import Sandbox
from seamline.sandbox.seccomp import unix_socket_filter_support

__all__ = ["SANDBOX_MODES", "ProbeReport", "SandboxMode", "open_sandbox", "probe"]

SandboxMode = Literal["auto", "bwrap", "container"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = ("auto", "bwrap", "container")
INSTALL_HINT: Final = "install bubblewrap: `bash scripts/system/20-bubblewrap.sh` (or `apt-get install -y bubblewrap`)"
_PROBE_TIMEOUT_S: Final = 15.0
_FEATURES: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("user_namespace", ("--unshare-user", "--ro-bind", "/", "/")),
    ("network_namespace", ("--unshare-net", "--ro-bind", "/", "/")),
    ("pid_namespace_with_proc", ("--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc")),
)


@dataclass(slots=True)
class ProbeReport:
    """The result of :func:`probe`: what works, what does not and why, what to do."""

    mode: SandboxMode
    backend: str | None = None
    bwrap: str | None = None
    version: str | None = None
    features: dict[str, bool] = field(default_factory=dict)
    process_limit: str = "none"
    pids_base: Path | None = None
    memory_limit: str = "none"
    memory_base: Path | None = None
    unix_sockets: str = ""
    tmp_size: bool = False
    problems: list[str] = field(default_factory=list)
    guidance: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.backend is not None

    def render(self) -> str:
        lines = [f"sandbox mode: {self.mode}", f"bubblewrap: {self.bwrap or 'not found'} {self.version or ''}".rstrip()]
        for name, works in self.features.items():
            lines.append(f"  {name}: {'yes' if works else 'no'}")
        lines.append(f"process limit: {self.process_limit}")
        lines.append(f"memory limit: {self.memory_limit}")
        if self.bwrap:
            lines.append(
                "private /tmp: "
                + ("sized (tmp_bytes)" if self.tmp_size else "unsized: this bubblewrap has no --size (0.8 or later)")
            )
        if self.unix_sockets:
            lines.append(f"unix sockets with the network off: {self.unix_sockets}")
        lines.append(f"backend: {self.backend or 'none (refused)'}")
        lines += [f"problem: {p}" for p in self.problems]
        lines += [f"fix: {g}" for g in self.guidance]
        return "\n".join(lines)


def probe(mode: SandboxMode = "auto", *, bwrap: str | None = None, path: str | None = None) -> ProbeReport:
    """Find out what ``mode`` gives on this machine; ``bwrap``/``path`` say where to look."""
    report = ProbeReport(mode=mode)
    prlimit = find_prlimit()
    if prlimit is None:
        report.problems.append("prlimit (util-linux) is missing: CPU and memory limits cannot be set")
        report.guidance.append("install util-linux: `apt-get install -y util-linux`")
    report.process_limit, report.pids_base = _process_limit(report)
    report.memory_limit, report.memory_base = _memory_limit()
    if mode == "container":
        if prlimit is not None and report.process_limit != "none":
            report.backend = "container"
        return report
    binary = find_bwrap(bwrap, path=path)
    if binary is None:
        where = bwrap or os.environ.get("SEAMLINE_BWRAP") or "PATH"
        report.problems.append(f"bubblewrap (bwrap) not found in {where}")
        report.guidance.append(INSTALL_HINT)
        report.guidance.append("or, if this machine is itself a disposable container, say so: --sandbox container")
        return report
    report.bwrap = binary
    no_filter = unix_socket_filter_support()
    report.unix_sockets = (
        "refused (seccomp filter on socket(AF_UNIX))" if no_filter is None else f"reachable: {no_filter}"
    )
    report.version = _run([binary, "--version"])[1].strip() or None
    report.tmp_size = "--size" in _run([binary, "--help"])[1]
    for name, args in _FEATURES:
        ok, detail = _run([binary, *args, "true"])
        report.features[name] = ok
        if not ok:
            report.problems.append(f"bwrap {' '.join(args[:1])} fails here: {detail.strip()[:300]}")
    if prlimit is not None:
        report.features["seamline_layout"] = _probe_layout(binary, prlimit, report)
    if not all(report.features.values()):
        report.guidance.append(
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
            "user.max_user_namespaces > 0), or run the container with --security-opt seccomp=unconfined "
            "--security-opt apparmor=unconfined; or use --sandbox container if the container is the boundary"
        )
        return report
    if prlimit is not None and report.process_limit != "none":
        report.backend = "bwrap"
    return report


def open_sandbox(
    mode: SandboxMode,
    *,
    workspace: Path,
    outputs: Path,
    policy: SandboxPolicy | None = None,
    bwrap: str | None = None,
) -> Sandbox:
    """A :class:`Sandbox` for ``mode``, or :class:`SandboxViolation` naming the fix."""
    if mode not in SANDBOX_MODES:
        raise SandboxViolation(f"unknown sandbox mode {mode!r}; choose one of {', '.join(SANDBOX_MODES)}")
    report = probe(mode, bwrap=bwrap)
    if not report.ok:
        fixes = "; ".join(report.guidance) or "see `seamline sandbox check`"
        raise SandboxViolation(
            f"sandbox {mode!r} is not available here: {'; '.join(report.problems)}. Fix: {fixes}. "
            "There is no unisolated fallback."
        )
    prlimit = find_prlimit()
    assert prlimit is not None
    backend: SandboxBackend
    if report.backend == "container":
        backend = ContainerBackend(prlimit=prlimit)
    else:
        assert report.bwrap is not None
        backend = BwrapBackend(binary=report.bwrap, prlimit=prlimit, tmp_size=report.tmp_size)
    return Sandbox(
        backend=backend,
        workspace=workspace,
        policy=policy or SandboxPolicy(),
        outputs=outputs,
        pids_base=report.pids_base,
        memory_base=report.memory_base,
    )


def _process_limit(report: ProbeReport) -> tuple[str, Path | None]:
    base, why = pids_cgroup_base()
    if base is not None:
        return f"pids cgroup ({base})", base
    if os.geteuid() != 0:
        return "RLIMIT_NPROC (counted in the sandbox's own user namespace)", None
    report.problems.append(
        f"process count cannot be limited: {why}, and RLIMIT_NPROC does not bind processes of the host's root"
    )
    report.guidance.append("run seamline as a non-root user, or give it a writable pids cgroup (/sys/fs/cgroup/pids)")
    return "none", None


def _memory_limit() -> tuple[str, Path | None]:
    base, why = memory_cgroup_base()
    if base is not None:
        return f"whole sandbox, {why}", base
    return f"per process only (RLIMIT_AS through prlimit): {why}", None


def _probe_layout(binary: str, prlimit: str, report: ProbeReport) -> bool:
    with tempfile.TemporaryDirectory(prefix="seamline-probe-") as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "out" / "scratch").mkdir(parents=True)
        plan = BwrapBackend(binary=binary, prlimit=prlimit, tmp_size=report.tmp_size).plan(
            "test -d /workspace && test -d /outputs/scratch && test -d /inputs",
            layout=Layout(workspace=root / "ws", outputs=root / "out"),
            policy=SandboxPolicy(),
            nproc_rlimit=False,
        )
        try:
            ok, detail = _run(plan.argv, env=plan.env, pass_fds=plan.pass_fds)
        finally:
            plan.close()
        if not ok:
            report.problems.append(f"seamline's bwrap command line fails here: {detail.strip()[:300]}")
        return ok


def _run(argv: list[str], *, env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            env=env if env is not None else {"PATH": "/usr/bin:/bin"},
            check=False,
            pass_fds=pass_fds,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return done.returncode == 0, done.stdout + done.stderr
