"""``acp``: any agent that speaks the Agent Client Protocol, over JSON-RPC on stdio.

The agent is a long-lived subprocess (``--provider-option command="claude-agent-acp"``)
shared by every session opened with the same command and shut down when the last one
closes. A session is ``session/new`` (the agent mints its id); resume is
``session/load`` where the agent offers it (``session/resume`` otherwise, else an
emulated resume with the history as context); a turn is ``session/prompt`` whose
``session/update`` notifications become seamline events; abort is ``session/cancel``
and the turn ends with outcome ``aborted``.

Permission requests from the agent are decided by the session's approval (the
permission service, or ``--yes``); without one they are refused. The client file-system
methods are offered, and answered only inside the session's workspace.

    seamline run --provider acp -o command=claude-agent-acp --json "What is in notes.txt?"
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

import msgspec

from seamline.errors import (
    AuthFailure,
    InvalidRequest,
    ProviderFailure,
    QuotaExceeded,
    SandboxViolation,
    SeamlineError,
    TimeoutFailure,
    TransportFailure,
)
from seamline.events import (
    Event,
    PermissionDecision,
    PermissionRequest,
    ToolCall,
)
from seamline.providers.acp.agent_process import (
    AcpAgent,
    AcpChannel,
    acquire_agent,
    merge_tool_call,
    release_agent,
    tool_arguments,
    tool_name,
)
from seamline.providers.acp.gateway import (
    GATEWAY_VENDOR_OPTION,
    VENDOR_ROUTES,
    acp_gated_turn,
    acp_route,
    other_vendors_keys,
)
from seamline.providers.acp.translator import PERMISSION_ANNOUNCE, AcpTranslator
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, Provider, ProviderSession
from seamline.providers.programs.agent_settings import (
    is_claude_agent,
    mode_to_reset,
    parse_setting_sources,
    session_meta,
)
from seamline.providers.programs.envelope_launch import (
    ENVELOPE_OPTIONS,
    Enveloped,
    endpoints_from_env,
    enter_envelope,
    sandbox_mode,
)
from seamline.providers.programs.journal import journaled_turn
from seamline.providers.programs.lookup import find_program
from seamline.providers.programs.model_gateway import (
    GATEWAY_OPTIONS,
    GatewayRoute,
    close_session_gateway,
    gateway_env,
    open_session_gateway,
)
from seamline.providers.programs.runtime_dir import remove_runtime_dir
from seamline.tools.approval import ApprovalDecision
from seamline.tools.base import Tool, ToolClass
from seamline.transport.env import compose_env, program_env
from seamline.transport.jsonrpc import JsonRpcError

__all__ = ["INSTALL_HINT", "AcpProvider", "AcpTranslator"]

# Variables an ACP agent keeps inside the envelope (its vendor's key, endpoint and settings).
_AGENT_ENV: Final = ("ANTHROPIC_", "CLAUDE_CODE_", "OPENAI_", "GEMINI_", "GOOGLE_", "OPENCODE_", "DISABLE_")

INSTALL_HINT: Final = (
    "bash scripts/system/45-acp-opencode.sh (or: npm install -g @zed-industries/claude-agent-acp@0.23.1)"
)

# Session calls an agent may refuse until the client authenticates.
_SESSION_METHODS: Final = frozenset({"session/new", "session/load", "session/resume"})
# Where an API key for an auth method's declared provider usually lives.
_KEY_ENV: Final[dict[str, list[str]]] = {
    "google": ["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    "anthropic": ["ANTHROPIC_API_KEY"],
    "openai": ["OPENAI_API_KEY"],
}

# ACP tool kinds, as tool classes for the permission rules.
_KIND_CLASS: Final[dict[str, ToolClass]] = {
    "read": "read",
    "search": "read",
    "think": "read",
    "edit": "write",
    "delete": "write",
    "move": "write",
    "execute": "execute",
    "fetch": "network",
}


class AcpProvider(Provider):
    """An Agent Client Protocol agent as a seamline provider."""

    name = "acp"
    # The gateway where the agent's vendor is known (see seamline.providers.acp.gateway).
    keys: ClassVar[KeyPath] = "gateway_or_environment"
    gateway_key_vars: ClassVar[tuple[str, ...]] = tuple(v for r in VENDOR_ROUTES.values() for v in r.key_vars)
    stored_login: ClassVar[str | None] = (
        "the agent's own, e.g. claude-agent-acp's `claude /login`, kept in ~/.claude/.credentials.json"
    )
    description = "any Agent Client Protocol agent (JSON-RPC on stdio), e.g. claude-agent-acp"
    options: ClassVar[Mapping[str, OptionSpec]] = {
        "command": OptionSpec("the agent's command line, e.g. 'claude-agent-acp' (required)", operator_only=True),
        "turn_timeout": OptionSpec(
            "seconds a turn may take before it is cancelled", default="600", kind="positive_number"
        ),
        "request_timeout": OptionSpec(
            "seconds initialize / session/new / session/load may take", default="60", kind="positive_number"
        ),
        "cancel_timeout": OptionSpec(
            "seconds to wait for the agent to settle a cancelled turn", default="10", kind="positive_number"
        ),
        "grace": OptionSpec(
            "seconds between SIGINT, SIGTERM and SIGKILL when ending the agent", default="2", kind="positive_number"
        ),
        "auth_method": OptionSpec("the auth method to use when the agent asks (default: its API-key method)"),
        "api_key_env": OptionSpec(
            "environment variable whose key `authenticate` passes, where the method takes one", operator_only=True
        ),
        "setting_sources": OptionSpec(
            "settings layers claude-agent-acp loads (user, project, local; comma-separated); default none, "
            "so a repository's or the agent's own settings never decide what seamline is asked",
            operator_only=True,
        ),
        **ENVELOPE_OPTIONS,
        **GATEWAY_OPTIONS,
        "gateway_vendor": GATEWAY_VENDOR_OPTION,
    }
    runs_own_tools = True
    tool_approval = "asked"  # session/request_permission: what the agent's own rules leave to us
    forking = "emulated"  # session/fork is unstable in ACP; the base copies the history
    session_ids = "provider"  # session/new returns the agent's id
    resume_support = "native"  # session/load (or session/resume); emulated when the agent offers neither
    cost_source = "reported"  # usage_update carries the agent's own cost, where it gives one
    cost_scope = "turn"
    result_cadence = "stream"
    mcp_transports = ()

    # -- helpers --------------------------------------------------------------------------
    def argv(self) -> list[str]:
        """The agent's command line, from ``command=``."""
        command = self.option_values.get("command", "").strip()
        if not command:
            raise InvalidRequest(
                "provider acp needs the agent's command: --provider-option command='claude-agent-acp'"
                f" (install: {INSTALL_HINT})"
            )
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise InvalidRequest(f"acp: cannot parse command={command!r}: {exc}") from None
        if argv and os.sep not in argv[0]:
            # PATH first, then the agents the project's set-up installed under .tools.
            found = find_program(argv[0])
            if found is not None:
                argv[0] = found.path
        return argv

    def _seconds(self, key: str) -> float:
        raw = self.option_values.get(key, "")
        try:
            value = float(raw)
        except ValueError:
            raise InvalidRequest(f"acp: option {key}={raw!r} is not a number of seconds") from None
        if value <= 0:
            raise InvalidRequest(f"acp: option {key} must be positive")
        return value

    # -- preflight ----------------------------------------------------------------------------
    async def _preflight(self) -> Sequence[PreflightCheck]:
        if not self.option_values.get("command", "").strip():
            detail = "no agent command: pass --provider-option command='claude-agent-acp' (or another ACP agent)"
            return [PreflightCheck(name="command", ok=False, detail=detail, fix=INSTALL_HINT)]
        try:
            argv = self.argv()
        except InvalidRequest as exc:
            return [PreflightCheck(name="command", ok=False, detail=exc.message)]
        exe = argv[0]
        found = exe if os.access(exe, os.X_OK) and os.path.isfile(exe) else shutil.which(exe)
        if found is None:
            return [PreflightCheck(name="executable", ok=False, detail=f"not found: {exe}", fix=INSTALL_HINT)]
        return [PreflightCheck(name="executable", ok=True, detail=found), await self._handshake(argv)]

    async def _handshake(self, argv: list[str]) -> PreflightCheck:
        """Start the agent, ``initialize`` it, and end it: does it speak ACP?"""
        agent = AcpAgent(("preflight",), argv)
        try:
            await agent.start(
                env=compose_env(None), cwd=Path.cwd(), timeout=min(self._seconds("request_timeout"), 30.0)
            )
        except SeamlineError as exc:
            return PreflightCheck(name="initialize", ok=False, detail=f"{exc.kind}: {exc.message}")
        finally:
            await agent.close(grace=1.0)
        info = agent.agent_info
        who = f"{info.get('name', 'agent')} {info.get('version', '')}".strip()
        load = "session/load" if agent.can_load else "no session/load"
        return PreflightCheck(
            name="initialize", ok=True, detail=f"{who}, ACP protocol {agent.protocol_version}, {load}"
        )

    # -- sessions -------------------------------------------------------------------------------
    def _gateway_route(self) -> GatewayRoute | None:
        return acp_route(self.argv(), self.option_values)

    async def _attach(self, session: ProviderSession) -> AcpAgent:
        try:
            return await self._started_agent(session)
        except BaseException:
            await close_session_gateway(session)
            raise

    async def _started_agent(self, session: ProviderSession) -> AcpAgent:
        workspace = session.workspace or Path.cwd()
        argv = self.argv()
        # The session's gateway (where the agent's vendor is known and seamline has its key):
        # the agent gets its URL and a placeholder, and is this session's alone, since the
        # gateway meters and budgets one session's requests.
        gateway = await open_session_gateway(
            session, self._gateway_route(), self.option_values, rates=self.rates, model=self.model
        )
        env = program_env(gateway_env(session))
        key_extra: tuple[Any, ...] = () if gateway is None else ("gateway", session.session_id)
        endpoints = endpoints_from_env(env) if gateway is None else [("127.0.0.1", gateway.port)]
        # Through the gateway, the agent needs no other vendor's key inside the envelope.
        others = other_vendors_keys(gateway.route) if gateway is not None else frozenset[str]()

        def keeps(name: str) -> bool:
            return self._keeps_env(name) and name not in others

        mode = sandbox_mode(self.option_values)
        if mode != "none":
            # One agent per session inside the envelope: its own home, workspace and egress.
            envelope = await enter_envelope(
                who=self.name,
                mode=mode,
                session_id=session.session_id,
                state=session.state,
                workspace=workspace,
                argv=argv,
                env=env,
                keep_env=keeps,
                endpoints=endpoints,
                allow_hosts=self.option_values.get("allow_hosts"),
                seed=lambda home: None,
            )
            session.state["acp_envelope"] = envelope
            argv, env, key_extra = envelope.argv, envelope.env, ("envelope", session.session_id)
        try:
            agent = await acquire_agent(
                argv, env=env, cwd=workspace, timeout=self._seconds("request_timeout"), key_extra=key_extra
            )
        except BaseException:
            await self._close_envelope(session)
            raise
        # An agent that asks for its key over ACP (``authenticate``) gets the placeholder too.
        agent.key_layer = gateway_env(session)
        session.state["acp_agent"] = agent
        return agent

    def _keeps_env(self, name: str) -> bool:
        """What an ACP agent keeps inside the envelope: the vendors' variables and ``api_key_env``."""
        return name.startswith(_AGENT_ENV) or name in ("IS_SANDBOX", self.option_values.get("api_key_env"))

    async def _close_envelope(self, session: ProviderSession) -> None:
        envelope = session.state.pop("acp_envelope", None)
        if isinstance(envelope, Enveloped):
            await envelope.close()
            remove_runtime_dir(session.state)

    def _egress_events(self, session: ProviderSession) -> list[Event]:
        # The connections refused since the last turn, then the turn's envelope report.
        envelope = session.state.get("acp_envelope")
        return [*envelope.refusals(), envelope.summary()] if isinstance(envelope, Enveloped) else []

    def _channel(self, session: ProviderSession, agent: AcpAgent, wire_id: str) -> AcpChannel:
        channel = AcpChannel(wire_id=wire_id, workspace=(session.workspace or Path.cwd()).resolve())
        store = session.store
        if store is not None:

            def raw(direction: str, message: dict[str, Any]) -> None:
                # What the agent sent is the provider's output ("out"); what we sent is input.
                side: Literal["in", "out"] = "out" if direction == "in" else "in"
                store.append_raw(session.session_id, session.turn, side, "acp", _encode(message))

            channel.raw = raw
        agent.channels[wire_id] = channel
        session.state["acp_channel"] = channel
        session.state["acp_session_id"] = wire_id
        return channel

    async def _open(self, session: ProviderSession) -> None:
        agent = await self._attach(session)
        try:
            await self._new_session(session, agent)
        except BaseException:
            await self._detach(session)
            raise

    async def _new_session(self, session: ProviderSession, agent: AcpAgent) -> None:
        cwd = str((session.workspace or Path.cwd()).resolve())
        result = await self._call(agent, "session/new", self._session_params(session, agent, {"cwd": cwd}))
        wire_id = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(wire_id, str) or not wire_id:
            raise ProviderFailure(f"acp: session/new gave no sessionId: {str(result)[:200]}")
        self._channel(session, agent, wire_id)
        if not session.provider_session_id:
            session.capture_provider_session_id(wire_id)
        await self._asking_mode(agent, wire_id, result)
        await self._choose_model(session, agent, wire_id, result)

    def _session_params(self, session: ProviderSession, agent: AcpAgent, params: dict[str, Any]) -> dict[str, Any]:
        """``session/new``/``load``/``resume`` parameters; claude-agent-acp is told to load no
        settings layer but those the operator names (see :mod:`seamline.providers.programs.agent_settings`)."""
        params = {**params, "mcpServers": []}
        if is_claude_agent(agent.agent_info):
            try:
                sources = parse_setting_sources(self.option_values.get("setting_sources"))
            except ValueError as exc:
                raise InvalidRequest(f"acp: {exc}") from None
            params["_meta"] = session_meta((session.workspace or Path.cwd()).resolve(), sources)
        return params

    async def _asking_mode(self, agent: AcpAgent, wire_id: str, result: Any) -> None:
        """Set a session whose mode runs calls unasked (its settings chose it) back to
        ``default``; refuse the session where the agent will not."""
        current = mode_to_reset(result)
        if current is None:
            return
        try:
            await agent.request(
                "session/set_mode",
                {"sessionId": wire_id, "modeId": "default"},
                timeout=self._seconds("request_timeout"),
            )
        except (JsonRpcError, SeamlineError) as exc:
            raise SandboxViolation(
                f"acp: the agent's settings put the session in mode {current!r}, which runs tools without asking, "
                f"and it would not go back to 'default' ({exc}); nothing was run"
            ) from None

    async def _choose_model(self, session: ProviderSession, agent: AcpAgent, wire_id: str, result: Any) -> None:
        models = result.get("models") if isinstance(result, dict) else None
        if not self.model or not isinstance(models, dict):
            return
        available = [m.get("modelId") for m in models.get("availableModels") or [] if isinstance(m, dict)]
        if self.model == models.get("currentModelId"):
            return
        if self.model not in available:
            raise InvalidRequest(
                f"acp: the agent offers no model {self.model!r}; it offers {', '.join(map(str, available))}"
            )
        await self._call(agent, "session/set_model", {"sessionId": wire_id, "modelId": self.model})

    async def _resume(self, session: ProviderSession) -> None:
        agent = await self._attach(session)
        psid = session.provider_session_id or ""
        cwd = str((session.workspace or Path.cwd()).resolve())
        params = self._session_params(session, agent, {"sessionId": psid, "cwd": cwd})
        try:
            if agent.can_load or agent.session_capability("resume"):
                channel = self._channel(session, agent, psid)
                method = "session/load" if agent.can_load else "session/resume"
                try:
                    loaded = await self._call(agent, method, params)
                except ProviderFailure as exc:
                    # OpenCode answers an unknown id with a bare "service failure": ask its list.
                    if type(exc) is ProviderFailure and not exc.retryable and not await self._knows(agent, psid, cwd):
                        raise InvalidRequest(f"acp: the agent has no session {psid} ({exc.message})") from None
                    raise
                # session/load replays the history as updates; that is the past, not this turn.
                while not channel.updates.empty():
                    channel.updates.get_nowait()
                await self._asking_mode(agent, psid, loaded)
            else:
                session.resumed = "emulated"  # the history travels as context in the prompt
                await self._new_session(session, agent)
        except BaseException:
            await self._detach(session)
            raise

    async def _knows(self, agent: AcpAgent, wire_id: str, cwd: str) -> bool:
        """Whether ``session/list`` (where offered) lists ``wire_id``; True when it cannot tell."""
        if not agent.session_capability("list"):
            return True
        params: dict[str, Any] = {"cwd": cwd}
        for _ in range(50):  # pages
            try:
                page = await agent.request("session/list", params, timeout=self._seconds("request_timeout"))
            except SeamlineError:
                return True
            page = page if isinstance(page, dict) else {}
            listed = page.get("sessions")
            sessions: list[Any] = listed if isinstance(listed, list) else []
            if any(isinstance(x, dict) and x.get("sessionId") == wire_id for x in sessions):
                return True
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return False
            params = {"cwd": cwd, "cursor": cursor}
        return True

    async def _call(self, agent: AcpAgent, method: str, params: dict[str, Any]) -> Any:
        try:
            return await agent.request(method, params, timeout=self._seconds("request_timeout"))
        except JsonRpcError as exc:
            failure = _classify(exc, f"acp: {method} failed")
            if exc.code != -32000 or method not in _SESSION_METHODS or not await self._authenticate(agent):
                raise failure from None
        # The agent asked for authentication (ACP's -32000); it has it now: once more.
        try:
            return await agent.request(method, params, timeout=self._seconds("request_timeout"))
        except JsonRpcError as exc:
            raise _classify(exc, f"acp: {method} failed") from None

    async def _authenticate(self, agent: AcpAgent) -> bool:
        """``authenticate`` with one of the methods ``initialize`` listed; False when none fits.

        ``auth_method=`` names it; else the first API-key method (Gemini's ``gemini-api-key``).
        A method that declares ``_meta["api-key"]`` is given the key from ``api_key_env=``
        (default: the provider's usual variable), which goes to the agent only, never to a log.
        """
        if agent.authenticated or not agent.auth_methods:
            return False
        wanted = self.option_values.get("auth_method", "").strip()
        ids = [str(m.get("id")) for m in agent.auth_methods if isinstance(m.get("id"), str)]
        chosen = wanted if wanted in ids else next((i for i in ids if "api-key" in i or "api_key" in i), None)
        if chosen is None:
            return False
        method = next(m for m in agent.auth_methods if m.get("id") == chosen)
        params: dict[str, Any] = {"methodId": chosen}
        meta = method.get("_meta")
        declared = meta.get("api-key") if isinstance(meta, dict) else None
        if declared is not None:
            provider = str(declared.get("provider", "")) if isinstance(declared, dict) else ""
            names = [self.option_values["api_key_env"]] if self.option_values.get("api_key_env") else []
            names += _KEY_ENV.get(provider, [])
            # The variables as the agent has them: the gateway's placeholder where it has one.
            known = compose_env(None, agent.key_layer)
            key = next((known[n] for n in names if known.get(n)), None)
            if key:
                params["_meta"] = {"api-key": key}
        try:
            await agent.request("authenticate", params, timeout=self._seconds("request_timeout"))
        except JsonRpcError as exc:
            raise AuthFailure(f"acp: authenticate with {chosen} failed: {exc.rpc_message}") from None
        agent.authenticated = True
        return True

    async def _detach(self, session: ProviderSession) -> None:
        agent = session.state.pop("acp_agent", None)
        channel = session.state.pop("acp_channel", None)
        if not isinstance(agent, AcpAgent):
            await close_session_gateway(session)
            return
        if isinstance(channel, AcpChannel):
            agent.channels.pop(channel.wire_id, None)
        try:
            await release_agent(agent, grace=self._seconds("grace"))
        finally:
            try:
                await self._close_envelope(session)
            finally:
                await close_session_gateway(session)

    async def _close(self, session: ProviderSession) -> None:
        agent = session.state.get("acp_agent")
        wire_id = session.state.get("acp_session_id")
        if isinstance(agent, AcpAgent) and agent.alive and agent.session_capability("close") and wire_id:
            with contextlib.suppress(SeamlineError):
                await agent.request("session/close", {"sessionId": wire_id}, timeout=5.0)
        await self._detach(session)

    async def _abort(self, session: ProviderSession) -> None:
        agent = session.state.get("acp_agent")
        channel = session.state.get("acp_channel")
        if not isinstance(agent, AcpAgent) or not isinstance(channel, AcpChannel) or not agent.alive:
            return
        agent.cancel_permissions(channel)
        with contextlib.suppress(SeamlineError):
            await agent.notify("session/cancel", {"sessionId": channel.wire_id})

    # -- the turn ---------------------------------------------------------------------------------
    def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        # The agent edits the workspace with its own tools too: the turn is one journal step.
        gated = acp_gated_turn(
            session,
            self._run_turn(session, prompt),
            self._gateway_route(),
            self.option_values,
            Path(self.argv()[0]).name,
        )
        return journaled_turn(session, self.name, gated)

    async def _run_turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        agent = session.state.get("acp_agent")
        channel = session.state.get("acp_channel")
        if not isinstance(agent, AcpAgent) or not isinstance(channel, AcpChannel):
            raise InvalidRequest("acp: the session is not open (closed already?)")
        if not agent.alive:
            assert agent.rpc is not None
            raise agent.rpc.failure or ProviderFailure("acp: the agent is not running")
        while not channel.updates.empty():
            channel.updates.get_nowait()  # what came between turns (command lists, …) belongs to no turn
        channel.tool_calls.clear()
        channel.first_titles.clear()
        translator = AcpTranslator()
        channel.permission = lambda params: self._decide(session, channel, translator, params)
        turn_timeout = self._seconds("turn_timeout")
        prompt_task = asyncio.ensure_future(
            agent.request(
                "session/prompt",
                {"sessionId": channel.wire_id, "prompt": [{"type": "text", "text": prompt}]},
                timeout=turn_timeout,
            )
        )
        loop = asyncio.get_running_loop()
        cancel_deadline: float | None = None
        try:
            while True:
                if session.aborted and cancel_deadline is None:
                    cancel_deadline = loop.time() + self._seconds("cancel_timeout")
                getter = asyncio.ensure_future(channel.updates.get())
                wait = None if cancel_deadline is None else max(cancel_deadline - loop.time(), 0.0)
                done, _ = await asyncio.wait({getter, prompt_task}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    for event in translator.feed(getter.result()):
                        yield event
                    continue
                getter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getter
                if getter.done() and not getter.cancelled():
                    for event in translator.feed(getter.result()):
                        yield event
                if prompt_task in done:
                    break
                # The agent did not settle the cancelled turn in time: it is aborted all the same.
                for event in translator.aborted():
                    yield event
                return
            while not channel.updates.empty():
                for event in translator.feed(channel.updates.get_nowait()):
                    yield event
            for event in self._egress_events(session):
                yield event
            try:
                result = prompt_task.result()
            except TimeoutFailure:
                with contextlib.suppress(SeamlineError):
                    await agent.notify("session/cancel", {"sessionId": channel.wire_id})
                raise TimeoutFailure(f"acp: the turn passed its timeout of {turn_timeout:g} s; cancelled") from None
            except JsonRpcError as exc:
                if session.aborted:
                    for event in translator.aborted():
                        yield event
                    return
                raise _classify(exc, "acp: session/prompt failed") from None
            for event in translator.finish(result, session=session):
                yield event
        finally:
            channel.permission = None
            if not prompt_task.done():
                # The turn was ended from outside (its budget spent at the gateway, the caller
                # gone): the agent is told to stop its turn too.
                agent.cancel_permissions(channel)
                if agent.alive:
                    with contextlib.suppress(SeamlineError):
                        await agent.notify("session/cancel", {"sessionId": channel.wire_id})
                prompt_task.cancel()
                with contextlib.suppress(BaseException):
                    await prompt_task

    async def _decide(
        self, session: ProviderSession, channel: AcpChannel, translator: AcpTranslator, params: dict[str, Any]
    ) -> dict[str, Any]:
        """Answer ``session/request_permission`` by the session's approval."""
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
        assert isinstance(call, dict)
        call_id = str(call.get("toolCallId") or f"acp-perm-{len(translator.calls)}")
        call = {**call, "toolCallId": call_id}
        # The updates that came before this request may still wait in the queue (they carry
        # the tool's real name, e.g. Bash): name the call from everything the agent said so
        # far, and announce it behind those updates, in the order the agent sent them.
        known: dict[str, Any] = {}
        merge_tool_call(known, channel.tool_calls.get(call_id, {}))
        merge_tool_call(known, call)
        tool_call = translator.calls.get(call_id)
        name = tool_call.name if tool_call else tool_name(known, first_title=channel.first_titles.get(call_id))
        arguments = tool_call.arguments if tool_call else tool_arguments(known, name)
        events: list[Event] = []
        kind = str(call.get("kind") or "other")
        tool = Tool(
            name=name,
            description=str(call.get("title") or name),
            parameters={},
            function=_never_called,
            tool_class=_KIND_CLASS.get(kind, "execute"),
            source="acp",
            reaches_outside=kind == "fetch",
        )
        if session.aborted:
            return {"outcome": {"outcome": "cancelled"}}
        if session.approval is None:
            reason = "no approval policy for this session: refused (run with --yes or a permission rule)"
            decision = ApprovalDecision(False, reason)
        else:
            decision = await session.approval.decide(tool, ToolCall(call_id=call_id, name=name, arguments=arguments))
        request_id = f"perm-{call_id}"
        if decision.events:
            events.extend(decision.events)
        else:
            events.append(
                PermissionRequest(
                    request_id=request_id, call_id=call_id, tool=name, arguments=arguments, reason=decision.reason
                )
            )
            events.append(
                PermissionDecision(
                    request_id=request_id,
                    decision="allow" if decision.allow else "deny",
                    scope=decision.scope,
                    reason=decision.reason,
                )
            )
        channel.updates.put_nowait({"sessionUpdate": PERMISSION_ANNOUNCE, "toolCall": call})
        channel.updates.put_nowait(events)
        chosen = _pick_option(options, allow=decision.allow)
        if chosen is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": chosen}}


async def _never_called(**_: Any) -> str:  # pragma: no cover - the agent runs its own tools
    raise ProviderFailure("an ACP agent's tool is run by the agent, not by seamline")


def _pick_option(options: list[dict[str, Any]], *, allow: bool) -> str | None:
    # Once, even for an "always" answer (seamline keeps that rule itself): the agent's own
    # "always" would stop it asking, and claude-agent-acp's first "always" option for
    # ExitPlanMode switches the session to bypassPermissions.
    order = ("allow_once",) if allow else ("reject_once", "reject_always")
    for kind in order:
        for option in options:
            if option.get("kind") == kind and isinstance(option.get("optionId"), str):
                return str(option["optionId"])
    return None


_OVERLOADED: Final = re.compile(r"\b(529|503)\b|overloaded|unavailable")
_RATE_LIMIT: Final = re.compile(r"\b429\b|rate.?limit|quota|resource_exhausted")
# A stream that broke off: Node's fetch says "terminated", OpenCode "Connection reset by server"
# or "Cannot connect to API: The socket connection was closed unexpectedly" (it varies by run).
_CUT: Final = re.compile(
    r"\bterminated\b|connection reset|econnreset|socket hang up|fetch failed|premature close"
    r"|cannot connect|closed unexpectedly|econnrefused"
)
# A session the agent does not know: ACP's "Resource not found" (-32002), Gemini's own words.
_UNKNOWN_SESSION: Final = re.compile(r"resource not found|no previous sessions|session not found|unknown session")


def _classify(exc: JsonRpcError, what: str) -> SeamlineError:
    text = f"{exc.rpc_message} {exc.data if exc.data is not None else ''}".lower()
    details = exc.data.get("details") if isinstance(exc.data, dict) else None
    # Gemini says only "Internal error" and puts the cause in data.details.
    message = f"{what}: {exc.message}" + (f": {str(details)[:300]}" if isinstance(details, str) and details else "")
    if exc.code == -32000 or any(
        k in text for k in ("401", "authentication", "api key", "unauthorized", "auth_required")
    ):
        return AuthFailure(message)
    if exc.code in (503, 529) or _OVERLOADED.search(text):
        return ProviderFailure(message, retryable=True)  # overloaded: the provider's, and it passes
    if exc.code == 429 or _RATE_LIMIT.search(text):
        return QuotaExceeded(message)
    if _CUT.search(text):
        return TransportFailure(message)
    if exc.code == -32002 or _UNKNOWN_SESSION.search(text):
        return InvalidRequest(message)
    if exc.code in (-32600, -32601, -32602):
        return InvalidRequest(message)
    return ProviderFailure(message)


def _encode(message: object) -> str:
    return msgspec.json.encode(message).decode()
