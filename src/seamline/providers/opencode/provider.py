"""``opencode``: the OpenCode agent through its HTTP server and event stream.

``opencode serve`` runs as a shared, reference-counted subprocess on a free port of
127.0.0.1 (see :mod:`seamline.providers.opencode.server`). A session is ``POST
/session`` (OpenCode mints the id); a turn is ``POST /session/{id}/prompt_async`` and
the server's events (``GET /event``) for that session, translated into seamline events,
until the session goes idle; abort is ``POST /session/{id}/abort``; fork is ``POST
/session/{id}/fork``; resume continues the stored OpenCode session by its id.

The model: with ``base_url=`` (or ``OPENAI_BASE_URL`` in the environment) seamline
writes ``OPENCODE_CONFIG_CONTENT`` with an OpenAI-compatible provider
(``@ai-sdk/openai-compatible``) pointing there, keyed by ``OPENAI_API_KEY`` (passed as
``{env:…}``, never written into the configuration); without it OpenCode uses its own
configuration, and ``--model provider/model`` picks the model.

Permissions: every session is created with ``ask`` rules for ``bash``, ``edit`` and
``webfetch``, so OpenCode asks and seamline's approval (the permission service, or
``--yes``) answers ``POST /permission/{id}/reply``.

The repository's own configuration is not loaded (``OPENCODE_DISABLE_PROJECT_CONFIG=1``;
the operator's ``project_config=true`` loads it): a workspace ``opencode.json`` or
``.opencode/`` declares MCP servers that ``opencode serve`` would start, and permissions it
would apply, before seamline is asked anything. OpenCode still imports a repository's
plugins with that set, so a session in a folder that has some is refused. The project's
``AGENTS.md`` (else ``CLAUDE.md``, else ``CONTEXT.md``), which OpenCode then leaves unread
too, goes with every prompt (``system``), read without following a link.

    OPENAI_BASE_URL=http://127.0.0.1:8123/v1 seamline run --provider opencode --yes --json "Hi"
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

from seamline.errors import (
    InvalidRequest,
    ProviderFailure,
    SeamlineError,
    TimeoutFailure,
)
from seamline.events import (
    Complete,
    Event,
    PermissionDecision,
    PermissionRequest,
    ToolCall,
)
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, Provider, ProviderSession
from seamline.providers.opencode.server import (
    OpenCodeServer,
    ServerChannel,
    acquire_server,
    plugins_despite_the_flag,
    project_instructions,
    release_server,
)
from seamline.providers.opencode.translator import OpenCodeTranslator
from seamline.providers.programs.envelope_launch import (
    ENVELOPE_OPTIONS,
    Enveloped,
    endpoints_from_env,
    enter_envelope,
    sandbox_mode,
)
from seamline.providers.programs.gateway_turns import routed_turn
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
from seamline.redact import redact_url
from seamline.sandbox.egress import endpoint_of
from seamline.sessions.records import SessionRecord
from seamline.tools.approval import ApprovalDecision
from seamline.tools.base import Tool, ToolClass
from seamline.transport.env import program_env

__all__ = ["INSTALL_HINT", "OpenCodeProvider", "OpenCodeTranslator", "opencode_config"]

INSTALL_HINT: Final = "bash scripts/system/45-acp-opencode.sh (or: npm install -g opencode-ai@1.18.33)"
PROVIDER_ID: Final = "seamline"
DEFAULT_MODEL: Final = "gpt-4o-mini"
ASKED: Final = ("bash", "edit", "webfetch")
_PERMISSION_CLASS: Final[dict[str, ToolClass]] = {
    "bash": "execute",
    "edit": "write",
    "write": "write",
    "webfetch": "network",
    "read": "read",
    "glob": "read",
    "grep": "read",
    "list": "read",
}


def opencode_config(*, base_url: str, model: str, api_key_env: str) -> dict[str, Any]:
    """The ``OPENCODE_CONFIG_CONTENT`` for an OpenAI-compatible endpoint at ``base_url``."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": f"{PROVIDER_ID}/{model}",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "seamline",
                "options": {"baseURL": base_url, "apiKey": f"{{env:{api_key_env}}}"},
                "models": {model: {"name": model}},
            }
        },
    }


