"""Starting a program-running backend inside the envelope (``sandbox=bwrap|auto``).

Shared by the agent CLIs, the ACP agents and ``opencode serve``: the options
(:data:`ENVELOPE_OPTIONS`), the private home per session (seeded by the provider), the
egress gate with its allowlist (the model endpoint, ``allow_hosts``), the environment
(only the variables the program needs), the process and memory limits (one pids and one
memory cgroup per start, see :mod:`seamline.sandbox.envelope_limits`), and the bubblewrap
command line. See :mod:`seamline.sandbox.envelope` and :mod:`seamline.sandbox.egress`, and
docs/sandbox.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from seamline.errors import InvalidRequest, SandboxViolation
from seamline.events import Raw
from seamline.gateway.relay import PLACEHOLDER_PREFIX
from seamline.providers.base import OptionSpec, Provider
from seamline.providers.programs.runtime_dir import ensure_expose_dir, ensure_runtime_dir
from seamline.sandbox.bwrap import SANDBOX_UID, find_prlimit
from seamline.sandbox.egress import AllowList, EgressGate, Refusal, endpoint_of, is_loopback, loopback_to_unix
from seamline.sandbox.envelope import (
    EnvelopeSpec,
    envelope_argv,
    envelope_refusal,
    free_inner_port,
    program_root,
    tmp_size_supported,
)
from seamline.sandbox.envelope_limits import (
    DEFAULT_MAX_PROCESSES,
    LIMIT_OPTIONS,
    EnvelopeCgroups,
    EnvelopeLimits,
    check_envelope_limits,
    open_envelope_cgroups,
)
from seamline.sandbox.private_files import PrivatePathRefused, open_folder, read_file_beneath, replace_file_at

__all__ = [
    "ENVELOPE_OPTIONS",
    "EnvelopeMode",
    "Enveloped",
    "endpoints_from_env",
    "enter_envelope",
    "envelope_home",
    "remove_envelope_homes",
    "operator_envelope",
    "sandbox_mode",
]

# Where a program that takes its endpoint from the environment (an ACP agent) finds it.
_ENDPOINT_VARS: Final = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL")

ENVELOPE_OPTIONS: Final[dict[str, OptionSpec]] = {
    "sandbox": OptionSpec(
        "run the program inside bubblewrap (bwrap, auto) or not (none); refused, never run unisolated, "
        "where it cannot be isolated",
        default="none",
        choices=("bwrap", "auto", "none"),
        operator_only=True,
    ),
    "allow_hosts": OptionSpec(
        "hosts the sandboxed program may reach besides its model endpoint, host[:port], comma-separated",
        operator_only=True,
    ),
    # A policy's [limits] arrive as these (see seamline.cli.sandbox_command.envelope_options).
    "max_processes": OptionSpec(
        f"tasks (processes and threads) the whole envelope may run, the program's own included "
        f"(default {DEFAULT_MAX_PROCESSES}); refused where it cannot hold",
        kind="positive_count",
        operator_only=True,
    ),
    "memory_bytes": OptionSpec(
        "memory of the whole envelope in bytes (default: half of what seamline may use, at least 2 GiB); "
        "refused where it cannot hold",
        kind="positive_count",
        operator_only=True,
    ),
    "tmp_bytes": OptionSpec(
        "size of the envelope's private /tmp in bytes (default 512 MiB)", kind="positive_count", operator_only=True
    ),
}

# Variables every enveloped program keeps (when set); the provider adds its own.
_BASE_ENV: Final = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "NO_COLOR", "COLUMNS")
_INNER_PATH: Final = "/usr/local/bin:/usr/bin:/bin"


class EnvelopeMode(str):
    """``bwrap``, ``auto`` or ``none``, as a ``str``, carrying the options it was read from:
    every backend hands this mode to :func:`enter_envelope`, so the envelope's limits
    (``max_processes``, ``memory_bytes``, ``tmp_bytes``) travel with it."""

    _options: dict[str, str | None]

    def __new__(cls, mode: str, options: Mapping[str, str | None]) -> EnvelopeMode:
        made = super().__new__(cls, mode)
        made._options = {name: options.get(name) for name in LIMIT_OPTIONS}
        return made

    @property
    def limits(self) -> EnvelopeLimits:
        return EnvelopeLimits.from_options(self._options)


def sandbox_mode(options: Mapping[str, str]) -> EnvelopeMode:
    """The ``sandbox`` option (``none`` when unset), with the limit options it goes with."""
    mode = options.get("sandbox") or "none"
    if mode not in ("bwrap", "auto", "none"):
        raise InvalidRequest(f"option sandbox must be bwrap, auto or none, not {mode!r}")
    return EnvelopeMode(mode, options)


def endpoints_from_env(env: Mapping[str, str | None]) -> list[tuple[str, int]]:
    """The model endpoints named by ``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``,
    ``GOOGLE_GEMINI_BASE_URL`` in ``env`` (the ones an ACP agent reads)."""
    found: list[tuple[str, int]] = []
    for name in _ENDPOINT_VARS:
        value = env.get(name)
        if value:
            try:
                found.append(endpoint_of(value))
            except InvalidRequest:
                continue
    return found


def envelope_home(provider_name: str, session_id: str) -> Path:
    """The private home of one session's enveloped program, under seamline's data folder."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in session_id)
    return Path(data_home) / "seamline" / "envelopes" / provider_name / safe


