"""The shared half of the agent-CLI providers (Claude Code, Codex, Gemini CLI).

An agent CLI runs its own tools; seamline starts it as a subprocess in its own process
group, feeds its stdout line by line to the provider's stream parser, keeps the native
lines in the raw log, and bounds the turn: a turn timeout and a retry bound of our own
(some of these programs retry for minutes, or for ever), either of which ends the process
group: the timeout reports ``timeout``, the retry bound the kind of the failure retried
(``transport`` for an endpoint that cannot be reached). Retries a CLI reports only on stderr
are read from there while the turn runs. Abort ends the group too (SIGINT, SIGTERM, then
SIGKILL) and the turn's outcome is ``aborted``.

A CLI that takes its turns on stdin can be kept warm (:mod:`seamline.providers.programs.warm_process`):
one process per session, started on the first turn and sent each later one; abort then
interrupts only the turn (the process is ended if it does not stop within ``grace``), and a
process that died is replaced by a fresh one that resumes the CLI's session.

A subclass supplies the dialect: :meth:`AgentCliProvider._invocation` (argv and environment
keys for a fresh, resumed or forked session), :meth:`AgentCliProvider._new_parser`, the
credential check, seeding and transcript location; for a warm process ``_warm_wanted``,
``_warm_invocation``, ``_warm_message``, ``_warm_interrupt`` and ``_warm_terminal`` (and
``_warm_opened`` for a protocol that needs a handshake before its first turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

from seamline.errors import AuthFailure, InvalidRequest, SeamlineError, TransportFailure
from seamline.events import Event, Raw
from seamline.providers.agent_clis.parsers.base import StreamParser
from seamline.providers.agent_clis.turn import (
    STDERR_LINES,
    TurnBounds,
    TurnReading,
    ending_diagnostic,
    read_turn_output,
)
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, Provider, ProviderSession
from seamline.providers.programs.envelope_launch import (
    ENVELOPE_OPTIONS,
    Enveloped,
    enter_envelope,
    envelope_home,
    sandbox_mode,
)
from seamline.providers.programs.journal import journaled_turn
from seamline.providers.programs.lookup import FoundProgram, find_program, searched_places
from seamline.providers.programs.model_gateway import (
    GatewayRoute,
    SessionGateway,
    close_session_gateway,
    gated_turn,
    gateway_env,
    gateway_of,
    open_session_gateway,
)
from seamline.providers.programs.runtime_dir import remove_runtime_dir
from seamline.providers.programs.warm_process import WarmProcess
from seamline.sandbox.egress import endpoint_of
from seamline.transport.env import compose_env, program_env
from seamline.transport.subprocess import LineProcess

__all__ = ["AgentCliProvider", "Invocation", "SessionMode", "parse_version"]

SessionMode = Literal["fresh", "resume", "fork"]

_VERSION: Final = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_SAFE_ID: Final = re.compile(r"^[A-Za-z0-9_-]+$")

COMMON_OPTIONS: Final[dict[str, OptionSpec]] = {
    "executable": OptionSpec("path of the CLI program (default: found on PATH)", operator_only=True),
    "turn_timeout": OptionSpec(
        "seconds a turn may take before the program is ended", default="600", kind="positive_number"
    ),
    "max_retries": OptionSpec(
        "API retries allowed in a turn, by the CLI and by our own bound", default="2", kind="count"
    ),
    "grace": OptionSpec(
        "seconds between SIGINT, SIGTERM and SIGKILL when ending the program", default="3", kind="positive_number"
    ),
    "effort": OptionSpec("reasoning effort, in the CLI's own terms"),
    **ENVELOPE_OPTIONS,
}


@dataclass(frozen=True, slots=True)
class Invocation:
    """How to start one turn: the command line, environment keys (None unsets), stdin."""

    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)
    stdin: bytes | None = None


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The first ``X.Y.Z`` in a ``--version`` output."""
    match = _VERSION.search(text)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


