"""``codex``: OpenAI's Codex CLI driven headless.

By default a session keeps one warm ``codex app-server`` (JSON-RPC on stdio, see
:mod:`seamline.providers.agent_clis.codex_warm`): the thread is opened once, each turn is a
``turn/start`` on it, an abort a ``turn/interrupt``. With ``warm=false`` each turn is one
``codex exec --json`` process. Codex mints the thread id; a later process resumes it
(``thread/resume``, or ``codex exec resume ID``), a fork copies it natively (``thread/fork``,
or ``codex exec fork ID``). Codex reports tokens, never cost, so usage is priced from the price data.
A local or third-party endpoint is a model provider of Codex's own configuration, given
inline with ``-c`` (Codex ignores ``OPENAI_BASE_URL``, and speaks only the Responses wire).
"""

from __future__ import annotations

import asyncio
import json
import os
import tomllib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import ClassVar

from seamline.errors import InvalidRequest
from seamline.events import Event
from seamline.providers.agent_clis.approvals import ApprovalSocket, hook_command, merge_events
from seamline.providers.agent_clis.base import COMMON_OPTIONS, AgentCliProvider, Invocation, SessionMode
from seamline.providers.agent_clis.codex_hooks import (
    CODEX_TOOL_CLASSES,
    codex_arguments,
    codex_denied_events,
    hook_overrides,
    verify_hook_trust,
)
from seamline.providers.agent_clis.codex_warm import interrupt_message, is_turn_end, open_thread, turn_message
from seamline.providers.agent_clis.parsers.base import StreamParser
from seamline.providers.agent_clis.parsers.codex import CodexJsonParser
from seamline.providers.agent_clis.parsers.codex_app_server import CodexAppServerParser
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, ProviderSession
from seamline.providers.programs.model_gateway import GATEWAY_OPTIONS, STORED_LOGIN_NOTE, GatewayRoute, gateway_of
from seamline.providers.programs.runtime_dir import ensure_runtime_dir
from seamline.providers.programs.warm_process import WARM_OPTIONS, WarmProcess
from seamline.sandbox.private_files import open_folder

__all__ = ["CodexProvider"]

_CODEX_MODES = ("read-only", "workspace-write", "danger-full-access")
# The warm app-servers of this Python process by the thread each holds.
_HOLDERS: weakref.WeakValueDictionary[str, WarmProcess] = weakref.WeakValueDictionary()