def remove_envelope_homes(session_id: str) -> list[Path]:
    """Remove the private homes of session ``session_id``'s enveloped programs (every
    provider's): what the program kept there (its transcript, its config) goes with the
    session. The removed folders."""
    sample = envelope_home("_", session_id)
    root, safe = sample.parent.parent, sample.name
    removed: list[Path] = []
    for provider_dir in root.iterdir() if root.is_dir() else ():
        home = provider_dir / safe
        if provider_dir.is_symlink() or home.is_symlink() or not home.is_dir():
            continue
        shutil.rmtree(home, ignore_errors=True)
        removed.append(home)
    return removed


@dataclass
class Enveloped:
    """A program ready to start in the envelope, and its running egress gate."""

    argv: list[str]
    env: dict[str, str]
    gate: EgressGate
    home: Path
    #: inside port -> the unix socket the bridge makes for it (see :func:`reach`)
    exposed: dict[int, Path] = field(default_factory=dict)
    #: the envelope's pids and memory cgroups (removed by :meth:`close`)
    limits: EnvelopeCgroups | None = None
    _seen: int = field(default=0)
    _summarized: int = field(default=0)
    _forks_summarized: int = field(default=0)
    _ooms_summarized: int = field(default=0)
    _carriers: list[asyncio.Server] = field(default_factory=list)

    async def reach(self, port: int) -> int:
        """A port on the host's loopback that reaches ``port`` inside the envelope."""
        server, outside = await loopback_to_unix(self.exposed[port])
        self._carriers.append(server)
        return outside

    def refusals(self) -> list[Raw]:
        """Events for the connections refused since the last call."""
        new = self.gate.refused[self._seen :]
        self._seen = len(self.gate.refused)
        return [_refusal_event(r) for r in new]

    def summary(self) -> Raw:
        """The turn's report: connections refused since the last summary (a warm process
        runs many turns in one envelope) and what the gate allows; forks the process limit
        refused (``forks_refused``) and processes killed for memory (``oom_kills``) since the
        last summary, where a cgroup counts them; the limits that do not hold here, if any."""
        refused = len(self.gate.refused) - self._summarized
        self._summarized = len(self.gate.refused)
        payload: dict[str, Any] = {
            "envelope": "bwrap",
            "egress_refused": refused,
            "egress_allowed": self.gate.allow.render(),
        }
        if self.limits is not None:
            forks = self.limits.forks_refused()
            if forks is not None:
                payload["forks_refused"] = forks - self._forks_summarized
                self._forks_summarized = forks
            ooms = self.limits.oom_kills()
            if ooms is not None:
                payload["oom_kills"] = ooms - self._ooms_summarized
                self._ooms_summarized = ooms
            if self.limits.unenforced:
                payload["limits_unenforced"] = list(self.limits.unenforced)
        return Raw(source="seamline", payload=payload)

    async def close(self) -> None:
        for server in self._carriers:
            server.close()
        self._carriers.clear()
        await self.gate.close()
        for path in self.exposed.values():
            path.unlink(missing_ok=True)
        if self.limits is not None:
            # The counts are kept for the turn's summary, which may come after this.
            await asyncio.to_thread(self.limits.remove)


