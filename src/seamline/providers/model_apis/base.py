"""What the model-API providers (``openai``, ``anthropic``) share: options, the key, the
SDK client, the retry loop around one model call, preflight and the trace identity.

A vendor module subclasses :class:`ModelAPIProvider` and supplies the request builder
(:meth:`_build`) and the stream decoder (:meth:`_stream`); everything that must behave
the same for every vendor (classified failures, retries as events, the key kept out of
every message) lives here once.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, cast

import msgspec

from seamline.errors import AuthFailure, InvalidRequest, SeamlineError, TransportFailure
from seamline.events import Error, Event, Raw, ReasoningDelta, TextDelta, ToolCall, Usage
from seamline.extras import install_hint
from seamline.gateway.sdk_binding import sending
from seamline.loop.messages import ModelRequest
from seamline.providers.base import BLOCK_ENV, OptionSpec, PreflightCheck, Provider, ProviderSession
from seamline.providers.model_apis.gated_client import (
    REPLAY_KEY,
    SessionBinding,
    gated_http_client,
    open_binding,
)
from seamline.providers.model_apis.retry import RetryPolicy, classify_failure, scrub
from seamline.providers.programs.model_gateway import GATEWAY_OPTIONS
from seamline.redact import url_host

_T = TypeVar("_T")

__all__ = ["COMMON_OPTIONS", "ModelAPIProvider", "StepState", "parse_arguments", "sha256_json"]

COMMON_OPTIONS: dict[str, OptionSpec] = {
    "base_url": OptionSpec(
        "endpoint URL (default: the vendor's, or the *_BASE_URL environment variable)", kind="url", operator_only=True
    ),
    "api_key_env": OptionSpec("name of the environment variable that holds the API key", operator_only=True),
    "temperature": OptionSpec("sampling temperature, e.g. 0.2", kind="number"),
    "max_tokens": OptionSpec("most tokens the model may write per call", kind="positive_count"),
    "reasoning_effort": OptionSpec("reasoning effort for models that take it", choices=("low", "medium", "high")),
    "timeout": OptionSpec(
        "seconds to wait for the endpoint (connect, and between streamed bytes)", default="120", kind="positive_number"
    ),
    "max_retries": OptionSpec("retries of a failed call before giving up (0: none)", default="3", kind="count"),
    "retry_base_delay": OptionSpec(
        "seconds before the first retry; doubles each time, jittered", default="0.5", kind="number"
    ),
    "retry_max_delay": OptionSpec("longest wait between retries, in seconds", default="30", kind="number"),
    "max_retry_after": OptionSpec(
        "longest Retry-After the provider waits for, in seconds", default="60", kind="number"
    ),
    **GATEWAY_OPTIONS,
    "gateway": OptionSpec(
        "the gateway's work in-process, under the SDK's HTTP client: the per-upstream limit of requests at "
        "once and an upstream's retry-after shared with every run of the process, cassettes (--record, "
        "--replay); a few microseconds a request (off: the SDK's plain client; no cassette)",
        default="on",
        choices=("on", "off"),
    ),
}


def _number(name: str, value: str | None, *, minimum: float = 0.0) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise InvalidRequest(f"option {name}={value!r}: expected a number") from None
    if number < minimum:
        raise InvalidRequest(f"option {name}={value!r}: must be at least {minimum:g}")
    return number


def parse_arguments(text: str) -> dict[str, Any]:
    """Tool-call arguments from the model's JSON; broken JSON is handed on, not dropped."""
    if not text.strip():
        return {}
    try:
        value: Any = json.loads(text)
    except ValueError:
        return {"_invalid_json": text}
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {"_value": value}


