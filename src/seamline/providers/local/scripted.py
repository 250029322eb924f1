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
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, cast

import msgspec

from seamline.errors import ERROR_KINDS, InvalidRequest, ProviderFailure, error_for_kind
from seamline.events import ErrorKind, Event, Reasoning, Text, TextDelta, ToolCall, Usage
from seamline.loop.messages import ModelRequest
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, Provider, ProviderSession

__all__ = ["ScriptedProvider", "load_script"]


def load_script(path: str | Path) -> list[dict[str, Any]]:
    """Read a script file (JSON, or YAML when PyYAML is installed)."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read script {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest(f"script {path} is not UTF-8 text (a binary file?)") from None
    if "\x00" in text:
        raise InvalidRequest(f"script {path} is not text (it holds NUL bytes)")
    data: object
    try:
        if file.suffix in (".yaml", ".yml"):
            data = _parse_yaml(text, path)
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidRequest(f"script {path} is not valid JSON: {exc}") from None
        return validate_script(data, origin=str(path))
    except RecursionError:
        raise InvalidRequest(f"script {path} is nested too deeply") from None


def _parse_yaml(text: str, path: str | Path) -> object:
    try:
        import yaml
    except ImportError:
        raise InvalidRequest("YAML scripts need PyYAML (pip install PyYAML), or give the script as JSON") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidRequest(f"script {path} is not valid YAML: {first}") from None


_SCALAR: Final = (str, int, float)
_NUMBER: Final = (int, float)
_CALL_ID: Final = (str, int)
_TOKEN_FIELDS: Final = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def validate_script(data: object, *, origin: str = "script") -> list[dict[str, Any]]:
    """Check a script's shape, so a mistake in it is one clear error before any call."""
    if not isinstance(data, list):
        raise InvalidRequest(f"{origin}: a script is a list of responses")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise InvalidRequest(f"{origin}: response {i} is not an object")
        # Each key the response has, checked once; on any problem, the report below.
        for key, value in item.items():
            check = _CHECKS.get(key)
            if check is None or check(value) is not None:
                raise InvalidRequest(f"{origin}: response {i}{_first_problem(item)}")
        out.append(item)
    return out


def _first_problem(item: dict[str, Any]) -> str:
    """What is wrong with a response: its unknown keys, else the first problem in the
    fixed order of keys (as ``: problem``)."""
    unknown = set(item) - _KEYS
    if unknown:
        return f" has unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}"
    for key, check in _CHECKS.items():
        if key in item and (problem := check(item[key])) is not None:
            return f": {problem}"
    raise AssertionError("a response was refused without a problem")  # pragma: no cover


def _text_problem(text: object) -> str | None:
    return None if text is None or isinstance(text, _SCALAR) else "text must be a string"


def _reasoning_problem(reasoning: object) -> str | None:
    return None if reasoning is None or isinstance(reasoning, _SCALAR) else "reasoning must be a string"


def _deltas_problem(deltas: object) -> str | None:
    if deltas is None or (isinstance(deltas, list) and all(isinstance(d, _SCALAR) for d in deltas)):
        return None
    return "deltas must be a list of strings"


def _stream_problem(stream: object) -> str | None:
    return None if stream is True or stream is False else "stream must be true or false"


def _delay_problem(delay: object) -> str | None:
    return None if delay is None or _non_negative(delay) else "delay must be a number of seconds, 0 or more"


def _calls_problem(calls: object) -> str | None:
    if calls is None:
        return None
    if not isinstance(calls, list):
        return "tool_calls must be a list of {name, arguments}"
    for call in calls:
        problem = _call_problem(call)
        if problem:
            return problem
    return None


def _error_problem(error: object) -> str | None:
    if error is None or error is False:
        return None
    if not isinstance(error, dict):
        return "error must be an object {kind, message}"
    if error.get("kind", "provider") not in ERROR_KINDS:
        return f"error.kind must be one of {', '.join(ERROR_KINDS)}"
    retryable = error.get("retryable")
    if retryable is not None and retryable is not False and retryable is not True:
        return "error.retryable must be true or false"
    return None


def _no_problem(value: object) -> None:
    return None


def _non_negative(value: object) -> bool:
    """A number of 0 or more, finite (not a bool, not NaN)."""
    kind = type(value)
    if kind is not int and kind is not float:
        if value is True or value is False or not isinstance(value, _NUMBER):
            return False
    return 0 <= value < math.inf  # type: ignore[operator]


def _call_problem(call: object) -> str | None:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return "each tool call needs a name"
    arguments = call.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return "tool call arguments must be an object"
    call_id = call.get("id")
    if call_id is not None and not isinstance(call_id, _CALL_ID):
        return "a tool call id must be a string"
    return None


def _usage_problem(usage: object) -> str | None:
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return "usage must be an object"
    for key in _TOKEN_FIELDS:
        value = usage.get(key, 0)
        if type(value) is not int and (value is True or value is False or not isinstance(value, int)):
            return f"usage.{key} must be a whole number, 0 or more"
        if value < 0:
            return f"usage.{key} must be a whole number, 0 or more"
    cost = usage.get("cost_usd")
    if cost is not None and not _non_negative(cost):
        return "usage.cost_usd must be a number, 0 or more"
    return None