class AgentCliProvider(Provider):
    """Base of the providers that drive an agent CLI as a subprocess."""

    runs_own_tools = True
    keys: ClassVar[KeyPath] = "environment"
    result_cadence = "turn"
    cost_scope = "turn"
    resume_support = "native"
    #: the executable's name on PATH
    executable_name: ClassVar[str] = ""
    #: the npm package and the version this release of seamline is tested with
    npm_package: ClassVar[str] = ""
    tested_version: ClassVar[str] = ""
    #: supported versions: minimum inclusive, maximum exclusive
    min_version: ClassVar[tuple[int, int, int]] = (0, 0, 0)
    max_version: ClassVar[tuple[int, int, int]] = (999, 0, 0)
    #: the provider's configuration directory under HOME (also the seeding source)
    config_dir_name: ClassVar[str] = ""
    #: the model endpoint when no base_url is given (the envelope's egress allows it)
    default_endpoint: ClassVar[tuple[str, int] | None] = None
    #: variables (exact names, or prefixes ending in ``_``) the CLI keeps inside the envelope
    envelope_env: ClassVar[tuple[str, ...]] = ()
    #: how the program is pointed at its model API, for seamline's gateway (None: it is not)
    gateway_route: ClassVar[GatewayRoute | None] = None
    #: the uid the CLI runs as inside the envelope (None: the envelope's default)
    envelope_uid: ClassVar[int | None] = None

    # -- public helpers ----------------------------------------------------------------
    def install_command(self) -> str:
        """The exact command that installs the CLI this provider drives."""
        return f"npm install -g {self.npm_package}@{self.tested_version}"

    def executable(self) -> str | None:
        """The program to run: ``executable=`` when given, else the first on PATH, else the
        one the project's set-up installed (see :mod:`seamline.providers.programs.lookup`)."""
        found = self.locate_executable()
        return found.path if found is not None else None

    def locate_executable(self) -> FoundProgram | None:
        """The program to run and how it was found."""
        given = self.option_values.get("executable")
        if given:
            path = Path(given).expanduser()
            ok = path.is_file() and os.access(path, os.X_OK)
            return FoundProgram(str(path), "by the executable option") if ok else None
        return find_program(self.executable_name)

    async def open_resumed(self, provider_session_id: str, **open_options: Any) -> ProviderSession:
        """Open a session that continues the CLI's own session ``provider_session_id``."""
        _check_id(provider_session_id)
        session = await self.open(**open_options)
        session.state["cli_mode"] = ("resume", provider_session_id)
        return session

    async def open_forked(self, parent: ProviderSession | str, **open_options: Any) -> ProviderSession:
        """Open a session that starts from a copy of ``parent``'s conversation."""
        if self.forking == "none":
            raise InvalidRequest(f"{self.name} cannot fork a session (capability forking=none)")
        source = parent if isinstance(parent, str) else parent.provider_session_id
        if not source:
            raise InvalidRequest("the parent session has no provider session id yet; run a turn first")
        _check_id(source)
        if not isinstance(parent, str):
            open_options.setdefault("parent_id", parent.session_id)
        session = await self.open(**open_options)
        session.state["cli_mode"] = ("fork", source)
        return session

    # -- the turn ----------------------------------------------------------------------
    def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        # The CLI edits the workspace itself: the turn is one step of the edit journal.
        return journaled_turn(session, self.name, self._gated_turn(session, prompt))

    async def _gated_turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        """The turn, its model requests through the session's gateway when there is one."""
        await self._session_gateway(session)
        async for event in gated_turn(
            session, self._run_turn(session, prompt), self._gateway_route(), self.option_values
        ):
            yield event

    async def _session_gateway(self, session: ProviderSession) -> SessionGateway | None:
        """The session's gateway, started on its first turn (see :func:`open_session_gateway`)."""
        return await open_session_gateway(
            session, self._gateway_route(), self.option_values, rates=self.rates, model=self.model
        )

    def _gateway_route(self) -> GatewayRoute | None:
        """How this program is pointed at its model API (:attr:`gateway_route`, or what
        the options make of it)."""
        return self.gateway_route

    def _mode(self, session: ProviderSession) -> tuple[SessionMode, str | None]:
        if session.provider_session_id:
            return "resume", session.provider_session_id
        # The base's fork verb leaves the parent's provider id here for a native fork.
        parent = session.state.get("fork_from_provider_session_id")
        if isinstance(parent, str) and parent:
            return "fork", parent
        pending = session.state.get("cli_mode")
        if isinstance(pending, tuple) and len(pending) == 2:
            mode, target = pending
            if mode in ("resume", "fork") and isinstance(target, str):
                return mode, target
        return "fresh", None

    async def _run_turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        exe = self.executable()
        if exe is None:
            raise InvalidRequest(self._missing_message())
        turn = (
            self._warm_turn(session, prompt, exe)
            if self._warm_wanted(session)
            else self._cold_turn(session, prompt, exe)
        )
        try:
            async for event in turn:
                yield event
        finally:
            await turn.aclose()

    def _bounds(self) -> TurnBounds:
        return TurnBounds(
            timeout=self._float_option("turn_timeout", 600.0),
            max_retries=self._int_option("max_retries", 2),
            grace=self._float_option("grace", 3.0),
        )

    async def _cold_turn(self, session: ProviderSession, prompt: str, exe: str) -> AsyncGenerator[Event, None]:
        """One process for the turn: started with the prompt, read to its end, ended."""
        mode, target = self._mode(session)
        invocation = self._invocation(session=session, prompt=prompt, executable=exe, mode=mode, target=target)
        parser = self._new_parser(session=session, mode=mode, target=target)
        bounds = self._bounds()
        argv, env, cwd, envelope = await self._placed(session, invocation, mode, target)
        try:
            proc = await LineProcess.spawn(argv, env=env, cwd=cwd, stdin=invocation.stdin)
        except BaseException:
            if envelope is not None:
                await envelope.close()
            raise
        session.state["cli_process"] = proc
        lines = proc.lines().__aiter__()

        async def fetch() -> bytes | None:
            try:
                return await lines.__anext__()
            except StopAsyncIteration:
                return None

        reading = TurnReading()
        reader = read_turn_output(
            who=self.name,
            session=session,
            parser=parser,
            proc=proc,
            envelope=envelope,
            bounds=bounds,
            fetch=fetch,
            gave_up=self._gave_up,
            until_terminal=False,
            reading=reading,
        )
        try:
            async for event in reader:
                yield event
        finally:
            await reader.aclose()
            if not reading.cut_short and not session.aborted and proc.returncode is None:
                # Output ended: give the program a moment to exit on its own before signalling.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=bounds.grace)
            await _await_ending(session)
            if proc.returncode is None or proc.group_alive():
                await proc.end(grace=bounds.grace)
            if envelope is not None:
                await envelope.close()
        returncode = await proc.wait()
        for event in self._turn_end(session, parser, proc, envelope, reading, returncode):
            yield event

    def _turn_end(
        self,
        session: ProviderSession,
        parser: StreamParser,
        proc: LineProcess,
        envelope: Enveloped | None,
        reading: TurnReading,
        returncode: int | None,
    ) -> list[Event]:
        """The events that close a turn: how the program ended, the envelope's report, and
        the parser's verdict with the turn's one ``complete``."""
        events: list[Event] = []
        diagnostic = ending_diagnostic(proc, returncode) if returncode is not None else None
        if diagnostic is not None:
            events.append(diagnostic)
        if envelope is not None:
            events += envelope.refusals()
            events.append(envelope.summary())
        events += parser.finish(
            returncode=returncode,
            stderr=proc.stderr_tail(STDERR_LINES),
            aborted=session.aborted and not reading.cut_short,
            timed_out=reading.timed_out,
            gave_up=reading.gave_up,
        )
        return events

    # -- the warm process: one per session, a turn at a time on its stdin ------------------
    async def _warm_turn(self, session: ProviderSession, prompt: str, exe: str) -> AsyncGenerator[Event, None]:
        """One turn on the session's warm process (started now if it has none, or a fresh one
        resuming the CLI's session if the last one died), read up to the turn's terminal
        line. A turn cut short (timeout, retry bound, no terminal line) ends the process."""
        bounds = self._bounds()
        warm = await self._warm_process(session, exe)
        mode, target = self._mode(session)
        parser = self._new_parser(session=session, mode=mode, target=target)
        # The session's process, then at most one fresh one: a process that stops reading
        # its stdin right after it started will not take the turn on a third try either.
        for attempt in range(2):
            if (notice := session.state.pop("cli_warm_notice", None)) is not None and isinstance(notice, Raw):
                yield notice
            session.state["cli_process"] = warm.proc
            if session.aborted:
                # Aborted before the CLI was sent the turn: nothing to stop, the process stays.
                warm.end_turn(idle=self._float_option("warm_idle", 300.0), grace=bounds.grace)
                for event in parser.finish(returncode=None, aborted=True):
                    yield event
                return
            if await warm.begin_turn(self._warm_message(prompt, warm)):
                break
            # It died between the check and the message: the CLI never saw this turn.
            await self._end_warm(session, warm, because="exited")
            if attempt == 1:
                raise TransportFailure(self._not_taken(warm, parser))
            warm = await self._warm_process(session, exe)
        parser.continue_from(warm.carry)
        reading = TurnReading()
        reader = read_turn_output(
            who=self.name,
            session=session,
            parser=parser,
            proc=warm.proc,
            envelope=warm.envelope,
            bounds=bounds,
            fetch=warm.next_line,
            gave_up=self._gave_up,
            until_terminal=True,
            reading=reading,
        )
        kept = False
        try:
            async for event in reader:
                yield event
        finally:
            await reader.aclose()
            await _await_ending(session)
            kept = parser.terminal_seen and not reading.cut_short and not parser.process_ends and warm.alive
            if kept:
                warm.carry = parser.carry_over()
                warm.end_turn(idle=self._float_option("warm_idle", 300.0), grace=bounds.grace)
            else:
                await self._end_warm(session, warm, because=_why_ended(reading, session))
        returncode = None if kept else await warm.proc.wait()
        for event in self._turn_end(session, parser, warm.proc, warm.envelope, reading, returncode):
            yield event

    def _not_taken(self, warm: WarmProcess, parser: StreamParser) -> str:
        """Why a turn failed that neither the session's process nor a fresh one took."""
        cause = parser._stderr_cause(warm.proc.stderr_tail(STDERR_LINES))
        said = f"; its stderr: {cause}" if cause else ""
        return (
            f"{self.name} did not take the turn: a fresh process stopped reading its input too,"
            f" so the turn was never sent{said}"
        )

    async def _warm_process(self, session: ProviderSession, exe: str) -> WarmProcess:
        """The session's live warm process, or a new one (with a notice when it replaces one)."""
        await self._settle_warm(session)
        warm = session.state.get("cli_warm")
        if isinstance(warm, WarmProcess):
            return warm
        mode, target = self._mode(session)
        invocation = self._warm_invocation(session=session, executable=exe, mode=mode, target=target)
        argv, env, cwd, envelope = await self._placed(session, invocation, mode, target)
        try:
            warm = await WarmProcess.start(argv, env=env, cwd=cwd, is_terminal=self._warm_terminal)
        except BaseException:
            if envelope is not None:
                await envelope.close()
            raise
        if envelope is not None:
            warm.envelope = envelope
            warm.attach(envelope, envelope.close)
        for thing, closer in self._warm_attachments(session):
            warm.attach(thing, closer)
        session.state["cli_process"] = warm.proc
        try:
            await self._warm_opened(session, warm, mode, target)
        except BaseException:
            await warm.close(grace=self._float_option("grace", 3.0), because="start_failed")
            raise
        session.state["cli_warm"] = warm
        return warm

    async def _settle_warm(self, session: ProviderSession) -> None:
        """A warm process that is no longer usable (it exited, was killed, sat idle too
        long) is ended for good, with what it held; the next turn starts a fresh one, which
        resumes the CLI's own session, and says so in a ``raw`` notice from ``seamline``."""
        warm = session.state.get("cli_warm")
        if not isinstance(warm, WarmProcess) or warm.alive:
            return
        because = warm.ended_because
        returncode = warm.proc.returncode
        await self._end_warm(session, warm, because="exited")
        del session.state["cli_warm"]
        payload: dict[str, Any] = {
            "warm_process": "replaced",
            "ended": because or "exited",
            "pid": warm.proc.pid,
            "resume": session.provider_session_id,
        }
        if because is None:
            payload["exit_code"] = returncode if returncode is not None else await warm.proc.wait()
        session.state["cli_warm_notice"] = Raw(source="seamline", payload=payload)

    async def _end_warm(self, session: ProviderSession, warm: WarmProcess, *, because: str) -> None:
        # It stays in the state, ended: the next turn says it was replaced, and why.
        await warm.close(grace=self._float_option("grace", 3.0), because=because)

    def _warm_wanted(self, session: ProviderSession) -> bool:
        """Whether this session's turns go to one kept process (a dialect that can says so)."""
        return False

    def _warm_invocation(
        self, *, session: ProviderSession, executable: str, mode: SessionMode, target: str | None
    ) -> Invocation:
        """How to start the warm process: the turn's invocation, turns taken on stdin."""
        raise NotImplementedError

    async def _warm_opened(
        self, session: ProviderSession, warm: WarmProcess, mode: SessionMode, target: str | None
    ) -> None:
        """What a new warm process needs before its first turn (a protocol's handshake);
        raising a classified error fails the turn, and the process is ended."""
        return None

    def _warm_message(self, prompt: str, warm: WarmProcess) -> bytes:
        """One turn's input line for the warm process."""
        raise NotImplementedError

    def _warm_interrupt(self, warm: WarmProcess) -> bytes | None:
        """The control line that interrupts the running turn (None: the CLI has none, or
        cannot be told yet)."""
        return None

    def _warm_terminal(self, line: bytes) -> bool:
        """Whether an output line is the one that ends a turn."""
        raise NotImplementedError

    def _warm_attachments(self, session: ProviderSession) -> list[tuple[object, Callable[[], Awaitable[None]]]]:
        """What must live as long as the warm process (an approval socket), with its closer."""
        return []

    async def _placed(
        self, session: ProviderSession, invocation: Invocation, mode: SessionMode, target: str | None
    ) -> tuple[list[str], dict[str, str], Path, Enveloped | None]:
        """Where and how ``invocation`` starts: its command line and environment (the
        session's gateway URL and placeholder over what the invocation names), its folder,
        and its envelope when it runs in one (the caller closes it if the start fails)."""
        env = program_env(self._common_env(), invocation.env, gateway_env(session))
        cwd = Path(session.workspace or Path.cwd())
        if self._sandbox_mode() == "none":
            return list(invocation.argv), env, cwd, None
        envelope = await self._enter_envelope(session, invocation, env, cwd, mode, target)
        return list(envelope.argv), dict(envelope.env), cwd, envelope

    async def _enter_envelope(
        self,
        session: ProviderSession,
        invocation: Invocation,
        env: Mapping[str, str],
        cwd: Path,
        mode: SessionMode,
        target: str | None,
    ) -> Enveloped:
        return await enter_envelope(
            who=self.name,
            mode=self._sandbox_mode(),
            session_id=session.session_id,
            state=session.state,
            workspace=cwd,
            argv=invocation.argv,
            env=env,  # the invocation's and the gateway's variables are in it already
            keep_env=lambda name: name in invocation.env or self._keeps_env(name),
            endpoints=self._session_endpoints(session),
            allow_hosts=self.option_values.get("allow_hosts"),
            seed=lambda home: self._seed(home, None),
            inner_env=self._envelope_inner_env,
            carry=target if mode in ("resume", "fork") else None,
            extra_ro=self._envelope_ro_paths(session),
            ro_at=self._envelope_ro_at(session),
            uid=self.envelope_uid,
        )

    def _sandbox_mode(self) -> str:
        """``bwrap``, ``auto`` or ``none``: whether the CLI runs in the envelope."""
        return sandbox_mode(self.option_values)

    def config_dir_for(self, session: ProviderSession) -> Path:
        """The CLI's config dir for ``session``: the envelope's private home when it runs inside."""
        if self._sandbox_mode() != "none":
            return envelope_home(self.name, session.session_id) / self.config_dir_name
        return self.config_dir()

    def _keeps_env(self, name: str) -> bool:
        return any(name == k or (k.endswith("_") and name.startswith(k)) for k in self.envelope_env)

    def _session_endpoints(self, session: ProviderSession) -> list[tuple[str, int]]:
        """The model endpoints of ``session``'s program: the gateway alone when it has one
        (the vendor's host is then not on the envelope's list at all)."""
        gateway = gateway_of(session)
        return [("127.0.0.1", gateway.port)] if gateway is not None else self._endpoints()

    def _endpoints(self) -> list[tuple[str, int]]:
        """The model endpoints the envelope lets the CLI reach: ``base_url`` or the vendor's."""
        base_url = self.option_values.get("base_url")
        if base_url:
            return [endpoint_of(base_url)]
        return [self.default_endpoint] if self.default_endpoint else []

    def _envelope_inner_env(self, home: Path) -> dict[str, str]:
        """Variables set inside the envelope that point the CLI at its private home."""
        return {}

    def _envelope_ro_paths(self, session: ProviderSession) -> list[Path]:
        """Host files the CLI reads inside the envelope (bound read-only at their paths)."""
        return []

    def _envelope_ro_at(self, session: ProviderSession) -> list[tuple[Path, str]]:
        """Host files the CLI reads inside the envelope at another path: (host, inside)."""
        return []

    def _gave_up(self, retries: int, bound: int) -> str:
        return f"{self.name}: the API call kept failing and the CLI retried {retries} times (our bound is {bound})"

    async def _abort(self, session: ProviderSession) -> None:
        grace = self._float_option("grace", 3.0)
        warm = session.state.get("cli_warm")
        proc = session.state.get("cli_process")
        if isinstance(warm, WarmProcess) and warm.proc is proc:
            if not warm.in_turn:
                return  # between turns: nothing to stop, and the process stays
            # Ask the CLI to end the turn and keep the session; past the grace, end the process.
            interrupt = self._warm_interrupt(warm)
            if interrupt is not None and await warm.interrupt(interrupt) and await warm.turn_over(grace):
                return
        if isinstance(proc, LineProcess):
            ending = asyncio.ensure_future(proc.end(grace=grace))
            session.state["cli_ending"] = ending
            await asyncio.shield(ending)

    async def _close(self, session: ProviderSession) -> None:
        grace = self._float_option("grace", 3.0)
        warm = session.state.pop("cli_warm", None)
        if isinstance(warm, WarmProcess):
            await warm.close(grace=grace, because="closed")
        # The process stays named in the state (what was started, for checks after close).
        proc = session.state.get("cli_process")
        if isinstance(proc, LineProcess) and proc.group_alive():
            await proc.end(grace=grace)
        await close_session_gateway(session)
        remove_runtime_dir(session.state)  # the envelope's sockets (made on first use)

    # -- preflight ---------------------------------------------------------------------
    async def _preflight(self) -> Sequence[PreflightCheck]:
        found = self.locate_executable()
        if found is None:
            given = self.option_values.get("executable")
            detail = f"not found: {given}" if given else f"not found: {searched_places(self.executable_name)}"
            return [PreflightCheck(name="executable", ok=False, detail=detail, fix=self.install_command())]
        exe = found.path
        checks = [PreflightCheck(name="executable", ok=True, detail=f"{exe} (found {found.where})")]
        checks.append(await self._version_check(exe))
        checks.append(self._credentials_check(os.environ))
        return checks

    async def _version_check(self, exe: str) -> PreflightCheck:
        try:
            proc = await LineProcess.spawn([exe, "--version"], env=compose_env(None, self._common_env()))
        except SeamlineError as exc:
            return PreflightCheck(name="version", ok=False, detail=f"{exe} --version: {exc.message}")
        try:
            out = await asyncio.wait_for(_read_all(proc), timeout=30)
        except TimeoutError:
            return PreflightCheck(name="version", ok=False, detail=f"{exe} --version did not answer in 30 s")
        finally:
            if proc.returncode is None or proc.group_alive():
                await proc.end(grace=1.0)
        text = " ".join(out)
        version = parse_version(text)
        wanted = f">= {_dotted(self.min_version)}, < {_dotted(self.max_version)}"
        if version is None:
            return PreflightCheck(
                name="version", ok=False, detail=f"cannot read a version from {text[:80]!r}", fix=self.install_command()
            )
        ok = self.min_version <= version < self.max_version
        return PreflightCheck(
            name="version",
            ok=ok,
            detail=f"{_dotted(version)} (supported {wanted})",
            fix=None if ok else self.install_command(),
        )

    def _credentials_check(self, environ: Mapping[str, str]) -> PreflightCheck:
        raise NotImplementedError

    def _ready(self) -> None:
        check = self._credentials_check(os.environ)
        if not check.ok:
            fix = f"; fix: {check.fix}" if check.fix else ""
            raise AuthFailure(f"{self.name}: {check.detail}{fix} (seamline providers check {self.name})")

    def _missing_message(self) -> str:
        given = self.option_values.get("executable")
        where = f"executable={given} is not a runnable file" if given else searched_places(self.executable_name)
        return f"{self.name}: {where}; install it with: {self.install_command()}"

    # -- hooks for the dialects -----------------------------------------------------------
    def _invocation(
        self,
        *,
        session: ProviderSession,
        prompt: str,
        executable: str,
        mode: SessionMode,
        target: str | None,
    ) -> Invocation:
        raise NotImplementedError

    def _new_parser(self, *, session: ProviderSession, mode: SessionMode, target: str | None) -> StreamParser:
        raise NotImplementedError

    def _common_env(self) -> dict[str, str | None]:
        return {}

    # -- config dir, seeding, transcripts --------------------------------------------------
    def config_dir(self) -> Path:
        """Where the CLI keeps its configuration and sessions for this process's HOME."""
        return Path(os.environ.get("HOME") or Path.home()) / self.config_dir_name

    def _seed(self, node_dir: Path, parent_dir: Path | None) -> None:
        source = (parent_dir / self.config_dir_name) if parent_dir is not None else self.config_dir()
        if not source.is_dir():
            return
        dest = node_dir / self.config_dir_name
        copy_config_tree(source, dest, skip=self._seed_skip())
        # A file the config names by a relative path travels too, to the same place relative
        # to the new node, as long as it lies inside the parent's directory (never outside).
        root = source.parent.resolve()
        for relative in self._referenced_files(source):
            origin = (source / relative).resolve()
            if not origin.is_file() or not origin.is_relative_to(root):
                continue
            target = node_dir / origin.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)

    def _seed_skip(self) -> frozenset[str]:
        """Names under the config dir that are session data, not configuration."""
        return frozenset()

    def _referenced_files(self, config_dir: Path) -> Iterable[str]:
        """Relative paths of files the configuration in ``config_dir`` refers to."""
        return ()

    def _transcript_location(self, session: ProviderSession) -> Path | None:
        psid = session.provider_session_id
        if not psid or not _SAFE_ID.match(psid):
            return None
        expected = self._expected_transcript(session, psid)
        if expected is not None and expected.exists():
            return expected
        # Fallback search, for the id this session recorded only (never someone else's).
        found = self._search_transcript(psid)
        return found if found is not None else expected

    def _expected_transcript(self, session: ProviderSession, psid: str) -> Path | None:
        return None

    def _search_transcript(self, psid: str) -> Path | None:
        return None

    # -- options -------------------------------------------------------------------------
    def _float_option(self, key: str, default: float) -> float:
        try:
            value = float(self.option_values.get(key, default))
        except ValueError:
            raise InvalidRequest(f"option {key} of {self.name} must be a number") from None
        if value <= 0:
            raise InvalidRequest(f"option {key} of {self.name} must be positive")
        return value

    def _int_option(self, key: str, default: int) -> int:
        try:
            value = int(self.option_values.get(key, default))
        except ValueError:
            raise InvalidRequest(f"option {key} of {self.name} must be a whole number") from None
        if value < 0:
            raise InvalidRequest(f"option {key} of {self.name} must not be negative")
        return value


