"""Stages run by slot, whatever order they were added in: requests low to high, results back in reverse."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from seamline.events import Event, Text, ToolCall, ToolResult
from seamline.loop import Message, ModelRequest, run_agent_loop
from seamline.runner import run
from seamline.stages import AgentBuilder, StageChain, StageSlot, ToolInvocation, ToolInvoker
from seamline.stages.chain import ChatStep
from seamline.testing import scripted
from seamline.tools import Toolset, tool
from seamline.tools.approval import YesApproval

SLOTS = [StageSlot.CONTEXT, StageSlot.CONTEXT + 5, StageSlot.MASKING, StageSlot.MASKING + 50, StageSlot.CUSTOM, 1000]


def _chat_stage(name: str, log: list[str]):
    def wrap(inner: ChatStep) -> ChatStep:
        async def step(request: ModelRequest) -> AsyncIterator[Event]:
            log.append(f"request:{name}")
            async for event in inner(request):
                if isinstance(event, Text):
                    log.append(f"result:{name}")
                yield event

        return step

    return wrap


class _ToolStage:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def invoke(self, invocation: ToolInvocation, next: ToolInvoker) -> str:
        self.log.append(f"call:{self.name}")
        output = await next(invocation)
        self.log.append(f"result:{self.name}")
        return output + f"|{self.name}"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_stages_added_in_shuffled_order_run_by_slot_both_directions(seed: int, tmp_path: Path) -> None:
    log: list[str] = []
    order = list(enumerate(SLOTS))
    random.Random(seed).shuffle(order)
    builder = AgentBuilder()
    for index, slot in order:
        builder.add_chat_stage(slot, _chat_stage(f"s{index}", log))
        builder.add_tool_stage(slot, _ToolStage(f"s{index}", log))
    provider = scripted([{"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]}, {"text": "done"}])
    result = asyncio.run(run("go", provider=provider, workspace=tmp_path, tools=Toolset([lookup]), builder=builder))
    assert result.outcome == "completed", result.events
    names = [f"s{i}" for i in range(len(SLOTS))]  # index order is slot order
    first_step = [f"request:{n}" for n in names]  # the first model call streams no text
    tool_part = [f"call:{n}" for n in names] + [f"result:{n}" for n in reversed(names)]
    second_step = [f"request:{n}" for n in names] + [f"result:{n}" for n in reversed(names)]
    assert log == first_step + tool_part + second_step
    output = next(e for e in result.events if isinstance(e, ToolResult)).output
    # The result passed the stages highest slot first on its way back.
    assert output == "A|" + "|".join(reversed(names))


def test_same_slot_keeps_the_order_added() -> None:
    log: list[str] = []
    chain = StageChain(
        tool=[(300, _ToolStage("first", log)), (100, _ToolStage("low", log)), (300, _ToolStage("second", log))]
    )
    assert [s.name for _, s in chain.tool] == ["low", "first", "second"]  # type: ignore[attr-defined]


def test_empty_chain_hands_back_the_step_itself() -> None:
    async def step(request: ModelRequest) -> AsyncIterator[Event]:
        yield Text(text="x")

    chain = StageChain()
    assert chain.wrap_step(step) is step
    assert not chain


def _run_loop(step: ChatStep, tools: Toolset, chain: StageChain, *, yes: bool = False) -> list[Event]:
    async def go() -> list[Event]:
        return [
            e
            async for e in run_agent_loop(
                step=step,
                messages=[Message(role="user", content="go")],
                tools=tools,
                session_id="sess-1",
                turn=7,
                approval=YesApproval(yes=yes),
                stages=chain,
            )
        ]

    return asyncio.run(go())


def _two_calls_then_text(calls: list[ToolCall]) -> ChatStep:
    state = {"n": 0}

    async def step(request: ModelRequest) -> AsyncIterator[Event]:
        state["n"] += 1
        if state["n"] == 1:
            for call in calls:
                yield call
        else:
            yield Text(text="done")

    return step


def test_tool_stages_see_only_approved_calls_and_a_full_invocation() -> None:
    seen: list[ToolInvocation] = []
    written: list[str] = []

    @tool(tool_class="write")
    def save(text: str) -> str:
        """Save text."""
        written.append(text)
        return "saved"

    @tool
    def shout(text: str) -> str:
        """Shout text."""
        return text.upper()

    class Rewrite:
        async def invoke(self, invocation: ToolInvocation, next: ToolInvoker) -> str:
            seen.append(invocation)
            invocation.arguments["text"] = invocation.arguments["text"] + "!"
            return await next(invocation)

    calls = [
        ToolCall(call_id="c1", name="save", arguments={"text": "secret"}),
        ToolCall(call_id="c2", name="shout", arguments={"text": "hey"}),
    ]
    events = _run_loop(_two_calls_then_text(calls), Toolset([save, shout]), StageChain(tool=[(300, Rewrite())]))
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}
    assert results["c1"].is_error and "permission denied" in results["c1"].output
    assert written == []  # the denied call reached neither the stage nor the tool
    assert results["c2"].output == "HEY!"  # the stage changed the arguments the tool got
    assert len(seen) == 1
    inv = seen[0]
    assert inv.tool is shout and inv.call is calls[1] and inv.tool_class == "read"
    assert inv.session_id == "sess-1" and inv.turn_id == 7 and inv.context.call_id == "c2"
    assert calls[1].arguments == {"text": "hey"}  # the model's call stays as it was sent


def test_chat_stage_can_change_the_request_and_the_stream() -> None:
    seen: list[str] = []

    async def provider(request: ModelRequest) -> AsyncIterator[Event]:
        seen.append(request.messages[0].content)
        yield Text(text="answer")

    def prefix(inner: ChatStep) -> ChatStep:
        async def step(request: ModelRequest) -> AsyncIterator[Event]:
            first = request.messages[0]
            changed = [Message(role="system", content="context: " + first.content), *request.messages[1:]]
            async for event in inner(ModelRequest(**{**_fields(request), "messages": changed})):
                yield Text(text=event.text + " (checked)") if isinstance(event, Text) else event

        return step

    events = _run_loop(provider, Toolset(), StageChain(chat=[(StageSlot.CONTEXT, prefix)]))
    assert seen == ["context: go"]
    assert events[-1].type == "complete" and events[-1].text == "answer (checked)"  # type: ignore[union-attr]


def _fields(request: ModelRequest) -> dict[str, object]:
    return {f: getattr(request, f) for f in request.__struct_fields__}
