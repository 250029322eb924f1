"""The ``openai`` provider: any OpenAI-compatible endpoint, on two routes.

``route=chat`` (the default) speaks Chat Completions, which the official API, vLLM,
llama.cpp's server, Ollama and LM Studio all serve; ``route=responses`` speaks the
Responses API. Both wrap the official ``openai`` SDK (``pip install 'seamline[openai]'``),
imported only when a session opens, and leave tools to seamline's loop.

    seamline run --provider openai --model gpt-4o "Summarise README.md"
    seamline run -p openai -o base_url=http://127.0.0.1:8000/v1 -o route=chat -m my-model "hi"

The key comes from ``OPENAI_API_KEY`` (or the variable named by ``api_key_env``), the
endpoint from ``base_url``, else ``OPENAI_BASE_URL``, else the official API. An endpoint
other than the official one may run without a key (local servers). The requests take the
gateway's in-process transport (``gateway=off``: the SDK's plain client; see
:mod:`seamline.providers.model_apis.gated_client`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

from seamline.events import Event, ReasoningDelta, TextDelta, ToolCall, Usage
from seamline.loop.messages import Message, ModelRequest
from seamline.providers.base import OptionSpec
from seamline.providers.model_apis.base import COMMON_OPTIONS, ModelAPIProvider, StepState, parse_arguments
from seamline.providers.model_apis.retry import stream_failure
from seamline.tools.base import ToolSpec

__all__ = ["OpenAIProvider", "chat_messages", "responses_input"]

_OFFICIAL_HOST = "api.openai.com"


def _arguments_json(call: ToolCall) -> str:
    return json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)


def chat_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our neutral messages as Chat Completions ``messages``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            # content may be null only beside tool calls
            item: dict[str, Any] = {"role": "assistant", "content": m.content or (None if m.tool_calls else "")}
            if m.tool_calls:
                item["tool_calls"] = [
                    {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": _arguments_json(c)}}
                    for c in m.tool_calls
                ]
            out.append(item)
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.call_id or "", "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def chat_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def responses_input(
    messages: list[Message], reasoning: Mapping[str, list[dict[str, Any]]] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """Our neutral messages as Responses ``instructions`` and ``input`` items.

    ``reasoning`` holds the reasoning items of answers that called tools, by their first
    call id; they go back before those calls, as reasoning models need them.
    """
    system: list[str] = []
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            system.append(m.content)
        elif m.role == "user":
            items.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            if m.tool_calls and reasoning:
                items.extend(reasoning.get(m.tool_calls[0].call_id, ()))
            if m.content:
                items.append({"role": "assistant", "content": m.content})
            for c in m.tool_calls:
                items.append(
                    {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": _arguments_json(c)}
                )
        else:
            items.append({"type": "function_call_output", "call_id": m.call_id or "", "output": m.content})
    return ("\n\n".join(system) if system else None), items


def responses_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": False}
        for t in tools
    ]


class OpenAIProvider(ModelAPIProvider):
    """Any OpenAI-compatible endpoint through the ``openai`` SDK; ``route`` picks the API."""

    name: ClassVar[str] = "openai"
    description: ClassVar[str] = "OpenAI-compatible model APIs (official, vLLM, llama.cpp, Ollama, LM Studio)"
    default_model: ClassVar[str | None] = "gpt-4o"
    options: ClassVar[dict[str, OptionSpec]] = {
        **COMMON_OPTIONS,
        "route": OptionSpec("which API to call", default="chat", choices=("chat", "responses")),
    }
    routes = ("chat", "responses")
    vendor = "openai"
    sdk_module = "openai"
    extra = "openai"
    key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"

    def __init__(self, *, model: str | None = None, options: Mapping[str, str] | None = None) -> None:
        super().__init__(model=model, options=options)
        # Responses route: reasoning items of answers that called tools, by first call id.
        self._reasoning: dict[str, list[dict[str, Any]]] = {}

    @property
    def route(self) -> str:
        return self.option_values.get("route", "chat")

    def _official(self) -> bool:
        return urlsplit(self.base_url).netloc == _OFFICIAL_HOST

    def _key_optional(self) -> bool:
        return not self._official()

    def _make_client(self, sdk: Any, api_key: str, timeout: float, base_url: str, http_client: Any = None) -> Any:
        return sdk.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0, http_client=http_client
        )

    # -- requests -----------------------------------------------------------------------
    def _build(self, request: ModelRequest) -> dict[str, Any]:
        model = request.model or self.model
        if self.route == "responses":
            instructions, items = responses_input(request.messages, self._reasoning)
            params: dict[str, Any] = {"model": model, "input": items, "stream": True, "store": False}
            if instructions is not None:
                params["instructions"] = instructions
            if request.tools:
                params["tools"] = responses_tools(request.tools)
            if self.max_tokens is not None:
                params["max_output_tokens"] = self.max_tokens
            if self.reasoning_effort:
                params["reasoning"] = {"effort": self.reasoning_effort, "summary": "auto"}
                # Nothing is stored server-side (store=False), so the reasoning comes back
                # encrypted and is sent again with the tool results.
                params["include"] = ["reasoning.encrypted_content"]
        else:
            params = {
                "model": model,
                "messages": chat_messages(request.messages),
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            if request.tools:
                params["tools"] = chat_tools(request.tools)
            if self.max_tokens is not None:
                # The official API wants the newer name; many compatible servers know only the old one.
                params["max_completion_tokens" if self._official() else "max_tokens"] = self.max_tokens
            if self.reasoning_effort:
                params["reasoning_effort"] = self.reasoning_effort
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return params

    def _prompt_part(self, params: Mapping[str, Any]) -> dict[str, Any]:
        keys = ("instructions", "input") if self.route == "responses" else ("messages",)
        return {k: params[k] for k in keys if k in params}

    def _stream(
        self, client: Any, params: dict[str, Any], request: ModelRequest, state: StepState
    ) -> AsyncIterator[Event]:
        if self.route == "responses":
            return self._responses(client, params, request, state)
        return self._chat(client, params, request, state)

    # -- Chat Completions -----------------------------------------------------------------
    async def _chat(
        self, client: Any, params: dict[str, Any], request: ModelRequest, state: StepState
    ) -> AsyncIterator[Event]:
        stream = await self._sent(request, client.chat.completions.create(**params))
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
        try:
            async for chunk in stream:
                if state.response_id is None:
                    state.response_id = chunk.id
                    state.model = chunk.model
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta is not None:
                        if delta.content:
                            yield TextDelta(text=delta.content)
                        # vLLM, DeepSeek and llama.cpp: reasoning_content; OpenRouter: reasoning. Both
                        # are extra fields to the SDK; reading the extras dict avoids a failed getattr.
                        extra = delta.model_extra
                        if extra:
                            thought = extra.get("reasoning_content") or extra.get("reasoning")
                            if isinstance(thought, str) and thought:
                                yield ReasoningDelta(text=thought)
                        for piece in delta.tool_calls or ():
                            index = piece.index if piece.index is not None else len(calls)
                            slot = calls.setdefault(index, ["", ""])
                            if piece.id:
                                slot[0] = piece.id
                            fn = piece.function
                            if fn is not None:
                                if fn.name:
                                    slot[1] = fn.name
                                if fn.arguments:
                                    slot.append(fn.arguments)
                    if choice.finish_reason:
                        state.stop_reason = choice.finish_reason
                        state.finished = True
                        for index in sorted(calls):
                            call_id, name, *parts = calls[index]
                            yield ToolCall(
                                call_id=call_id
                                or f"call-{request.session_id[:8]}-{request.turn}-{request.step}-{index}",
                                name=name,
                                arguments=parse_arguments("".join(parts)),
                            )
                        calls.clear()
                        state.final = {"id": chunk.id, "model": chunk.model, "finish_reason": choice.finish_reason}
                usage = chunk.usage
                if usage is not None:
                    details = usage.prompt_tokens_details
                    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
                    written = (getattr(details, "cache_write_tokens", None) or 0) if details is not None else 0
                    state.usage = Usage(
                        input_tokens=usage.prompt_tokens or 0,
                        output_tokens=usage.completion_tokens or 0,
                        cache_read_tokens=cached,
                        cache_write_tokens=written,
                        model=chunk.model or state.model,
                        usage_id=chunk.id,
                    )
                    state.final["usage"] = usage.model_dump(exclude_none=True)
        finally:
            await stream.close()

    # -- Responses ------------------------------------------------------------------------
    async def _responses(
        self, client: Any, params: dict[str, Any], request: ModelRequest, state: StepState
    ) -> AsyncIterator[Event]:
        stream = await self._sent(request, client.responses.create(**params))
        args: dict[str, list[str]] = {}
        made = 0
        first_call: str | None = None
        reasoning: list[dict[str, Any]] = []
        try:
            async for event in stream:
                kind = event.type
                if kind == "response.output_text.delta":
                    yield TextDelta(text=event.delta)
                elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                    yield ReasoningDelta(text=event.delta)
                elif kind == "response.function_call_arguments.delta":
                    args.setdefault(event.item_id, []).append(event.delta)
                elif kind == "response.output_item.done" and event.item.type == "function_call":
                    item = event.item
                    text = item.arguments or "".join(args.pop(item.id or "", ()))
                    made += 1
                    call_id = item.call_id or f"call-{request.session_id[:8]}-{request.turn}-{request.step}-{made}"
                    first_call = first_call or call_id
                    yield ToolCall(call_id=call_id, name=item.name, arguments=parse_arguments(text))
                elif kind == "response.output_item.done" and event.item.type == "reasoning":
                    reasoning.append(event.item.model_dump(exclude_none=True, exclude={"status"}))
                elif kind == "response.created":
                    state.response_id = event.response.id
                    state.model = event.response.model
                elif kind in ("response.completed", "response.incomplete"):
                    response = event.response
                    state.finished = True
                    state.model = response.model or state.model
                    state.response_id = response.id
                    details = response.incomplete_details
                    state.stop_reason = (details.reason if details is not None else None) or (
                        "tool_calls" if made else "stop"
                    )
                    usage = response.usage
                    if usage is not None:
                        cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details else 0
                        state.usage = Usage(
                            input_tokens=usage.input_tokens or 0,
                            output_tokens=usage.output_tokens or 0,
                            cache_read_tokens=cached or 0,
                            model=response.model or state.model,
                            usage_id=response.id,
                        )
                    state.final = {
                        "id": response.id,
                        "model": response.model,
                        "status": response.status,
                        "usage": usage.model_dump(exclude_none=True) if usage is not None else None,
                    }
                elif kind == "response.failed":
                    error = event.response.error
                    raise stream_failure(
                        "openai",
                        getattr(error, "code", None),
                        getattr(error, "message", None),
                        secret=self._api_key(),
                    )
                elif kind == "error":
                    raise stream_failure("openai", event.code, event.message, secret=self._api_key())
        finally:
            await stream.close()
        if state.finished and reasoning and first_call is not None:
            self._reasoning[first_call] = reasoning
