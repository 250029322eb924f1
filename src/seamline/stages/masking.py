"""A masking module: secrets and personal data become placeholders on their way to the
model and are put back where the real values are needed, round trip.

- The chat stage (slot ``MASKING``) replaces every secret in the request (messages, tool
  call arguments, tool results) with a placeholder such as ``[MASKED_KEY_1]``, and puts
  the real values back in the text the model streams back to the user.
- The tool stage (slot ``MASKING``) puts the real values back into the arguments a tool
  gets, and masks the tool's output before it is recorded or sent to the model.

The same value always gets the same placeholder within one module instance, so the
model can refer to it across steps. Tool calls in the event log keep the placeholders:
the secret never reaches the log through them.

>>> masker = Masker()
>>> masked = masker.mask("mail ada@example.com the key sk-test1234567890abcdefXYZ")
>>> masked
'mail [MASKED_EMAIL_1] the key [MASKED_KEY_1]'
>>> masker.unmask(masked) == "mail ada@example.com the key sk-test1234567890abcdefXYZ"
True
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

from seamline.events import Event, Reasoning, Text, TextDelta, ToolCall
from seamline.loop.messages import Message, ModelRequest
from seamline.stages.builder import AgentBuilder
from seamline.stages.chain import ChatStep, ToolInvocation, ToolInvoker
from seamline.stages.slots import StageSlot

__all__ = ["DEFAULT_PATTERNS", "Masker", "MaskingModule"]

# (kind, pattern). Kinds name the placeholder; the order decides which wins on overlap.
DEFAULT_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    ("PRIVATE_KEY", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]+?-----END [A-Z ]*PRIVATE KEY-----"),
    ("KEY", r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"),
    ("KEY", r"\b(?:ghp|gho|ghs|ghu|ghr|github_pat)_[A-Za-z0-9_]{20,}"),
    ("KEY", r"\bAKIA[0-9A-Z]{16}\b"),
    ("KEY", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("KEY", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("TOKEN", r"(?<=[Bb]earer )[A-Za-z0-9._~+/-]{16,}=*"),
    ("EMAIL", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    ("PHONE", r"\+\d{1,3}[ -]?\(?\d{1,4}\)?(?:[ -]?\d{2,4}){2,4}\b"),
)

_PLACEHOLDER: Final = re.compile(r"\[MASKED_[A-Z_]+_\d+\]")
# A delta that ends inside something that may become a placeholder is held back.
_PARTIAL: Final = re.compile(r"\[(?:M(?:A(?:S(?:K(?:E(?:D(?:_[A-Z_]*\d*)?)?)?)?)?)?)?$")


class Masker:
    """Finds secrets, hands out placeholders, and puts the values back."""

    def __init__(self, *, patterns: Iterable[tuple[str, str]] = DEFAULT_PATTERNS, values: Iterable[str] = ()) -> None:
        literal = [("SECRET", re.escape(v)) for v in sorted({v for v in values if v}, key=len, reverse=True)]
        parts = [f"(?P<k{i}>{rx})" for i, (_, rx) in enumerate([*literal, *patterns])]
        self._kinds = [kind for kind, _ in [*literal, *patterns]]
        self._regex = re.compile("|".join(parts)) if parts else None
        self._by_value: dict[str, str] = {}
        self._by_placeholder: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def mask(self, text: str) -> str:
        """``text`` with every secret replaced by its placeholder."""
        if self._regex is None or not text:
            return text
        return self._regex.sub(self._replace, text)

    def unmask(self, text: str) -> str:
        """``text`` with every known placeholder replaced by its value."""
        if "[MASKED_" not in text:
            return text
        return _PLACEHOLDER.sub(lambda m: self._by_placeholder.get(m.group(0), m.group(0)), text)

    def mask_value(self, value: Any) -> Any:
        """Mask every string inside a JSON-like value."""
        return _walk(value, self.mask)

    def unmask_value(self, value: Any) -> Any:
        return _walk(value, self.unmask)

    @property
    def placeholders(self) -> dict[str, str]:
        """Placeholder to kind-free value map (for tests and audits; never log it)."""
        return dict(self._by_placeholder)

    def _replace(self, match: re.Match[str]) -> str:
        value = match.group(0)
        known = self._by_value.get(value)
        if known is not None:
            return known
        kind = self._kinds[int((match.lastgroup or "k0")[1:])]
        self._counts[kind] = self._counts.get(kind, 0) + 1
        placeholder = f"[MASKED_{kind}_{self._counts[kind]}]"
        self._by_value[value] = placeholder
        self._by_placeholder[placeholder] = value
        return placeholder


def _walk(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    return value


class _MaskingChatStage:
    def __init__(self, masker: Masker) -> None:
        self.masker = masker

    def __call__(self, inner: ChatStep) -> ChatStep:
        masker = self.masker

        async def step(request: ModelRequest) -> AsyncIterator[Event]:
            held = ""
            async for event in inner(_masked_request(request, masker)):
                if type(event) is TextDelta:
                    text = held + event.text
                    partial = _PARTIAL.search(text)
                    cut = partial.start() if partial else len(text)
                    held = text[cut:]
                    if cut:
                        yield TextDelta(text=masker.unmask(text[:cut]))
                    continue
                if held:
                    yield TextDelta(text=masker.unmask(held))
                    held = ""
                if type(event) is Text:
                    yield Text(text=masker.unmask(event.text))
                elif type(event) is Reasoning:
                    yield Reasoning(text=masker.unmask(event.text))
                else:
                    yield event
            if held:
                yield TextDelta(text=masker.unmask(held))

        return step


def _masked_request(request: ModelRequest, masker: Masker) -> ModelRequest:
    messages = [
        Message(
            role=m.role,
            content=masker.mask(m.content),
            tool_calls=[
                ToolCall(call_id=c.call_id, name=c.name, arguments=masker.mask_value(c.arguments), source=c.source)
                for c in m.tool_calls
            ],
            call_id=m.call_id,
            name=m.name,
            is_error=m.is_error,
            reasoning=masker.mask(m.reasoning),
        )
        for m in request.messages
    ]
    return ModelRequest(
        messages=messages,
        tools=request.tools,
        model=request.model,
        session_id=request.session_id,
        turn=request.turn,
        step=request.step,
        params=request.params,
    )


class _MaskingToolStage:
    def __init__(self, masker: Masker) -> None:
        self.masker = masker

    async def invoke(self, invocation: ToolInvocation, next: ToolInvoker) -> str:
        invocation.arguments = self.masker.unmask_value(invocation.arguments)
        return self.masker.mask(await next(invocation))


class MaskingModule:
    """The example module ``masking``: ``seamline run --module masking`` or
    ``builder.use(MaskingModule(values=[os.environ["DB_PASSWORD"]]))``.

    ``values`` are literal secrets to mask besides the built-in patterns (API keys,
    tokens, private keys, e-mail addresses, phone numbers in international form).
    """

    name = "masking"

    def __init__(self, *, values: Iterable[str] = (), patterns: Iterable[tuple[str, str]] = DEFAULT_PATTERNS) -> None:
        self.masker = Masker(patterns=patterns, values=values)

    def configure(self, builder: AgentBuilder) -> None:
        builder.add_chat_stage(StageSlot.MASKING, _MaskingChatStage(self.masker))
        builder.add_tool_stage(StageSlot.MASKING, _MaskingToolStage(self.masker))
