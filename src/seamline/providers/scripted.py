"""The ``scripted`` provider: answers from a script, for tests and demos.

A script is a list of model responses, used in order, one per model call::

    - text: "Let me look."
      tool_calls: [{name: read_file, arguments: {path: README.md}}]
    - text: "Done."
      usage: {input_tokens: 120, output_tokens: 8, cost_usd: 0.001}

Keys of a response: ``text`` (streamed as deltas when ``stream: true``), ``deltas`` (a
list of chunks), ``reasoning``, ``tool_calls`` (each with ``name``, ``arguments`` and an
optional ``id``), ``usage``, ``delay`` (seconds before answering), ``error`` (``{kind,
message}``: the call fails with that classified error) and ``raise`` (the call raises a
plain exception, to test how bad providers are contained).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

from seamline.errors import InvalidRequest, ProviderFailure, error_for_kind
from seamline.events import ErrorKind, Event, Reasoning, Text, TextDelta, ToolCall, Usage
from seamline.loop.messages import ModelRequest
from seamline.providers.base import OptionSpec, PreflightCheck, Provider, ProviderSession

__all__ = ["ScriptedProvider", "load_script"]

_KEYS = frozenset({"text", "deltas", "stream", "reasoning", "tool_calls", "usage", "delay", "error", "raise"})


def load_script(path: str | Path) -> list[dict[str, Any]]:
    """Read a script file (JSON, or YAML when PyYAML is installed)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read script {path}: {exc.strerror}") from None
    data: object
    if file.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise InvalidRequest("YAML scripts need PyYAML: pip install 'seamline[yaml]'") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidRequest(f"script {path} is not valid YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"script {path} is not valid JSON: {exc}") from None
    return validate_script(data, origin=str(path))


def validate_script(data: object, *, origin: str = "script") -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise InvalidRequest(f"{origin}: a script is a list of responses")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise InvalidRequest(f"{origin}: response {i} is not an object")
        unknown = set(item) - _KEYS
        if unknown:
            raise InvalidRequest(f"{origin}: response {i} has unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}")
        for call in item.get("tool_calls", []) or []:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise InvalidRequest(f"{origin}: response {i}: each tool call needs a name")
            if not isinstance(call.get("arguments", {}), dict):
                raise InvalidRequest(f"{origin}: response {i}: tool call arguments must be an object")
        out.append(item)
    return out


class ScriptedProvider(Provider):
    """Plays a script of responses; see the module docstring for the format."""

    name: ClassVar[str] = "scripted"
    description: ClassVar[str] = "plays a script of responses (tests and demos)"
    default_model: ClassVar[str | None] = "scripted"
    options: ClassVar[dict[str, OptionSpec]] = {
        "script": OptionSpec("path of a JSON or YAML script file"),
    }
    cost_source = "script"
    routes = ("script",)
    real = False

    def __init__(
        self,
        *,
        model: str | None = None,
        options: Mapping[str, str] | None = None,
        script: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(model=model, options=options)
        if script is not None:
            self.script = validate_script([dict(s) for s in script])
        elif "script" in self.option_values:
            self.script = load_script(self.option_values["script"])
        else:
            self.script = []
        self.has_script = script is not None or "script" in self.option_values
        self.position = 0

    async def _preflight(self) -> Sequence[PreflightCheck]:
        if not self.has_script:
            return [
                PreflightCheck(name="script", ok=True, detail="ready; give a script with --provider-option script=FILE")
            ]
        return [PreflightCheck(name="script", ok=True, detail=f"{len(self.script)} responses")]

    async def _open(self, session: ProviderSession) -> None:
        if not self.has_script:
            raise InvalidRequest("the scripted provider needs a script: --provider-option script=FILE")

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        if self.position >= len(self.script):
            raise ProviderFailure(f"script exhausted after {len(self.script)} responses")
        entry = self.script[self.position]
        self.position += 1
        return self._play(entry, request)

    async def _play(self, entry: dict[str, Any], request: ModelRequest) -> AsyncIterator[Event]:
        delay = entry.get("delay")
        if delay:
            await asyncio.sleep(float(delay))
        if entry.get("raise"):
            raise RuntimeError(str(entry["raise"]))
        error = entry.get("error")
        if error:
            kind = cast(ErrorKind, error.get("kind", "provider"))
            raise error_for_kind(kind, str(error.get("message", "scripted failure")), retryable=error.get("retryable"))
        if entry.get("reasoning"):
            yield Reasoning(text=str(entry["reasoning"]))
        deltas = entry.get("deltas")
        text = entry.get("text")
        if deltas:
            for chunk in deltas:
                yield TextDelta(text=str(chunk))
        elif text is not None:
            if entry.get("stream"):
                words = str(text).split(" ")
                for k, word in enumerate(words):
                    yield TextDelta(text=word if k == len(words) - 1 else word + " ")
            else:
                yield Text(text=str(text))
        for i, call in enumerate(entry.get("tool_calls") or ()):
            call_id = str(call.get("id") or f"call-{request.turn}-{request.step}-{i}")
            yield ToolCall(call_id=call_id, name=call["name"], arguments=dict(call.get("arguments") or {}))
        usage = entry.get("usage")
        if usage:
            yield Usage(
                input_tokens=int(usage.get("input_tokens", 0)),
                output_tokens=int(usage.get("output_tokens", 0)),
                cache_read_tokens=int(usage.get("cache_read_tokens", 0)),
                cache_write_tokens=int(usage.get("cache_write_tokens", 0)),
                cost_usd=usage.get("cost_usd"),
                priced=usage.get("cost_usd") is not None,
                model=usage.get("model") or self.model,
                usage_id=usage.get("id") or f"{request.session_id}-{request.turn}-{request.step}",
            )