def sha256_json(value: object) -> str:
    """SHA-256 of ``value`` as canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(msgspec.json.encode(value, order="sorted")).hexdigest()


@dataclass(slots=True)
class StepState:
    """What one streamed model call told us besides its content."""

    model: str | None = None
    response_id: str | None = None
    stop_reason: str | None = None
    finished: bool = False
    usage: Usage | None = None
    final: dict[str, Any] = field(default_factory=dict[str, Any])


class ModelAPIProvider(Provider):
    """Base of the providers that call a model API through its vendor's SDK."""

    vendor: ClassVar[str] = ""
    sdk_module: ClassVar[str] = ""
    extra: ClassVar[str] = ""
    key_env: ClassVar[str] = ""
    base_url_env: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    runs_own_tools = False
    real = True

    def __init__(self, *, model: str | None = None, options: Mapping[str, str] | None = None) -> None:
        super().__init__(model=model, options=options)
        values = self.option_values
        self.temperature = _number("temperature", values.get("temperature"))
        max_tokens = _number("max_tokens", values.get("max_tokens"), minimum=1)
        self.max_tokens = int(max_tokens) if max_tokens is not None else None
        self.timeout = _number("timeout", values.get("timeout"), minimum=0.001) or 120.0
        self.reasoning_effort = values.get("reasoning_effort")
        self.retry = RetryPolicy(
            max_retries=int(_number("max_retries", values.get("max_retries")) or 0),
            base_delay=_number("retry_base_delay", values.get("retry_base_delay")) or 0.0,
            max_delay=_number("retry_max_delay", values.get("retry_max_delay")) or 0.0,
            max_retry_after=_number("max_retry_after", values.get("max_retry_after")) or 0.0,
        )
        self.last_identity: dict[str, Any] | None = None
        self._client: Any = None
        self._sessions = 0
        # Per session: set by abort() so that a retry wait ends at once.
        self._abort_events: dict[str, asyncio.Event] = {}
        # With the gateway on: each session's binding at the transport (its limit, its
        # cassette) and, for a replay with no key, its own client.
        self._bindings: dict[str, SessionBinding] = {}

    # -- configuration -------------------------------------------------------------------
    @property
    def api_key_env(self) -> str:
        return self.option_values.get("api_key_env") or self.key_env

    @property
    def base_url(self) -> str:
        """The endpoint: the ``base_url`` option, else ``*_BASE_URL``, else the vendor's."""
        url = self.option_values.get("base_url") or os.environ.get(self.base_url_env) or self.default_base_url
        return url.rstrip("/")

    @property
    def route(self) -> str:
        return self.routes[0]

    def _api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def _key_optional(self) -> bool:
        """Whether this endpoint may be used without a key (local servers)."""
        return False

    def _sdk(self) -> Any:
        try:
            return importlib.import_module(self.sdk_module)
        except ImportError:
            raise InvalidRequest(
                f"the {self.name} provider needs the {self.sdk_module} SDK: {install_hint(self.extra)}"
            ) from None

    def _make_client(self, sdk: Any, api_key: str, timeout: float, base_url: str, http_client: Any = None) -> Any:
        """The SDK's async client for ``base_url`` (the endpoint's or the gateway's) with the
        SDK's own retries off (the policy is ours); ``http_client``: the SDK's default one."""
        raise NotImplementedError

    @property
    def gated(self) -> bool:
        """Whether the requests take the gateway's in-process transport (``gateway=on``)."""
        return self.option_values.get("gateway", "on") != "off"

    def _new_client(self, timeout: float, *, gated: bool = False) -> Any:
        """The SDK's client with the key; ``gated``: on the gateway's transport."""
        sdk = self._sdk()
        key = self._api_key()
        if key is None:
            if not self._key_optional():
                raise AuthFailure(
                    f"no API key for {self.name}: set {self.api_key_env} "
                    f"(or name another variable with --provider-option api_key_env=NAME)"
                )
            key = "unused"  # local servers ignore it; the SDKs insist on one
        return self._gated_client(sdk, key, timeout) if gated else self._make_client(sdk, key, timeout, self.base_url)

    def _gated_client(self, sdk: Any, key: str, timeout: float) -> Any:
        http_client, _gate = gated_http_client(sdk, self.vendor)
        return self._make_client(sdk, key, timeout, self.base_url, http_client)

    def client(self) -> Any:
        """The vendor SDK's async client that the provider's sessions share, made on first
        use (the SDK is imported then)."""
        if self._client is None:
            self._client = self._new_client(self.timeout, gated=self.gated)
        return self._client

    def client_for(self, session_id: str) -> Any:
        """The SDK client a session's requests go through: the shared one, or the session's
        own (a replay with no key)."""
        bound = self._bindings.get(session_id)
        if bound is not None and bound.own_client is not None:
            return bound.own_client
        return self.client()

    # -- seam hooks ---------------------------------------------------------------------
    async def _open(self, session: ProviderSession) -> None:
        use = session.cassette
        if not self.gated:
            if use is not None:
                raise InvalidRequest(
                    f"cassette {use.path}: gateway=off: the SDK calls the API with its plain client, "
                    "so the requests cannot be recorded or replayed"
                )
            self.client()
            self._sessions += 1
            return
        key = self._api_key()
        own = None
        if key is None and use is not None and use.mode == "replay" and not self._key_optional():
            # Nothing leaves the process; the SDK insists on a key all the same.
            own = self._gated_client(self._sdk(), REPLAY_KEY, self.timeout)
        else:
            self.client()  # a missing key fails here, before a cassette file is opened
            self._sessions += 1
        binding = open_binding(session, self.option_values, vendor=self.vendor, key_var=self.api_key_env, key=key)
        self._bindings[session.session_id] = SessionBinding(binding, session, own_client=own)

    async def _abort(self, session: ProviderSession) -> None:
        event = self._abort_events.get(session.session_id)
        if event is not None:
            event.set()

    async def _close(self, session: ProviderSession) -> None:
        self._abort_events.pop(session.session_id, None)
        bound = self._bindings.pop(session.session_id, None)
        if bound is not None:
            await bound.close()
            if bound.own_client is not None:
                return
        # Sessions of one provider share its client (and its connection pool); the last
        # one to close closes it.
        self._sessions = max(self._sessions - 1, 0)
        if self._sessions:
            return
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection must not fail the close
                pass

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        return self._call(request)

    async def _call(self, request: ModelRequest) -> AsyncIterator[Event]:
        bound = self._bindings.get(request.session_id)
        client = self.client_for(request.session_id)
        params = self._build(request)
        identity = self.identity(request, params)
        self.last_identity = identity
        secret = self._api_key()
        abort = self._abort_events.setdefault(request.session_id, asyncio.Event())
        abort.clear()
        attempt = 0
        while True:
            attempt += 1
            state = StepState()
            streamed = False
            if bound is not None:
                bound.before_request()
            try:
                async for event in self._stream(client, params, request, state):
                    if not streamed and type(event) in (TextDelta, ReasoningDelta, ToolCall):
                        streamed = True
                    yield event
                if not state.finished:
                    raise self._cut(state)
            except Exception as exc:  # noqa: BLE001 - every failure leaves here classified
                failure = classify_failure(exc, vendor=self.vendor, secret=secret)
                if bound is not None:
                    failure = bound.classified(failure)
                delay = None if streamed else self.retry.delay(attempt, failure)
                if delay is None:
                    identity["attempts"] = attempt
                    identity["model_answered"] = state.model
                    yield Raw(source="identity", payload=identity)
                    if attempt > 1:
                        failure.message = f"{failure.message} (after {attempt} attempts)"
                        failure.args = (failure.message,)
                    raise failure from None
                yield Error(
                    kind=failure.kind,
                    message=f"{failure.message}; retry {attempt} of {self.retry.max_retries} in {delay:.2f}s",
                    retryable=True,
                    attempt=attempt,
                )
                try:
                    await asyncio.wait_for(abort.wait(), delay)
                except TimeoutError:
                    continue
                return  # aborted while waiting: the loop ends the turn as aborted
            identity["attempts"] = attempt
            identity["model_answered"] = state.model
            identity["response_id"] = state.response_id
            identity["stop_reason"] = state.stop_reason
            if state.final:
                yield Raw(source=f"{self.vendor}.response", payload=state.final)
            yield Raw(source="identity", payload=identity)
            if state.usage is not None:
                yield state.usage
            return

    def _cut(self, state: StepState) -> SeamlineError:
        return TransportFailure(f"{self.vendor} API stream ended before its final frame")

    # -- vendor hooks -------------------------------------------------------------------
    def _build(self, request: ModelRequest) -> dict[str, Any]:
        """The SDK call's keyword arguments for ``request`` (messages and tools converted)."""
        raise NotImplementedError

    def _stream(
        self, client: Any, params: dict[str, Any], request: ModelRequest, state: StepState
    ) -> AsyncIterator[Event]:
        """Make the streamed call (awaited through :meth:`_sent`) and decode it; set
        ``state.finished`` on the final frame."""
        raise NotImplementedError

    def _sent(self, request: ModelRequest, call: Awaitable[_T]) -> Awaitable[_T]:
        """``call`` (the SDK's request) as ``request``'s session's, for the gateway's transport."""
        bound = self._bindings.get(request.session_id)
        return call if bound is None else sending(bound.binding, call)

    def _prompt_part(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The part of the request that is the prompt (hashed, not listed in the identity)."""
        raise NotImplementedError

    def _tools_part(self, params: Mapping[str, Any]) -> list[Any]:
        return list(params.get("tools") or [])

    # -- identity -----------------------------------------------------------------------
    def identity(self, request: ModelRequest, params: Mapping[str, Any]) -> dict[str, Any]:
        """Who answered what, for the trace: provider, route, endpoint host, model as asked
        (and, once known, as answered), the parameters sent, and hashes of the prompt and of
        the tool schemas. Never holds the key."""
        prompt = self._prompt_part(params)
        tools = self._tools_part(params)
        hidden = set(prompt) | {"tools", "stream", "stream_options", "extra_headers", "extra_body"}
        sent = {k: v for k, v in params.items() if k not in hidden}
        sent.update(params.get("extra_body") or {})
        return {
            "provider": self.name,
            "route": self.route,
            "base_url_host": url_host(self.base_url),
            "model_requested": params.get("model"),
            "model_answered": None,
            "parameters": sent,
            "prompt_sha256": sha256_json(prompt),
            "tools_sha256": sha256_json(tools),
            "tool_count": len(tools),
            "step": request.step,
            "turn": request.turn,
        }

    # -- preflight ----------------------------------------------------------------------
    async def _preflight(self) -> Sequence[PreflightCheck]:
        checks: list[PreflightCheck] = []
        try:
            sdk = self._sdk()
        except InvalidRequest as exc:
            return [PreflightCheck("sdk", False, exc.message, fix=f"{install_hint(self.extra)}")]
        checks.append(PreflightCheck("sdk", True, f"{self.sdk_module} {getattr(sdk, '__version__', '?')}"))
        key = self._api_key()
        if key is None and not self._key_optional():
            checks.append(
                PreflightCheck(
                    "api_key", False, f"{self.api_key_env} is not set", fix=f"export {self.api_key_env}=<your key>"
                )
            )
            return checks
        detail = f"{self.api_key_env} is set" if key else f"no key ({self.api_key_env} unset; none needed here)"
        checks.append(PreflightCheck("api_key", True, detail))
        if os.environ.get(BLOCK_ENV, "") not in ("", "0"):
            checks.append(PreflightCheck("endpoint", False, f"not probed: {BLOCK_ENV} forbids real calls"))
            return checks
        checks += await self._probe_endpoint()
        return checks

    async def _probe_endpoint(self) -> list[PreflightCheck]:
        host = url_host(self.base_url)
        # Its own client with a short timeout: a probe must not wait minutes, nor close a live client.
        client = self._new_client(min(self.timeout, 10.0))
        try:
            models = await self._list_models(client)
        except Exception as exc:  # noqa: BLE001 - a failed probe is a failed check, not a crash
            failure = classify_failure(exc, vendor=self.vendor, secret=self._api_key())
            status = getattr(exc, "status_code", None)
            if status in (404, 405):
                return [PreflightCheck("endpoint", True, f"{host} answers; it does not list models")]
            fix = f"check {self.api_key_env}" if failure.kind == "auth" else "check base_url and that the server runs"
            return [PreflightCheck("endpoint", False, f"{host}: {failure.kind}: {failure.message}", fix=fix)]
        finally:
            try:
                await client.close()
            except Exception:  # noqa: BLE001
                pass
        checks = [PreflightCheck("endpoint", True, f"{host} reachable, {len(models)} models listed")]
        if self.model:
            if self.model in models:
                checks.append(PreflightCheck("model", True, f"{self.model} is listed"))
            else:
                sample = ", ".join(models[:8]) or "none"
                checks.append(
                    PreflightCheck(
                        "model",
                        False,
                        f"{self.model} is not listed by {host} (listed: {sample})",
                        fix="pick a listed --model",
                    )
                )
        return checks

    async def _list_models(self, client: Any) -> list[str]:
        ids: list[str] = []
        page = await client.models.list()
        async for model in page:
            ids.append(str(model.id))
        return ids

    def _scrub(self, text: str) -> str:
        return scrub(text, self._api_key())