def _refusal_event(refusal: Refusal) -> Raw:
    payload: dict[str, Any] = {
        "egress": "refused",
        "host": refusal.host,
        "port": refusal.port,
        "method": refusal.method,
    }
    if refusal.reason == "placeholder":
        payload["reason"] = "gateway placeholder"
    return Raw(source="seamline", payload=payload)


async def enter_envelope(
    *,
    who: str,
    mode: str,
    session_id: str,
    state: dict[str, Any],
    workspace: Path,
    argv: Sequence[str],
    env: Mapping[str, str | None],
    keep_env: Callable[[str], bool],
    endpoints: Iterable[tuple[str, int]],
    allow_hosts: str | None,
    seed: Callable[[Path], None],
    inner_env: Callable[[Path], Mapping[str, str]] = lambda home: {},
    carry: str | None = None,
    extra_ro: Sequence[Path] = (),
    ro_at: Sequence[tuple[Path, str]] = (),
    uid: int | None = None,
    expose: Sequence[int] = (),
    limits: EnvelopeLimits | None = None,
) -> Enveloped:
    """Set up the envelope for one start of ``argv``; raises :class:`SandboxViolation` (no
    fallback) when bubblewrap cannot isolate it here, or a limit asked for cannot hold.

    ``limits`` defaults to those ``mode`` carries (an :class:`EnvelopeMode` from
    :func:`sandbox_mode`), else the envelope's defaults."""
    bwrap = envelope_refusal(mode, who=who)
    if limits is None:
        limits = mode.limits if isinstance(mode, EnvelopeMode) else EnvelopeLimits()
    sized = tmp_size_supported()
    if "tmp_bytes" in limits.explicit and not sized:
        raise SandboxViolation(
            f"{who}: tmp_bytes cannot be applied: this bubblewrap has no --size (0.8 or later). Nothing was run"
        )
    prlimit = find_prlimit()
    check_envelope_limits(limits, who=who, prlimit=prlimit)  # refused before anything starts
    workspace = workspace.resolve()
    home = envelope_home(who, session_id)
    if not home.is_dir():
        home.mkdir(parents=True, mode=0o700)
        seed(home)
    if carry:
        _carry_session_files(home, carry)
    runtime = ensure_runtime_dir(session_id, state)
    wanted = list(dict.fromkeys(endpoints))
    forwards = tuple(e for e in wanted if is_loopback(e[0]))
    # Loopback endpoints are forwarded at the same address inside; they are on the proxy's
    # list too, for a program whose HTTP client sends everything to the proxy.
    allow = AllowList(tuple((h.lower(), p) for h, p in wanted))
    allow = allow.plus(AllowList.parse((allow_hosts or "").split(",")))
    # The model gateway's placeholder credentials go to the gateway (a forward), never
    # through the proxy to another host.
    gate = EgressGate(folder=runtime, allow=allow, forwards=forwards, refuse_carrying=(PLACEHOLDER_PREFIX.encode(),))
    await gate.start()
    proxy_port = free_inner_port([p for _, p in forwards])
    listen = [(p, str(gate.forward_socket(i))) for i, (_, p) in enumerate(forwards)]
    listen.append((proxy_port, str(gate.proxy_socket)))
    proxy = f"http://127.0.0.1:{proxy_port}"
    inner: dict[str, str] = {}
    for name, value in env.items():
        if value is not None and (name in _BASE_ENV or keep_env(name)):
            inner[name] = value
    inner.update(
        {
            "PATH": _INNER_PATH,
            "HOME": str(home),
            "TMPDIR": "/tmp",
            "USER": "sandbox",
            "PWD": str(workspace),
            "HTTPS_PROXY": proxy,
            "HTTP_PROXY": proxy,
            "https_proxy": proxy,
            "http_proxy": proxy,
            "NO_PROXY": "127.0.0.1,localhost,::1",
            "no_proxy": "127.0.0.1,localhost,::1",
            "SEAMLINE_SANDBOX": "envelope",
        }
    )
    inner.update(inner_env(home))
    roots = [program_root(argv[0])]
    node = shutil.which("node", path=env.get("PATH") or os.environ.get("PATH"))
    if node is not None and not os.path.realpath(node).startswith(("/usr/", "/bin/")):
        # A Node outside the system folders (nvm, a tarball): its installation, read-only.
        prefix = Path(os.path.realpath(node)).parent.parent
        roots.append(prefix)
        inner["PATH"] = f"{prefix / 'bin'}:{_INNER_PATH}"
    program = os.path.realpath(argv[0])
    # The bridge makes the exposed sockets in the one subfolder the envelope may write.
    expose_dir = ensure_expose_dir(runtime) if expose else None
    exposed = {port: expose_dir / f"expose-{port}.sock" for port in expose} if expose_dir is not None else {}
    for path in exposed.values():
        path.unlink(missing_ok=True)
    try:
        cgroups = open_envelope_cgroups(limits, who=who, prlimit=prlimit)
    except BaseException:
        await gate.close()
        raise
    spec = EnvelopeSpec(
        workspace=workspace,
        home=home,
        runtime_dir=runtime,
        argv=[*cgroups.inner_prefix(), program, *argv[1:]],
        env=inner,
        program_roots=tuple(dict.fromkeys(roots)),
        tmp_bytes=limits.tmp_bytes if sized else None,
        listen=tuple(listen),
        expose=tuple((port, str(path)) for port, path in exposed.items()),
        expose_dir=expose_dir,
        extra_ro=tuple(extra_ro),
        ro_at=tuple(ro_at),
        uid=SANDBOX_UID if uid is None else uid,
    )
    try:
        launch = cgroups.launcher(envelope_argv(spec, bwrap=bwrap))
    except BaseException:
        await asyncio.to_thread(cgroups.remove)
        await gate.close()
        raise
    return Enveloped(argv=launch, env=inner, gate=gate, home=home, exposed=exposed, limits=cgroups)