class OpenCodeProvider(Provider):
    """OpenCode (``opencode serve``) as a seamline provider."""

    name = "opencode"
    # The gateway where seamline writes OpenCode's provider (base_url), else OpenCode's own.
    keys: ClassVar[KeyPath] = "gateway_or_environment"
    gateway_key_vars: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    stored_login: ClassVar[str | None] = "`opencode auth login`, kept in ~/.local/share/opencode/auth.json"
    description = "the OpenCode agent through `opencode serve` (HTTP + server-sent events)"
    options: ClassVar[Mapping[str, OptionSpec]] = {
        "executable": OptionSpec("path of the opencode program (default: found on PATH)", operator_only=True),
        "base_url": OptionSpec(
            "OpenAI-compatible base URL for the model (default: $OPENAI_BASE_URL)", kind="url", operator_only=True
        ),
        "api_key_env": OptionSpec(
            "environment variable holding the API key", default="OPENAI_API_KEY", operator_only=True
        ),
        "startup_timeout": OptionSpec("seconds `opencode serve` may take to come up", default="60", kind="number"),
        "turn_timeout": OptionSpec("seconds a turn may take before it is aborted", default="600", kind="number"),
        "request_timeout": OptionSpec("seconds one HTTP call to the server may take", default="30", kind="number"),
        "cancel_timeout": OptionSpec("seconds to wait for an aborted turn to settle", default="10", kind="number"),
        "max_retries": OptionSpec(
            "model API retries allowed in a turn (OpenCode retries 5xx for ever)", default="2", kind="count"
        ),
        **ENVELOPE_OPTIONS,
        **GATEWAY_OPTIONS,
        "grace": OptionSpec(
            "seconds between SIGINT, SIGTERM and SIGKILL when stopping the server", default="2", kind="number"
        ),
        "project_config": OptionSpec(
            "load the workspace's own OpenCode configuration (opencode.json, .opencode/: its MCP servers and "
            "plugins) and instructions; default false, so a repository runs nothing when the server starts",
            default="false",
            choices=("true", "false"),
            operator_only=True,
        ),
    }
    runs_own_tools = True
    tool_approval = "asked"  # edit, bash and webfetch ask; reads do not
    forking = "native"  # POST /session/{id}/fork
    session_ids = "provider"  # POST /session returns OpenCode's id
    resume_support = "native"  # sessions persist in OpenCode's data dir; resumed by id
    cost_source = "reported"  # step-finish parts carry OpenCode's cost (0 for an unpriced model: priced here)
    cost_scope = "step"
    result_cadence = "stream"

    # -- configuration ----------------------------------------------------------------------
    def executable(self) -> str | None:
        given = self.option_values.get("executable")
        if given:
            path = Path(given).expanduser()
            return str(path) if path.is_file() and os.access(path, os.X_OK) else None
        found = find_program("opencode")
        return found.path if found is not None else None

    def base_url(self) -> str | None:
        return self.option_values.get("base_url") or os.environ.get("OPENAI_BASE_URL") or None

    def model_ref(self) -> tuple[str, str] | None:
        """``(providerID, modelID)`` for the prompt, or None to let OpenCode's config choose."""
        if self.base_url():
            return PROVIDER_ID, self.model or DEFAULT_MODEL
        if self.model and "/" in self.model:
            provider, _, model = self.model.partition("/")
            return provider, model
        return None

    def _configured_model(self) -> str | None:
        # With our own OpenAI-compatible provider the model is ours to name; else OpenCode's config decides.
        return DEFAULT_MODEL if self.base_url() else None

    def _gateway_route(self) -> GatewayRoute | None:
        """How OpenCode reaches its API, where seamline writes its provider (``base_url``);
        None where OpenCode's own configuration chooses one."""
        if not self.base_url():
            return None
        return GatewayRoute(
            vendor="openai",
            key_vars=(self.option_values.get("api_key_env", "OPENAI_API_KEY"),),
            base_url_var="OPENAI_BASE_URL",
            default_base_url="https://api.openai.com/v1",
        )

    def _env_layer(self, model_url: str | None = None) -> dict[str, str | None]:
        """OpenCode's variables; its provider at ``model_url`` (the gateway's) where given,
        else at ``base_url``."""
        layer: dict[str, str | None] = {
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            # Unset, not "0", when the operator opts in: OpenCode reads any value as set.
            "OPENCODE_DISABLE_PROJECT_CONFIG": None if self._project_config() else "1",
        }
        base = self.base_url()
        if base:
            base = model_url or base
            model = self.model or DEFAULT_MODEL
            key_env = self.option_values.get("api_key_env", "OPENAI_API_KEY")
            config = opencode_config(base_url=base, model=model, api_key_env=key_env)
            layer["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)
        return layer

    def _project_config(self) -> bool:
        return self.option_values.get("project_config") == "true"

    def _project_instructions(self, session: ProviderSession) -> str | None:
        """The project's instructions, where OpenCode does not read them itself (``CLAUDE.md``
        left out where ``OPENCODE_DISABLE_CLAUDE_CODE[_PROMPT]`` says so, as OpenCode does)."""
        if self._project_config():
            return None
        flags = ("OPENCODE_DISABLE_CLAUDE_CODE", "OPENCODE_DISABLE_CLAUDE_CODE_PROMPT")
        claude_md = not any(os.environ.get(k, "").lower() in ("1", "true") for k in flags)
        return project_instructions((session.workspace or Path.cwd()).resolve(), claude_md=claude_md)

    def _refuse_project_plugins(self, workspace: Path) -> None:
        if self._project_config():
            return
        found = plugins_despite_the_flag(workspace)
        if found:
            raise InvalidRequest(
                "opencode: the repository's own plugins are refused unless the operator sets -o "
                f"project_config=true (OpenCode loads them even with OPENCODE_DISABLE_PROJECT_CONFIG): {found[0]}"
            )

    def _seconds(self, key: str) -> float:
        raw = self.option_values.get(key, "")
        try:
            value = float(raw)
        except ValueError:
            raise InvalidRequest(f"opencode: option {key}={raw!r} is not a number") from None
        if value < 0:
            raise InvalidRequest(f"opencode: option {key} must not be negative")
        return value

    # -- preflight --------------------------------------------------------------------------------
    async def _preflight(self) -> Sequence[PreflightCheck]:
        exe = self.executable()
        if exe is None:
            where = self.option_values.get("executable") or "opencode on PATH"
            return [PreflightCheck(name="executable", ok=False, detail=f"not found: {where}", fix=INSTALL_HINT)]
        checks = [PreflightCheck(name="executable", ok=True, detail=exe)]
        base = self.base_url()
        checks.append(
            PreflightCheck(
                name="model",
                ok=True,
                detail=f"OpenAI-compatible endpoint {redact_url(base)}" if base else "OpenCode's own configuration",
            )
        )
        return checks

    # -- sessions -----------------------------------------------------------------------------------
    async def _attach(self, session: ProviderSession) -> OpenCodeServer:
        try:
            return await self._started_server(session)
        except BaseException:
            await close_session_gateway(session)
            raise

    async def _started_server(self, session: ProviderSession) -> OpenCodeServer:
        exe = self.executable()
        if exe is None:
            given = self.option_values.get("executable")
            where = f"executable={given} is not a runnable file" if given else "opencode is not on PATH"
            raise InvalidRequest(f"opencode: {where}; install it with: {INSTALL_HINT}")
        workspace = session.workspace or Path.cwd()
        self._refuse_project_plugins(workspace)
        # The session's gateway, where seamline writes OpenCode's provider and has its key: the
        # provider's baseURL is the gateway's and its key a placeholder; the server is then this
        # session's alone (the gateway meters and budgets one session's requests), as inside
        # the envelope.
        gateway = await open_session_gateway(
            session, self._gateway_route(), self.option_values, rates=self.rates, model=self.model
        )
        layer = self._env_layer(gateway.base_url if gateway is not None else None)
        env = program_env(layer, gateway_env(session))
        endpoints = self._endpoints(env) if gateway is None else [("127.0.0.1", gateway.port)]
        key_extra: tuple[Any, ...] = (
            layer.get("OPENCODE_CONFIG_CONTENT"),
            env.get("HOME"),
            env.get("OPENCODE_DISABLE_PROJECT_CONFIG"),
        )
        if gateway is not None:
            key_extra += ("gateway", session.session_id)
        wrap = None
        mode = sandbox_mode(self.option_values)
        if mode != "none":
            key_extra += ("envelope", session.session_id)  # one server per session inside

            async def wrap(argv: list[str], port: int) -> tuple[list[str], dict[str, str], int]:
                envelope = await enter_envelope(
                    who=self.name,
                    mode=mode,
                    session_id=session.session_id,
                    state=session.state,
                    workspace=workspace,
                    argv=argv,
                    env=env,
                    keep_env=self._keeps_env,
                    endpoints=endpoints,
                    allow_hosts=self.option_values.get("allow_hosts"),
                    seed=self._seed_envelope,
                    expose=(port,),
                )
                session.state["opencode_envelope"] = envelope
                return envelope.argv, dict(envelope.env), await envelope.reach(port)

        try:
            server = await acquire_server(
                [exe],
                env=env,
                cwd=str(workspace),
                startup_timeout=self._seconds("startup_timeout"),
                key_extra=key_extra,
                wrap=wrap,
            )
        except BaseException:
            await self._close_envelope(session)
            raise
        session.state["opencode_server"] = server
        return server

    def _keeps_env(self, name: str) -> bool:
        """What ``opencode serve`` keeps inside the envelope: its own settings and the key."""
        return name.startswith(("OPENCODE_", "OPENAI_")) or name == self.option_values.get(
            "api_key_env", "OPENAI_API_KEY"
        )

    def _endpoints(self, env: Mapping[str, str]) -> list[tuple[str, int]]:
        base = self.base_url()
        return [endpoint_of(base)] if base else endpoints_from_env(env)

    def _seed_envelope(self, home: Path) -> None:
        """OpenCode keeps the packages it installs for its providers in its cache: the private
        home gets a copy of the host's, so a sandbox without the registry still starts."""
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opencode"
        if cache.is_dir() and not cache.is_symlink():
            shutil.copytree(cache, home / ".cache" / "opencode", symlinks=True, dirs_exist_ok=True)

    async def _close_envelope(self, session: ProviderSession) -> None:
        envelope = session.state.pop("opencode_envelope", None)
        if isinstance(envelope, Enveloped):
            await envelope.close()
            remove_runtime_dir(session.state)

    def _query(self, session: ProviderSession) -> dict[str, str]:
        return {"directory": str((session.workspace or Path.cwd()).resolve())}

    def _register(self, session: ProviderSession, server: OpenCodeServer, oc_id: str) -> None:
        server.channels[oc_id] = ServerChannel(oc_id)
        session.state["opencode_session_id"] = oc_id

    async def _open(self, session: ProviderSession) -> None:
        server = await self._attach(session)
        try:
            body = {"permission": [{"permission": p, "pattern": "*", "action": "ask"} for p in ASKED]}
            info = await server.call(
                "POST", "/session", body=body, params=self._query(session), timeout=self._seconds("request_timeout")
            )
            oc_id = info.get("id") if isinstance(info, dict) else None
            if not isinstance(oc_id, str) or not oc_id:
                raise ProviderFailure(f"opencode: POST /session gave no id: {str(info)[:200]}")
            self._register(session, server, oc_id)
            if not session.provider_session_id:
                session.capture_provider_session_id(oc_id)
            else:  # an emulated resume or fork: a new OpenCode session under the stored id
                session.resumed = "emulated"
        except BaseException:
            await self._detach(session)
            raise

    async def _resume(self, session: ProviderSession) -> None:
        server = await self._attach(session)
        oc_id = session.provider_session_id or ""
        try:
            await server.call(
                "GET", f"/session/{oc_id}", params=self._query(session), timeout=self._seconds("request_timeout")
            )
        except ProviderFailure:
            await self._detach(session)
            raise InvalidRequest(f"opencode: the server has no session {oc_id} to resume") from None
        self._register(session, server, oc_id)

    async def _fork(self, session: ProviderSession, parent: SessionRecord) -> None:
        server = await self._attach(session)
        source = str(session.state.get("fork_from_provider_session_id") or parent.provider_session_id)
        try:
            info = await server.call(
                "POST",
                f"/session/{source}/fork",
                body={},
                params=self._query(session),
                timeout=self._seconds("request_timeout"),
            )
            oc_id = info.get("id") if isinstance(info, dict) else None
            if not isinstance(oc_id, str) or not oc_id:
                raise ProviderFailure(f"opencode: fork gave no id: {str(info)[:200]}")
            self._register(session, server, oc_id)
            session.capture_provider_session_id(oc_id)
        except BaseException:
            await self._detach(session)
            raise

    async def _detach(self, session: ProviderSession) -> None:
        server = session.state.pop("opencode_server", None)
        oc_id = session.state.get("opencode_session_id")
        try:
            if isinstance(server, OpenCodeServer):
                if isinstance(oc_id, str):
                    server.channels.pop(oc_id, None)
                try:
                    await release_server(server, grace=self._seconds("grace"))
                finally:
                    await self._close_envelope(session)
        finally:
            await close_session_gateway(session)  # after the server that used it

    async def _close(self, session: ProviderSession) -> None:
        await self._detach(session)

    async def _abort(self, session: ProviderSession) -> None:
        server = session.state.get("opencode_server")
        oc_id = session.state.get("opencode_session_id")
        if isinstance(server, OpenCodeServer) and isinstance(oc_id, str) and server.alive:
            with contextlib.suppress(SeamlineError):
                await server.call("POST", f"/session/{oc_id}/abort", params=self._query(session), timeout=5.0)

    # -- the turn --------------------------------------------------------------------------------------
    def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        # OpenCode edits the workspace itself: the turn is one step of the edit journal.
        because = (
            "OpenCode's own configuration chooses its provider: it calls its API with the key in its "
            "environment (-o base_url=… or OPENAI_BASE_URL sends it through the gateway)"
        )
        gated = routed_turn(
            session,
            self._run_turn(session, prompt),
            self._gateway_route(),
            self.option_values,
            unrouted_because=because,
        )
        return journaled_turn(session, self.name, gated)

    async def _run_turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        server = session.state.get("opencode_server")
        oc_id = session.state.get("opencode_session_id")
        if not isinstance(server, OpenCodeServer) or not isinstance(oc_id, str):
            raise InvalidRequest("opencode: the session is not open (closed already?)")
        channel = server.channels[oc_id]
        while not channel.events.empty():
            channel.events.get_nowait()  # what came between turns belongs to no turn
        if server.failure is not None:
            raise server.failure
        translator = OpenCodeTranslator(max_retries=int(self._seconds("max_retries")))
        body: dict[str, Any] = {"parts": [{"type": "text", "text": prompt}]}
        ref = self.model_ref()
        if ref is not None:
            body["model"] = {"providerID": ref[0], "modelID": ref[1]}
        if instructions := self._project_instructions(session):
            body["system"] = instructions  # OpenCode appends it to this turn's system prompt
        query = self._query(session)
        timeout = self._seconds("request_timeout")
        store = session.store
        if store is not None:
            store.append_raw(session.session_id, session.turn, "in", "opencode", json.dumps(body))
        await server.call("POST", f"/session/{oc_id}/prompt_async", body=body, params=query, timeout=timeout)
        loop = asyncio.get_running_loop()
        turn_timeout = self._seconds("turn_timeout")
        deadline = loop.time() + turn_timeout
        cancel_deadline: float | None = None
        while True:
            if session.aborted and cancel_deadline is None:
                cancel_deadline = loop.time() + self._seconds("cancel_timeout")
            limit = deadline if cancel_deadline is None else min(deadline, cancel_deadline)
            try:
                item = await asyncio.wait_for(channel.events.get(), timeout=max(limit - loop.time(), 0.0))
            except TimeoutError:
                if session.aborted:
                    yield Complete(outcome="aborted", stop_reason="cancelled", text=translator.final_text())
                    return
                await self._abort(session)
                raise TimeoutFailure(f"opencode: the turn passed its timeout of {turn_timeout:g} s; aborted") from None
            if isinstance(item, SeamlineError):
                raise item
            if store is not None:
                store.append_raw(session.session_id, session.turn, "out", "opencode", json.dumps(item))
            if item.get("type") == "permission.asked":
                for event in await self._decide(session, server, item.get("properties") or {}):
                    yield event
                continue
            try:
                events = translator.feed(item)
            except SeamlineError as exc:
                if translator.retries_exceeded:
                    await self._abort(session)
                raise exc from None
            for event in events:
                yield event
            if translator.done:
                break
        envelope = session.state.get("opencode_envelope")
        if isinstance(envelope, Enveloped):
            for raw in [*envelope.refusals(), envelope.summary()]:
                yield raw
        for event in translator.finish(session=session):
            yield event

    async def _decide(self, session: ProviderSession, server: OpenCodeServer, props: dict[str, Any]) -> list[Event]:
        """Answer ``permission.asked`` by the session's approval."""
        request_id = str(props.get("id") or "")
        permission = str(props.get("permission") or "tool")
        tool_ref = props.get("tool") if isinstance(props.get("tool"), dict) else {}
        assert isinstance(tool_ref, dict)
        call_id = str(tool_ref.get("callID") or request_id)
        metadata = props.get("metadata") if isinstance(props.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        patterns = [str(p) for p in props.get("patterns") or []]
        arguments: dict[str, Any] = {**metadata, "patterns": patterns}
        if permission == "bash" and patterns and "command" not in arguments:
            arguments["command"] = patterns[0]
        tool = Tool(
            name=permission,
            description=permission,
            parameters={},
            function=_never_called,
            tool_class=_PERMISSION_CLASS.get(permission, "execute"),
            source="opencode",
            reaches_outside=permission == "webfetch",
        )
        if session.approval is None:
            decision = ApprovalDecision(False, "no approval policy for this session: refused")
        else:
            decision = await session.approval.decide(
                tool, ToolCall(call_id=call_id, name=permission, arguments=arguments)
            )
        events: list[Event] = list(decision.events)
        if not events:
            rid = f"perm-{call_id}"
            events = [
                PermissionRequest(request_id=rid, call_id=call_id, tool=permission, arguments=arguments),
                PermissionDecision(
                    request_id=rid,
                    decision="allow" if decision.allow else "deny",
                    scope=decision.scope,
                    reason=decision.reason,
                ),
            ]
        reply = ("always" if decision.scope == "always" else "once") if decision.allow else "reject"
        body: dict[str, Any] = {"reply": reply}
        if not decision.allow and decision.reason:
            body["message"] = decision.reason[:500]
        await server.call(
            "POST",
            f"/permission/{request_id}/reply",
            body=body,
            params=self._query(session),
            timeout=self._seconds("request_timeout"),
        )
        return events


async def _never_called(**_: Any) -> str:  # pragma: no cover - OpenCode runs its own tools
    raise ProviderFailure("an OpenCode tool is run by OpenCode, not by seamline")
