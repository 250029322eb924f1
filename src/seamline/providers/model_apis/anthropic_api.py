"""The ``anthropic`` provider: the Messages API through the official ``anthropic`` SDK.

    seamline run --provider anthropic --model claude-sonnet-4-6 "Summarise README.md"

The key comes from ``ANTHROPIC_API_KEY`` (or the variable named by ``api_key_env``), the
endpoint from ``base_url``, else ``ANTHROPIC_BASE_URL``, else the official API; a base URL
given with a trailing ``/v1`` works too; the requests take the gateway's in-process
transport unless ``gateway=off`` (:mod:`seamline.providers.model_apis.gated_client`).
``reasoning_effort`` turns extended thinking on (low, medium, high: 1024, 4096, 16384
thinking tokens); the thinking blocks of a tool-using answer are sent back with their
signatures, as the API requires.

Anthropic counts ``input_tokens`` without the cached ones; seamline's ``usage`` counts every
input token, so cache reads and writes are added back in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

from seamline.errors import InvalidRequest
from seamline.events import Event, ReasoningDelta, TextDelta, ToolCall, Usage
from seamline.loop.messages import Message, ModelRequest
from seamline.providers.base import OptionSpec
from seamline.providers.model_apis.base import COMMON_OPTIONS, ModelAPIProvider, StepState, parse_arguments
from seamline.tools.base import ToolSpec

__all__ = ["AnthropicProvider", "anthropic_messages"]

_THINKING_BUDGET: Final = {"low": 1024, "medium": 4096, "high": 16384}
_DEFAULT_MAX_TOKENS: Final = 8192


def anthropic_messages(
    messages: list[Message], thinking: Mapping[str, list[dict[str, Any]]] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """Our neutral messages as Messages-API ``system`` and ``messages``.

    Tool results become ``tool_result`` blocks of a user message; consecutive user-side
    items merge into one message, since the API wants roles to alternate.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def user_block(block: dict[str, Any]) -> None:
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})

    for m in messages:
        if m.role == "system":
            system.append(m.content)
        elif m.role == "user":
            user_block({"type": "text", "text": m.content})
        elif m.role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.call_id or "", "content": m.content}
            if m.is_error:
                block["is_error"] = True
            user_block(block)
        else:
            content: list[dict[str, Any]] = []
            if m.tool_calls and thinking:
                content.extend(thinking.get(m.tool_calls[0].call_id, ()))
            if m.content:
                content.append({"type": "text", "text": m.content})
            content += [
                {"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments} for c in m.tool_calls
            ]
            if content:  # the API refuses an empty assistant message
                out.append({"role": "assistant", "content": content})
    return ("\n\n".join(system) if system else None), out


def _sdk_url(url: str) -> str:
    """A base URL as the SDK wants it: it appends ``/v1/messages`` itself."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


class AnthropicProvider(ModelAPIProvider):
    """Anthropic's Messages API through the ``anthropic`` SDK."""

    name: ClassVar[str] = "anthropic"
    description: ClassVar[str] = "Anthropic Messages API (Claude models)"
    default_model: ClassVar[str | None] = "claude-sonnet-4-6"
    options: ClassVar[dict[str, OptionSpec]] = dict(COMMON_OPTIONS)
    routes = ("messages",)
    vendor = "anthropic"
    sdk_module = "anthropic"
    extra = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"

    def __init__(self, *, model: str | None = None, options: Mapping[str, str] | None = None) -> None:
        super().__init__(model=model, options=options)
        budget = _THINKING_BUDGET.get(self.reasoning_effort or "")
        if budget is not None and self.max_tokens is not None and self.max_tokens <= budget:
            raise InvalidRequest(
                f"max_tokens={self.max_tokens} leaves no room for reasoning_effort={self.reasoning_effort}"
                f" ({budget} thinking tokens); raise max_tokens above {budget}"
            )
        self.thinking_budget = budget
        # Thinking blocks of answers that called tools, by their first tool-use id: the API
        # wants them back, signature and all, in the next request.
        self._thinking: dict[str, list[dict[str, Any]]] = {}

    def _key_optional(self) -> bool:
        # A server other than Anthropic's own (a local one, a gateway) may need no key, as for
        # `openai`; one that does answers 401, classified as auth.
        return urlsplit(self.base_url).hostname != urlsplit(self.default_base_url).hostname

    @property
    def sdk_base_url(self) -> str:
        """The base URL as the SDK wants it: it appends ``/v1/messages`` itself."""
        return _sdk_url(self.base_url)

    def _make_client(self, sdk: Any, api_key: str, timeout: float, base_url: str, http_client: Any = None) -> Any:
        return sdk.AsyncAnthropic(
            api_key=api_key, base_url=_sdk_url(base_url), timeout=timeout, max_retries=0, http_client=http_client
        )

    def _build(self, request: ModelRequest) -> dict[str, Any]:
        system, messages = anthropic_messages(request.messages, self._thinking)
        max_tokens = self.max_tokens or _DEFAULT_MAX_TOKENS + (self.thinking_budget or 0)
        params: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system is not None:
            params["system"] = system
        if request.tools:
            params["tools"] = anthropic_tools(request.tools)
        if self.thinking_budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        elif self.temperature is not None:  # the API refuses a temperature with thinking on
            # This SDK's create() no longer names temperature; the API still takes it in the body.
            params["extra_body"] = {"temperature": self.temperature}
        return params

    def _prompt_part(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: params[k] for k in ("system", "messages") if k in params}

    async def _stream(
        self, client: Any, params: dict[str, Any], request: ModelRequest, state: StepState
    ) -> AsyncIterator[Event]:
        stream = await self._sent(request, client.messages.create(**params))
        blocks: dict[int, dict[str, Any]] = {}
        parts: dict[int, list[str]] = {}
        thinking: list[dict[str, Any]] = []
        first_call: str | None = None
        plain_input = cache_read = cache_write = output = 0
        try:
            async for event in stream:
                kind = event.type
                if kind == "content_block_delta":
                    delta = event.delta
                    dtype = delta.type
                    if dtype == "text_delta":
                        yield TextDelta(text=delta.text)
                    elif dtype == "input_json_delta":
                        parts.setdefault(event.index, []).append(delta.partial_json)
                    elif dtype == "thinking_delta":
                        parts.setdefault(event.index, []).append(delta.thinking)
                        yield ReasoningDelta(text=delta.thinking)
                    elif dtype == "signature_delta":
                        blocks.setdefault(event.index, {})["signature"] = delta.signature
                elif kind == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        blocks[event.index] = {"type": "tool_use", "id": block.id, "name": block.name}
                    elif block.type in ("thinking", "redacted_thinking"):
                        blocks[event.index] = block.model_dump(exclude_none=True)
                elif kind == "content_block_stop":
                    block_state = blocks.pop(event.index, None)
                    text = "".join(parts.pop(event.index, ()))
                    if block_state is None:
                        continue
                    if block_state.get("type") == "tool_use":
                        call_id = block_state["id"] or f"toolu-{request.session_id[:8]}-{request.step}-{event.index}"
                        first_call = first_call or call_id
                        yield ToolCall(call_id=call_id, name=block_state["name"], arguments=parse_arguments(text))
                    elif block_state.get("type") == "thinking":
                        thinking.append({**block_state, "thinking": text})
                    else:
                        thinking.append(block_state)
                elif kind == "message_start":
                    message = event.message
                    state.response_id = message.id
                    state.model = message.model
                    usage = message.usage
                    plain_input = usage.input_tokens or 0
                    cache_read = usage.cache_read_input_tokens or 0
                    cache_write = usage.cache_creation_input_tokens or 0
                    output = usage.output_tokens or 0
                    state.final = {
                        "id": message.id,
                        "model": message.model,
                        "usage": usage.model_dump(exclude_none=True),
                    }
                elif kind == "message_delta":
                    state.stop_reason = event.delta.stop_reason
                    usage = event.usage
                    # message_delta usage is cumulative; fields it leaves out keep their value
                    output = usage.output_tokens if usage.output_tokens is not None else output
                    plain_input = getattr(usage, "input_tokens", None) or plain_input
                    cache_read = getattr(usage, "cache_read_input_tokens", None) or cache_read
                    cache_write = getattr(usage, "cache_creation_input_tokens", None) or cache_write
                    state.final["stop_reason"] = state.stop_reason
                    state.final["delta_usage"] = usage.model_dump(exclude_none=True)
                elif kind == "message_stop":
                    state.finished = True
        finally:
            await stream.close()
        if state.finished:
            if thinking and first_call is not None:
                self._thinking[first_call] = thinking
            state.usage = Usage(
                input_tokens=plain_input + cache_read + cache_write,
                output_tokens=output,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                model=state.model,
                usage_id=state.response_id,
            )