def _carry_session_files(home: Path, session_id: str) -> None:
    """Copy the files of the program's session ``session_id`` (transcripts, rollouts, named
    by that id) from the other envelope homes of the same provider into ``home``, so a
    resume or fork in a new seamline session finds the conversation. Both homes are folders
    an enveloped program wrote: no link is followed, reading or writing."""
    if not session_id or any(c in session_id for c in "/*?[]"):
        return
    siblings = home.parent
    for other in siblings.iterdir() if siblings.is_dir() else ():
        if other == home or other.is_symlink() or not other.is_dir():
            continue
        for found in other.rglob(f"*{session_id}*"):
            if found.is_symlink() or not found.is_file():
                continue
            with contextlib.suppress(OSError, PrivatePathRefused):
                _carry_one(other, home, found.relative_to(other).parts)


def _carry_one(source: Path, home: Path, parts: tuple[str, ...]) -> None:
    """``source/parts`` to ``home/parts`` unless a file or folder is there already (a link
    there is replaced, never written through)."""
    data, status = read_file_beneath(source, parts)
    with open_folder(home, parts[:-1], create=True) as folder:
        try:
            there = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is not None and not stat.S_ISLNK(there.st_mode):
            return
        times = (status.st_atime_ns, status.st_mtime_ns)
        replace_file_at(folder, parts[-1], data, mode=stat.S_IMODE(status.st_mode) & 0o777, times_ns=times)


def operator_envelope(
    provider_cls: type[Provider], options: Mapping[str, str], *, mode: str, allow_hosts: Sequence[str] = ()
) -> dict[str, str]:
    """The options of a backend started by a server (``seamline serve``, ``seamline acp``):
    one that runs programs gets the operator's sandbox ``mode`` (``auto`` unless the operator
    turned it off with ``none``), whatever a client asked; ``allow_hosts`` are added."""
    merged = dict(options)
    if not provider_cls.runs_own_tools or "sandbox" not in provider_cls.options:
        return merged
    if mode == "none":
        return merged  # the operator turned the envelope off; a client may still ask for it
    merged["sandbox"] = mode
    hosts = [h for h in (merged.get("allow_hosts") or "").split(",") if h.strip()] + list(allow_hosts)
    if hosts:
        merged["allow_hosts"] = ",".join(dict.fromkeys(hosts))
    return merged