# Every key a response may have, with its check, in the order problems are reported.
_CHECKS: Final[dict[str, Callable[[object], str | None]]] = {
    "text": _text_problem,
    "reasoning": _reasoning_problem,
    "deltas": _deltas_problem,
    "stream": _stream_problem,
    "delay": _delay_problem,
    "tool_calls": _calls_problem,
    "usage": _usage_problem,
    "error": _error_problem,
    "raise": _no_problem,
}
_KEYS: Final = frozenset(_CHECKS)

# The last script handed to a provider, and its checked copy: a test or a bench that gives
# one script to a provider per run checks and copies it once. Shared read-only: a provider
# never changes its script.
_last_script: tuple[Sequence[Mapping[str, Any]], list[dict[str, Any]], list[_Response]] | None = None


def _checked_copy(script: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[_Response]]:
    """``script`` checked, its responses copied (so the caller may change its own list
    afterwards), and each one made ready to play; the same list again, unchanged since,
    gives what was made last time."""
    global _last_script
    last = _last_script
    if last is not None and last[0] is script and last[1] == script:
        return last[1], last[2]
    checked = validate_script([dict(s) for s in script])
    responses = [_Response(entry) for entry in checked]
    _last_script = (script, checked, responses)
    return checked, responses


class _Response:
    """A response of a script made ready to play: what it says, read from its keys once.
    Its fixed events (reasoning, text, deltas) are made once too: events are frozen."""

    __slots__ = ("calls", "delay", "error", "events", "raised", "usage")

    def __init__(self, entry: Mapping[str, Any]) -> None:
        get = entry.get
        self.delay = float(get("delay") or 0)
        raised = get("raise")
        self.raised = str(raised) if raised else None
        self.error: Mapping[str, Any] | None = get("error") or None
        events: list[Event] = []
        if reasoning := get("reasoning"):
            events.append(Reasoning(text=str(reasoning)))
        deltas = get("deltas")
        text = get("text")
        if deltas:
            events.extend(TextDelta(text=str(chunk)) for chunk in deltas)
        elif text is not None:
            if get("stream"):
                words = str(text).split(" ")
                events.extend(TextDelta(text=w if k == len(words) - 1 else w + " ") for k, w in enumerate(words))
            else:
                events.append(Text(text=str(text)))
        self.events = tuple(events)
        self.calls = tuple(
            (str(c["id"]) if c.get("id") else None, c["name"], c.get("arguments") or None)
            for c in get("tool_calls") or ()
        )
        usage = get("usage")
        self.usage: tuple[int, int, int, int, Any, Any, Any] | None = None
        if usage:
            u = usage.get
            tokens = [int(u(key, 0)) for key in _TOKEN_FIELDS]
            self.usage = (*tokens, u("cost_usd"), u("model") or None, u("id") or None)


class ScriptedProvider(Provider):
    """Plays a script of responses; see the module docstring for the format."""

    name: ClassVar[str] = "scripted"
    keys: ClassVar[KeyPath] = "none"
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
            self.script, self._responses = _checked_copy(script)
        else:
            self.script = load_script(self.option_values["script"]) if "script" in self.option_values else []
            self._responses = [_Response(entry) for entry in self.script]
        self.has_script = script is not None or "script" in self.option_values
        self.position = 0
        #: every model call it was sent, in order (what the loop asked: messages, tools,
        #: model, params), so a test can assert on requests as well as answers
        self.calls: list[ModelRequest] = []

    @property
    def last_call(self) -> ModelRequest | None:
        """The latest model call it was sent, or None before the first."""
        return self.calls[-1] if self.calls else None

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
        # A snapshot: the loop goes on appending to its message list after this call. The
        # tools and params of a turn's calls are mostly the same: the previous call's copies
        # are shared then (a run in flight holds fewer objects for the collector to scan).
        calls = self.calls
        last = calls[-1] if calls else None
        tools = last.tools if last is not None and last.tools == request.tools else list(request.tools)
        params = last.params if last is not None and last.params == request.params else dict(request.params)
        calls.append(msgspec.structs.replace(request, messages=list(request.messages), tools=tools, params=params))
        if self.position >= len(self.script):
            raise ProviderFailure(f"script exhausted after {len(self.script)} responses")
        response = self._responses[self.position]
        self.position += 1
        return self._play(response, request)

    async def _play(self, response: _Response, request: ModelRequest) -> AsyncIterator[Event]:
        if response.delay:
            await asyncio.sleep(response.delay)
        if response.raised is not None:
            raise RuntimeError(response.raised)
        error = response.error
        if error is not None:
            kind = cast(ErrorKind, error.get("kind", "provider"))
            raise error_for_kind(kind, str(error.get("message", "scripted failure")), retryable=error.get("retryable"))
        for event in response.events:
            yield event
        for i, (call_id, name, arguments) in enumerate(response.calls):
            yield ToolCall(
                call_id=call_id or f"call-{request.turn}-{request.step}-{i}",
                name=name,
                arguments=dict(arguments) if arguments else {},
            )
        if response.usage is not None:
            yield self._usage(response.usage, request)

    def _usage(self, usage: tuple[int, int, int, int, Any, Any, Any], request: ModelRequest) -> Usage:
        input_tokens, output_tokens, cache_read, cache_write, cost, model, usage_id = usage
        return Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            cost_usd=cost,
            priced=cost is not None,
            model=model or self.model,
            usage_id=usage_id or f"{request.session_id}-{request.turn}-{request.step}",
        )
