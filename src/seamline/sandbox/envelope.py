"""The envelope: a whole agent program (an agent CLI, an ACP agent, ``opencode serve``)
run inside bubblewrap.

Inside: the system (``/usr`` and its links, a few files of ``/etc``) read-only; the
program's own installation read-only at its real path; the workspace read-write at its
real path (the CLIs record absolute paths), its ``.git/config`` and ``.git/hooks``
read-only as in the tool sandbox; the program's private home (seeded by seamline from the
CLI's configuration) read-write; the session's runtime folder (the sockets of the egress
gate and the approval hook, the hook program, settings files) **read-only** at its real
path: the program can ``connect`` to the sockets but cannot replace a socket, rewrite the
hook or plant a link where seamline later writes. The one exception is its ``expose``
subfolder (:attr:`EnvelopeSpec.expose_dir`), read-write, where the bridge makes the sockets
of servers the program runs; seamline takes nothing there but a socket bound at that very
path (see :func:`seamline.sandbox.egress.loopback_to_unix`). A private ``/tmp``; nothing
else of the host. New user, pid, network, ipc, uts and cgroup namespaces, every capability
dropped, and ``--die-with-parent``. The network namespace has only its own loopback: the
first process is the egress bridge (see :mod:`seamline.sandbox.egress`), which then runs
the program.

No seccomp filter on unix sockets here (the tool sandbox has one): the bridge and the
approval hook need them, the network namespace already cuts off abstract sockets, and the
only socket files bound in are the runtime folder's (and whatever the workspace holds).

>>> spec = EnvelopeSpec(workspace=Path("/w"), home=Path("/h"), runtime_dir=Path("/r"),
...                     argv=["/usr/bin/true"], env={"PATH": "/usr/bin"})
>>> argv = envelope_argv(spec, bwrap="/usr/bin/bwrap")
>>> argv[0], "--unshare-all" in argv, "--die-with-parent" in argv, argv[-1].startswith("{")
('/usr/bin/bwrap', True, True, True)
>>> spec = EnvelopeSpec(workspace=Path("/w"), home=Path("/h"), runtime_dir=Path("/r"), argv=["/usr/bin/true"],
...                     env={}, expose=((4096, "/r/expose/expose-4096.sock"),), expose_dir=Path("/r/expose"))
>>> argv = envelope_argv(spec, bwrap="/usr/bin/bwrap")
>>> argv[argv.index("/r") - 1], argv[argv.index("/r/expose") - 1]
('--ro-bind', '--bind')
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from seamline.errors import SandboxViolation
from seamline.sandbox.bwrap import SANDBOX_UID, git_guard_args
from seamline.sandbox.egress import BRIDGE_SOURCE
from seamline.sandbox.layout import INNER_WORKSPACE

__all__ = [
    "ENVELOPE_MODES",
    "EnvelopeSpec",
    "bridge_python",
    "envelope_argv",
    "envelope_refusal",
    "free_inner_port",
    "program_root",
    "tmp_size_supported",
]

ENVELOPE_MODES: Final = ("bwrap", "auto", "none")
_SYSTEM_LINKS: Final = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC: Final = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/hosts",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/gitconfig",
)
_BRIDGE_PYTHON: Final = ("/usr/bin/python3", "/bin/python3")


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvelopeSpec:
    """What one enveloped program sees: see the module docstring."""

    workspace: Path
    home: Path
    runtime_dir: Path
    argv: Sequence[str]
    #: the program's whole environment (bwrap is started with it and passes it on)
    env: Mapping[str, str]
    #: installation folders of the program, bound read-only at their real paths
    program_roots: tuple[Path, ...] = ()
    #: (inside loopback port, unix socket outside) pairs the bridge serves
    listen: tuple[tuple[int, str], ...] = ()
    #: (inside loopback port, unix socket the bridge makes) pairs: servers the program runs
    expose: tuple[tuple[int, str], ...] = ()
    #: the subfolder of ``runtime_dir`` bound read-write, where the ``expose`` sockets are made
    expose_dir: Path | None = None
    git_config_writable: bool = False
    tmp_bytes: int | None = 512 * 1024**2
    extra_ro: tuple[Path, ...] = field(default_factory=tuple)
    #: (host file, path inside) pairs bound read-only at another path
    ro_at: tuple[tuple[Path, str], ...] = ()
    #: the uid and gid inside (the user's own files appear as theirs); capabilities are dropped
    uid: int = SANDBOX_UID


def bridge_python() -> str | None:
    """The system Python the bridge runs on (it must be under ``/usr``, bound inside)."""
    for candidate in _BRIDGE_PYTHON:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def envelope_argv(spec: EnvelopeSpec, *, bwrap: str) -> list[str]:
    """The bubblewrap command line that runs ``spec.argv`` in the envelope."""
    python = bridge_python() or "/usr/bin/python3"
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        str(spec.uid),
        "--gid",
        str(spec.uid),
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
    ]
    # No --new-session: seamline already starts bwrap in a session of its own (no terminal),
    # and keeping the program in bwrap's process group lets abort's SIGINT reach it.
    # No --setenv either: bwrap is started with exactly spec.env, so a credential never
    # appears on a command line (which any local user can read in /proc).
    argv += ["--ro-bind", "/usr", "/usr"]
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    for item in _ETC:
        if os.path.exists(item):
            argv += ["--ro-bind", item, item]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if spec.tmp_bytes is not None:
        argv += ["--size", str(spec.tmp_bytes)]
    argv += ["--tmpfs", "/tmp"]
    for root in (*spec.program_roots, *spec.extra_ro):
        argv += ["--ro-bind", str(root), str(root)]
    for source, inside in spec.ro_at:
        argv += ["--ro-bind", str(source), inside]
    argv += ["--bind", str(spec.home), str(spec.home)]
    # Read-only: what seamline runs or trusts later (the hook, sockets, settings) stays its.
    argv += ["--ro-bind", str(spec.runtime_dir), str(spec.runtime_dir)]
    argv += _expose_binds(spec)
    argv += ["--bind", str(spec.workspace), str(spec.workspace)]
    if not spec.git_config_writable:
        argv += _at_real_path(git_guard_args(spec.workspace), spec.workspace)
    argv += ["--remount-ro", "/", "--chdir", str(spec.workspace), "--"]
    config = {
        "listen": [list(pair) for pair in spec.listen],
        "expose": [list(pair) for pair in spec.expose],
        "argv": list(spec.argv),
    }
    argv += [python, "-I", "-S", "-c", BRIDGE_SOURCE, json.dumps(config)]
    return argv


def _expose_binds(spec: EnvelopeSpec) -> list[str]:
    """The ``expose`` subfolder read-write (after the runtime folder, over it); every
    ``expose`` socket must lie directly in it, never elsewhere in the runtime folder."""
    if spec.expose_dir is None:
        if spec.expose:
            raise ValueError("EnvelopeSpec.expose needs expose_dir, the one folder the bridge may write")
        return []
    if spec.expose_dir.parent != spec.runtime_dir:
        raise ValueError(f"expose_dir {spec.expose_dir} must be a folder directly in {spec.runtime_dir}")
    for _, path in spec.expose:
        if Path(path).parent != spec.expose_dir:
            raise ValueError(f"expose socket {path} must lie directly in {spec.expose_dir}")
    return ["--bind", str(spec.expose_dir), str(spec.expose_dir)]


def _at_real_path(args: list[str], workspace: Path) -> list[str]:
    """The tool sandbox's ``.git`` mounts, moved from ``/workspace`` to the real path."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == INNER_WORKSPACE or arg.startswith(INNER_WORKSPACE + "/"):
            if i > 0 and out[i - 1].startswith("--"):
                continue  # a source path, not a destination
            out[i] = str(workspace) + arg[len(INNER_WORKSPACE) :]
    return out