class CodexProvider(AgentCliProvider):
    """Codex as an agent: its own tools and threads; tokens priced by seamline."""

    name: ClassVar[str] = "codex"
    keys: ClassVar[KeyPath] = "gateway"
    gateway_key_vars: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    stored_login: ClassVar[str | None] = "a ChatGPT login from `codex login`, kept in ~/.codex/auth.json"
    description: ClassVar[str] = "OpenAI's Codex CLI (codex exec --json), running its own tools"
    default_model: ClassVar[str | None] = None
    options: ClassVar[dict[str, OptionSpec]] = {
        **COMMON_OPTIONS,
        **GATEWAY_OPTIONS,
        "base_url": OptionSpec(
            "Responses API base URL (an inline model provider of Codex's config)", kind="url", operator_only=True
        ),
        "api_key_env": OptionSpec(
            "environment variable holding the key for base_url", default="OPENAI_API_KEY", operator_only=True
        ),
        "sandbox": OptionSpec(
            "bwrap or auto: run Codex inside seamline's envelope (none: not); "
            "read-only, workspace-write, danger-full-access: Codex's own mode (as codex_sandbox), kept for old sessions",
            default="none",
            choices=("bwrap", "auto", "none", *_CODEX_MODES),
        ),
        "codex_sandbox": OptionSpec(
            "Codex's own sandbox mode (default workspace-write; danger-full-access inside the envelope, "
            "which is then the boundary)",
            choices=_CODEX_MODES,
        ),
        "codex_home": OptionSpec("Codex's home dir (sets CODEX_HOME)", operator_only=True),
        "websockets": OptionSpec(
            "let Codex try the Responses WebSocket at base_url first (it falls back to HTTP)",
            default="false",
            choices=("true", "false"),
        ),
        **WARM_OPTIONS,
    }
    # A trusted PreToolUse hook asks seamline's permission service before each tool call.
    tool_approval = "every_call"
    forking = "native"
    session_ids = "provider"
    cost_source = "priced"
    budget = "seamline"
    routes = ("openai", "responses")
    mcp_transports = ("stdio", "http")
    executable_name: ClassVar[str] = "codex"
    npm_package: ClassVar[str] = "@openai/codex"
    tested_version: ClassVar[str] = "0.171.0"
    min_version: ClassVar[tuple[int, int, int]] = (0, 160, 0)
    max_version: ClassVar[tuple[int, int, int]] = (1, 0, 0)
    config_dir_name: ClassVar[str] = ".codex"
    default_endpoint: ClassVar[tuple[str, int] | None] = ("api.openai.com", 443)
    # Codex (Rust, reqwest) honours HTTPS_PROXY/HTTP_PROXY/NO_PROXY itself.
    envelope_env: ClassVar[tuple[str, ...]] = ("OPENAI_", "CODEX_", "RUST_LOG")

    def _invocation(
        self,
        *,
        session: ProviderSession,
        prompt: str,
        executable: str,
        mode: SessionMode,
        target: str | None,
    ) -> Invocation:
        flags, env = self._config(session)
        argv = [executable, "exec", "--json", "--skip-git-repo-check"]
        if mode == "resume" and target:
            argv += ["resume", *flags, target, prompt]
        elif mode == "fork" and target:
            argv += ["fork", *flags, target, prompt]
        else:
            argv += [*flags, prompt]
        return Invocation(argv=argv, env=env)

    def _config(self, session: ProviderSession) -> tuple[list[str], dict[str, str | None]]:
        """Codex's configuration as ``-c`` flags (the session-flags layer), and environment keys."""
        config = [
            f"sandbox_mode={json.dumps(self._codex_sandbox())}",
            'approval_policy="never"',
        ]
        if self.model:
            config.append(f"model={json.dumps(self.model)}")
        if effort := self.option_values.get("effort"):
            config.append(f"model_reasoning_effort={json.dumps(effort)}")
        env: dict[str, str | None] = {}
        retries = self._int_option("max_retries", 2)
        gateway = gateway_of(session)
        if base_url := (gateway.base_url if gateway is not None else None) or self.option_values.get("base_url"):
            key_env = self.option_values.get("api_key_env", "OPENAI_API_KEY")
            table = (
                f'{{name="seamline",base_url={json.dumps(base_url)},env_key={json.dumps(key_env)},'
                f'wire_api="responses",request_max_retries={retries},stream_max_retries={retries}'
                f",supports_websockets={self.option_values.get('websockets', 'false')}}}"
            )
            config += ['model_provider="seamline"', f"model_providers.seamline={table}"]
        if home := self.option_values.get("codex_home"):
            env["CODEX_HOME"] = home
        hook = session.state.get("codex_hook")
        if isinstance(hook, tuple):  # the approval hook, while this turn's socket is served
            command, wait = hook
            config += hook_overrides(command, wait)
        return [part for item in config for part in ("-c", item)], env

    # -- kept warm: one `codex app-server` per session, a turn/start per turn ----------------
    def _warm_wanted(self, session: ProviderSession) -> bool:
        return self.option_values.get("warm", "true") == "true"

    def _warm_invocation(
        self, *, session: ProviderSession, executable: str, mode: SessionMode, target: str | None
    ) -> Invocation:
        # The thread is opened by the handshake (_warm_opened), not by the command line.
        flags, env = self._config(session)
        return Invocation(argv=[executable, "app-server", *flags], env=env)

    async def _warm_opened(
        self, session: ProviderSession, warm: WarmProcess, mode: SessionMode, target: str | None
    ) -> None:
        await open_thread(warm, mode=mode, target=target, timeout=min(self._float_option("turn_timeout", 600.0), 120))
        _HOLDERS[str(warm.carry["thread_id"])] = warm

    async def _release_thread(self, session: ProviderSession) -> None:
        """Codex lets one live process write a thread. A turn that resumes a thread which
        another session's warm process of this Python process holds, idle, ends that one
        first (its session's next turn resumes in a new process, and says why:
        ``handed_over``); one mid-turn, or in another program, makes Codex refuse."""
        mode, target = self._mode(session)
        holder = _HOLDERS.get(target) if mode == "resume" and target else None
        if holder is None or holder is session.state.get("cli_warm") or holder.in_turn or not holder.alive:
            return
        await holder.close(grace=self._float_option("grace", 3.0), because="handed_over")

    def _warm_message(self, prompt: str, warm: WarmProcess) -> bytes:
        return turn_message(prompt, str(warm.carry["thread_id"]))

    def _warm_interrupt(self, warm: WarmProcess) -> bytes | None:
        thread, turn = warm.carry.get("thread_id"), warm.carry.get("turn_id")
        if not isinstance(thread, str) or not isinstance(turn, str):
            return None  # Codex has not said the turn's id yet: the process is ended instead
        return interrupt_message(thread, turn)

    def _warm_terminal(self, line: bytes) -> bool:
        return is_turn_end(line)  # a process's own watcher (codex_warm.watch_turn) replaces it

    async def _abort(self, session: ProviderSession) -> None:
        warm = session.state.get("cli_warm")
        if isinstance(warm, WarmProcess) and warm.in_turn:
            # turn/interrupt names the turn: give Codex's answer to turn/start a moment to arrive.
            loop = asyncio.get_running_loop()
            until = loop.time() + self._float_option("grace", 3.0)
            while "turn_id" not in warm.carry and warm.in_turn and warm.alive and loop.time() < until:
                await asyncio.sleep(0.02)
        await super()._abort(session)

    def _warm_attachments(self, session: ProviderSession) -> list[tuple[object, Callable[[], Awaitable[None]]]]:
        # The hook named in the process's -c flags must answer as long as it runs.
        bridge = session.state.get("approval_bridge")
        if isinstance(bridge, ApprovalSocket) and bridge.running:
            return [(bridge, bridge.stop)]
        return []

    # -- one approval path: a trusted PreToolUse hook answered by the permission service --
    def _run_turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        return self._approved_turn(session, prompt)

    async def _approved_turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        await self._release_thread(session)
        if session.approval is None:
            async for event in super()._run_turn(session, prompt):
                yield event
            return
        exe = self.executable()
        if exe is None:
            raise InvalidRequest(self._missing_message())
        # A warm process that died takes its socket with it: settled before one is chosen.
        await self._settle_warm(session)
        bridge = session.state.get("approval_bridge")
        if not isinstance(bridge, ApprovalSocket) or not bridge.running:
            bridge = ApprovalSocket(
                session.approval,
                ensure_runtime_dir(session.session_id, session.state),
                classes=CODEX_TOOL_CLASSES,
                arguments=codex_arguments,
                on_denied=codex_denied_events,
            )
            await bridge.start()
            session.state["approval_bridge"] = bridge
        command, wait = hook_command(bridge, timeout=self._float_option("turn_timeout", 600.0), dialect="codex")
        # Codex must wait longer than the hook does: only the hook's own exit 2 is safe.
        hook = session.state["codex_hook"] = (command, wait + 30)
        try:
            warm = session.state.get("cli_warm")
            if not (self._warm_wanted(session) and isinstance(warm, WarmProcess) and warm.alive):
                await self._check_hook(session, exe, command)  # a Codex is about to start
            async for event in merge_events(super()._run_turn(session, prompt), bridge.events):
                yield event
        finally:
            warm = session.state.get("cli_warm")
            if isinstance(warm, WarmProcess) and warm.alive and warm.holds(bridge):
                bridge.cancel_pending()  # the socket lives on with the process; no hook waits past a turn
            else:
                if session.state.get("codex_hook") == hook:
                    del session.state["codex_hook"]
                if session.state.get("approval_bridge") is bridge:
                    session.state.pop("approval_bridge", None)
                await bridge.stop()

    async def _check_hook(self, session: ProviderSession, exe: str, command: str) -> None:
        """Ask this Codex, configured as the run will be (its flags, its environment and
        ``CODEX_HOME``, its workspace; in the envelope, inside it, with the private home),
        whether it would run seamline's hook; a classified error, nothing started, if not."""
        await self._session_gateway(session)  # the check sees what the run will: no real key
        flags, given = self._config(session)
        invocation = Invocation(argv=[exe, "app-server", *flags], env=given)
        mode, target = self._mode(session)
        argv, env, cwd, envelope = await self._placed(session, invocation, mode, target)
        hint = (
            "Codex reads hooks settings from $CODEX_HOME/config.toml (inside the envelope, the private "
            f"home's); the tested version is {self.tested_version} (npm install -g @openai/codex@{self.tested_version})"
        )
        try:
            await verify_hook_trust(argv, env=env, cwd=cwd, command=command, version_hint=hint)
        finally:
            if envelope is not None:
                await envelope.close()

    def _sandbox_mode(self) -> str:
        given = self.option_values.get("sandbox") or "none"
        return "none" if given in _CODEX_MODES else super()._sandbox_mode()

    def _codex_sandbox(self) -> str:
        """Codex's own mode: given, else the old ``sandbox=<codex mode>``, else
        workspace-write; inside the envelope danger-full-access (Codex's own sandbox cannot
        nest in bubblewrap's namespaces, and the envelope is the boundary)."""
        if given := self.option_values.get("codex_sandbox"):
            return given
        legacy = self.option_values.get("sandbox") or ""
        if legacy in _CODEX_MODES:
            return legacy
        return "danger-full-access" if self._sandbox_mode() != "none" else "workspace-write"

    def _keeps_env(self, name: str) -> bool:
        return name == self.option_values.get("api_key_env", "OPENAI_API_KEY") or super()._keeps_env(name)

    def _gateway_route(self) -> GatewayRoute | None:
        # Codex reads its key from the variable api_key_env names, its API at base_url.
        return GatewayRoute(
            vendor="openai",
            key_vars=(self.option_values.get("api_key_env", "OPENAI_API_KEY"),),
            base_url_var="OPENAI_BASE_URL",
            default_base_url="https://api.openai.com/v1",
        )

    def _envelope_inner_env(self, home: Path) -> dict[str, str]:
        # Codex refuses a CODEX_HOME that does not exist: a user without ~/.codex seeds nothing.
        # Made without following a link (the private home is the model's to write).
        with open_folder(home, (self.config_dir_name,), create=True):
            pass
        return {"CODEX_HOME": str(home / self.config_dir_name)}

    def _new_parser(self, *, session: ProviderSession, mode: SessionMode, target: str | None) -> StreamParser:
        warm = session.state.get("cli_warm")
        parser = (
            CodexAppServerParser(model=self.model) if self._warm_wanted(session) else CodexJsonParser(model=self.model)
        )
        if isinstance(warm, WarmProcess) and "totals" in warm.carry:
            return parser  # the live process carries the thread's totals from turn to turn
        if mode != "fresh" and target:
            # Codex reports the thread's running totals; the turn's share is what it adds to them.
            parser.baseline = self._thread_totals(target, self.config_dir_for(session))
        return parser

    def _thread_totals(self, thread_id: str, config_dir: Path | None = None) -> dict[str, int]:
        """The token totals a thread had reached, from the last ``token_count`` of its rollout."""
        rollout = self._search_transcript(thread_id, config_dir)
        if rollout is None:
            return {}
        totals: dict[str, int] = {}
        try:
            with rollout.open("rb") as fh:
                for line in fh:
                    if b'"token_count"' not in line:
                        continue
                    try:
                        record = json.loads(line)
                        figures = record["payload"]["info"]["total_token_usage"]
                    except (ValueError, KeyError, TypeError):
                        continue
                    if isinstance(figures, dict):
                        totals = {k: v for k, v in figures.items() if isinstance(v, int)}
        except OSError:
            return {}
        return totals

    def _credentials_check(self, environ: Mapping[str, str]) -> PreflightCheck:
        key_env = self.option_values.get("api_key_env", "OPENAI_API_KEY")
        if environ.get(key_env):
            return PreflightCheck(name="credentials", ok=True, detail=f"{key_env} is set")
        stored = self.config_dir() / "auth.json"
        if stored.is_file():
            return PreflightCheck(name="credentials", ok=True, detail=f"login stored in {stored} ({STORED_LOGIN_NOTE})")
        return PreflightCheck(
            name="credentials",
            ok=False,
            detail=f"no {key_env} and no stored login",
            fix=f"export {key_env}=... (or run `codex login`)",
        )

    def config_dir(self) -> Path:
        given = self.option_values.get("codex_home") or os.environ.get("CODEX_HOME")
        return Path(given) if given else super().config_dir()

    def _seed_skip(self) -> frozenset[str]:
        return frozenset({"sessions", "archived_sessions", "log", "logs", "history.jsonl", "tmp", "shell_snapshots"})

    def _referenced_files(self, config_dir: Path) -> Iterable[str]:
        # config.toml may name an instructions file relative to the config dir.
        try:
            config = tomllib.loads((config_dir / "config.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError):
            return []
        found: list[str] = []
        stack: list[object] = [config]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key, value in item.items():
                    if isinstance(value, str) and key.endswith("_file") and not value.startswith(("/", "~")):
                        found.append(value)
                    else:
                        stack.append(value)
            elif isinstance(item, list):
                stack.extend(item)
        return found

    def _search_transcript(self, psid: str, config_dir: Path | None = None) -> Path | None:
        sessions = (config_dir or self.config_dir()) / "sessions"
        if not sessions.is_dir():
            return None
        for candidate in sessions.glob(f"*/*/*/rollout-*-{psid}.jsonl"):
            return candidate
        return None