async def _read_all(proc: LineProcess) -> list[str]:
    out = [line.decode("utf-8", "replace") async for line in proc.lines()]
    await proc.wait()
    return out


def copy_config_tree(source: Path, dest: Path, *, skip: frozenset[str]) -> None:
    """Copy a CLI's config dir, leaving out the top-level entries named in ``skip``."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name in skip:
            continue
        target = dest / entry.name
        if entry.is_symlink():
            continue
        if entry.is_dir():
            shutil.copytree(entry, target, dirs_exist_ok=True, symlinks=False)
        elif entry.is_file():
            shutil.copy2(entry, target)


async def _await_ending(session: ProviderSession) -> None:
    """An abort that is ending the group: wait for it rather than race it with a second ending."""
    ending = session.state.pop("cli_ending", None)
    if isinstance(ending, asyncio.Future):
        with contextlib.suppress(Exception):
            await ending


def _why_ended(reading: TurnReading, session: ProviderSession) -> str:
    """Why a warm process was ended after a turn: the turn's cut, else how it ended."""
    if reading.timed_out is not None:
        return "turn_timeout"
    if reading.gave_up is not None:
        return "retry_bound"
    return "aborted" if session.aborted else "turn_failed"


def uuid_for(session_id: str) -> str:
    """Our session id in the UUID form the CLIs that take a caller-minted id want."""
    try:
        return str(uuid.UUID(session_id))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"seamline:{session_id}"))


def _check_id(value: str) -> None:
    if not _SAFE_ID.match(value):
        raise InvalidRequest(f"not a valid provider session id: {value!r}")


def _dotted(version: tuple[int, int, int]) -> str:
    return ".".join(str(p) for p in version)
