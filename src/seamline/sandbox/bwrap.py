"""The ``bwrap`` backend: bubblewrap with user, pid, network, ipc and uts namespaces.

Inside: ``/usr`` and the usual links to it read-only, a few files of ``/etc`` (loader
cache, users, time zone; name resolution and certificates only with the network on), a
fresh ``/proc``, a minimal ``/dev``, a private ``/tmp`` of a fixed size, ``/inputs`` read-only,
``/workspace`` read-write (its ``.git/config`` and ``.git/hooks`` read-only unless the
policy allows them), ``/outputs`` read-write. The root itself is read-only; the
host's home, ``/root``, ``/home`` and everything else are absent. The command runs as an
unprivileged user with every capability dropped, in a new session, and dies with its
parent. With the network off, a seccomp filter also refuses unix sockets (see
:mod:`seamline.sandbox.seccomp`), so a socket file in the workspace is unreachable.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Final

from seamline.sandbox.egress import BRIDGE_SOURCE
from seamline.sandbox.layout import (
    INNER_INPUTS,
    INNER_OUTPUTS,
    INNER_WORKSPACE,
    LaunchPlan,
    Layout,
    limit_prefix,
)
from seamline.sandbox.policy import SandboxPolicy
from seamline.sandbox.seccomp import unix_socket_filter, unix_socket_filter_support
from seamline.transport.env import HOST_GIT_CONFIG, host_git_environment

__all__ = [
    "BWRAP_ENV",
    "HOST_GIT_CONFIG",
    "BwrapBackend",
    "find_bwrap",
    "find_prlimit",
    "git_guard_args",
    "host_git_environment",
    "prepare_git_guard",
]

BWRAP_ENV: Final = "SEAMLINE_BWRAP"
SANDBOX_UID: Final = 1000
_SYSTEM_LINKS: Final = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES: Final = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/mime.types",
)
_ETC_NETWORK: Final = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates", "/etc/gai.conf")


def git_guard_args(workspace: Path) -> list[str]:
    """Mounts that keep what names programs for the host's ``git`` read-only inside the sandbox.

    The host's next ``git`` in the workspace runs what its repository names
    (``core.fsmonitor``, ``core.pager``, filters, hooks), outside any sandbox. ``.git`` is
    bound onto itself so that, being a mount point, it cannot be renamed away and replaced;
    then everything through which git finds configuration or hooks is a read-only mount
    point, which can be neither written, removed nor renamed: ``config``, ``hooks``,
    ``commondir`` (which would send git to another, writable repository's config: a missing
    one is pinned to ``.``, the repository itself, which git reads as no redirection) and
    ``modules`` (the submodule repositories, whose config the host's ``git status`` reads
    when it recurses; a new entry there cannot be planted). Objects, refs, logs, the index
    and ``HEAD`` stay writable, so commits work. A nested repository in the worktree is
    reached only through the submodule recursion that :func:`host_git_environment` turns off.
    """
    if not prepare_git_guard(workspace):
        return []  # no repository, or a gitfile/link to a folder outside the sandbox
    git = workspace / ".git"
    inner = f"{INNER_WORKSPACE}/.git"
    args = ["--bind", str(git), inner]
    args += ["--ro-bind", str(git / "hooks"), f"{inner}/hooks"]
    config = git / "config"
    args += ["--ro-bind", str(config) if config.exists() else "/dev/null", f"{inner}/config"]
    args += ["--ro-bind", str(git / "commondir"), f"{inner}/commondir"]
    args += ["--ro-bind", str(git / "modules"), f"{inner}/modules"]
    return args


def prepare_git_guard(workspace: Path) -> bool:
    """Make what :func:`git_guard_args` mounts over in the workspace's ``.git`` folder
    (``hooks``, ``commondir`` pinned to ``.``, ``modules``) when missing; False when there
    is no such folder. Called before the edit journal's scan of a sandboxed command, so
    that seamline's own preparation is never taken for the command's change."""
    git = workspace / ".git"
    if git.is_symlink() or not git.is_dir():
        return False
    hooks = git / "hooks"
    if not hooks.exists() and not hooks.is_symlink():
        hooks.mkdir()
    commondir = git / "commondir"
    if not commondir.exists() and not commondir.is_symlink():
        commondir.write_text(".\n")  # git reads "." as the repository itself
    modules = git / "modules"
    if not modules.exists() and not modules.is_symlink():
        modules.mkdir()
    return True


def find_bwrap(explicit: str | None = None, *, path: str | None = None) -> str | None:
    """The bubblewrap binary: ``explicit``, else ``$SEAMLINE_BWRAP``, else ``bwrap`` on PATH."""
    chosen = explicit or os.environ.get(BWRAP_ENV)
    if chosen:
        return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None
    return shutil.which("bwrap", path=path)


def find_prlimit() -> str | None:
    """``prlimit`` (util-linux) from the system folders that are mounted inside the sandbox."""
    for folder in ("/usr/bin", "/bin", "/usr/sbin"):
        candidate = Path(folder) / "prlimit"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(Path("/usr/bin") / "prlimit") if folder != "/usr/sbin" else str(candidate)
    return None


class BwrapBackend:
    """Builds the bubblewrap command line; see the module docstring for the layout."""

    name = "bwrap"
    isolates = True

    def __init__(self, *, binary: str, prlimit: str, tmp_size: bool = True) -> None:
        self.binary = binary
        self.prlimit = prlimit
        # bubblewrap before 0.8 has no --size: /tmp is then bounded by memory alone (probe says so).
        self.tmp_size = tmp_size

    def plan(
        self, command: str, *, layout: Layout, policy: SandboxPolicy, nproc_rlimit: bool, memory_rlimit: bool = True
    ) -> LaunchPlan:
        argv = [
            self.binary,
            "--unshare-all",
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
            "--clearenv",
        ]
        egress = layout.egress
        if policy.network and egress is None:
            argv.append("--share-net")
        environment = policy.environment()
        if egress is not None:
            proxy = f"http://127.0.0.1:{egress[1]}"
            for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
                environment[name] = proxy
            environment["NO_PROXY"] = environment["no_proxy"] = "127.0.0.1,localhost,::1"
        for name, value in environment.items():
            argv += ["--setenv", name, value]
        argv += ["--ro-bind", "/usr", "/usr"]
        for link in _SYSTEM_LINKS:
            if os.path.islink(link):
                argv += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                argv += ["--ro-bind", link, link]
        for item in _ETC_FILES + (_ETC_NETWORK if policy.network or egress is not None else ()):
            if os.path.exists(item):
                argv += ["--ro-bind", item, item]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        if self.tmp_size:
            argv += ["--size", str(policy.limits.tmp_bytes)]
        argv += ["--tmpfs", "/tmp"]
        if layout.inputs is not None:
            argv += ["--ro-bind", str(layout.inputs), INNER_INPUTS]
        else:
            argv += ["--dir", INNER_INPUTS]
        argv += ["--bind", str(layout.workspace), INNER_WORKSPACE]
        if not policy.git_config_writable:
            argv += git_guard_args(layout.workspace)
        argv += ["--bind", str(layout.outputs), INNER_OUTPUTS]
        if egress is not None:
            folder = os.path.dirname(egress[0])
            argv += ["--bind", folder, folder]
        fds: tuple[int, ...] = ()
        filtered = not policy.network and unix_socket_filter_support() is None
        if filtered and egress is None:
            fds = (_seccomp_fd(),)
            argv += ["--seccomp", str(fds[0])]
        # Everything not bound read-write above becomes read-only, the root included.
        argv += ["--remount-ro", "/", "--chdir", INNER_WORKSPACE, "--"]
        inner = limit_prefix(self.prlimit, policy, nproc_rlimit=nproc_rlimit, memory_rlimit=memory_rlimit)
        inner += ["/bin/sh", "-c", command]
        if egress is not None:
            # network.allow: the egress bridge runs first and gives the command the filter.
            config = {
                "listen": [[egress[1], egress[0]]],
                "argv": inner,
                "seccomp": unix_socket_filter().hex() if filtered else "",
            }
            inner = ["/usr/bin/python3", "-I", "-S", "-c", BRIDGE_SOURCE, json.dumps(config)]
        argv += inner
        # bwrap itself gets no inherited variables: credentials stay out of every process.
        return LaunchPlan(
            argv=argv, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd=layout.workspace, pass_fds=fds
        )


def _seccomp_fd() -> int:
    """A memory file holding the unix-socket filter, read by bwrap from its descriptor."""
    fd = os.memfd_create("seamline-seccomp", 0)
    try:
        os.write(fd, unix_socket_filter())
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