def program_root(executable: str) -> Path:
    """The folder to bind for a program: above its outermost ``node_modules`` when it has
    one (the npm installation, with its native parts), else the program's own folder."""
    real = Path(os.path.realpath(executable))
    parts = real.parts
    if "node_modules" in parts:
        index = parts.index("node_modules")
        return Path(*parts[:index]) if index > 1 else Path(*parts[: index + 1])
    return real.parent


def free_inner_port(taken: Sequence[int], preferred: int = 3128) -> int:
    """A port for the proxy inside the envelope (its own loopback: only ``taken`` are used)."""
    port = preferred
    while port in taken:
        port += 1
    return port


@functools.lru_cache(maxsize=4)
def _probe(explicit: str | None) -> tuple[str | None, str, bool]:
    from seamline.sandbox.probe import probe

    report = probe("bwrap", bwrap=explicit)
    if report.bwrap is None or not all(report.features.values()):
        problems = "; ".join(report.problems) or "bubblewrap does not run here"
        fixes = "; ".join(g for g in report.guidance if "container" not in g) or "see `seamline sandbox check`"
        return None, f"{problems}. Fix: {fixes}", False
    if bridge_python() is None:
        return None, "no /usr/bin/python3 for the egress bridge. Fix: apt-get install -y python3", False
    return report.bwrap, "", report.tmp_size


def tmp_size_supported() -> bool:
    """Whether this bubblewrap takes ``--size`` (0.8 and later); probed once."""
    return _probe(os.environ.get("SEAMLINE_BWRAP"))[2]


def envelope_refusal(mode: str, *, who: str) -> str:
    """The bwrap binary when the envelope can run, else raises :class:`SandboxViolation`
    naming the reason and the fix: there is no unisolated fallback."""
    if mode not in ("bwrap", "auto"):
        raise SandboxViolation(f"{who}: unknown sandbox mode {mode!r}; choose bwrap, auto or none")
    binary, why, _ = _probe(os.environ.get("SEAMLINE_BWRAP"))
    if binary is None:
        raise SandboxViolation(f"{who}: --sandbox {mode} cannot isolate this program here: {why}. Nothing was run.")
    return binary
