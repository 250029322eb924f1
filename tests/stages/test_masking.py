"""The masking module: secrets become placeholders for the model and come back where needed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from seamline.events import Event, TextDelta, ToolCall, ToolResult
from seamline.loop import ModelRequest
from seamline.runner import run
from seamline.stages import AgentBuilder, StageSlot
from seamline.stages.chain import ChatStep
from seamline.stages.masking import Masker, MaskingModule
from seamline.testing import scripted
from seamline.tools import Toolset, tool

KEY = "sk-live0123456789abcdefghij"
EMAIL = "ada@example.com"


def test_round_trip_through_model_tools_and_back(tmp_path: Path) -> None:
    seen_by_model: list[str] = []
    tool_got: list[str] = []

    def spy(inner: ChatStep) -> ChatStep:
        # Closer to the model than masking: sees exactly what the provider gets.
        async def step(request: ModelRequest) -> AsyncIterator[Event]:
            seen_by_model.extend(m.content for m in request.messages)
            seen_by_model.extend(str(c.arguments) for m in request.messages for c in m.tool_calls)
            async for event in inner(request):
                yield event

        return step

    @tool
    def send_mail(to: str, body: str) -> str:
        """Send mail."""
        tool_got.append(to)
        return f"sent to {to}; reply from {to} quoted key {KEY}"

    script = [
        {"tool_calls": [{"name": "send_mail", "arguments": {"to": "[MASKED_EMAIL_1]", "body": "hi"}}]},
        {"deltas": ["Mailed [MAS", "KED_EMAIL_1] with ", "[MASKED_KEY_1]."]},
    ]
    builder = AgentBuilder().use(MaskingModule()).add_chat_stage(StageSlot.CUSTOM, spy)
    result = asyncio.run(
        run(
            f"mail {EMAIL} my key {KEY}",
            provider=scripted(script),
            workspace=tmp_path,
            tools=Toolset([send_mail]),
            builder=builder,
        )
    )
    assert result.outcome == "completed", result.events
    everything_the_model_saw = "\n".join(seen_by_model)
    assert EMAIL not in everything_the_model_saw and KEY not in everything_the_model_saw
    assert "[MASKED_EMAIL_1]" in everything_the_model_saw and "[MASKED_KEY_1]" in everything_the_model_saw
    assert tool_got == [EMAIL]  # the tool got the real address
    output = next(e for e in result.events if isinstance(e, ToolResult)).output
    assert output == "sent to [MASKED_EMAIL_1]; reply from [MASKED_EMAIL_1] quoted key [MASKED_KEY_1]"
    call = next(e for e in result.events if isinstance(e, ToolCall))
    assert call.arguments["to"] == "[MASKED_EMAIL_1]"  # the event log keeps the placeholder
    assert result.text == f"Mailed {EMAIL} with {KEY}."  # the user sees the real values
    deltas = "".join(e.text for e in result.events if isinstance(e, TextDelta))
    assert deltas == result.text


def test_literal_values_are_masked_too() -> None:
    masker = Masker(values=["hunter2"])
    assert masker.mask("password hunter2") == "password [MASKED_SECRET_1]"
    assert masker.mask_value({"a": ["hunter2", 3]}) == {"a": ["[MASKED_SECRET_1]", 3]}


@given(st.text(max_size=200), st.lists(st.sampled_from([KEY, EMAIL, "+44 20 7946 0958"]), max_size=4))
def test_mask_then_unmask_gives_the_text_back(noise: str, secrets: list[str]) -> None:
    masker = Masker()
    text = " ".join([noise, *secrets])
    masked = masker.mask(text)
    for secret in secrets:
        assert secret not in masked
    assert masker.unmask(masked) == text
