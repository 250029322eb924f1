"""seamline.Agent: one-shot runs, streams, multi-turn sessions, instructions that survive
resume and fork, tools only when asked, and provider clients closed with the session."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import ClassVar

import msgspec
import pytest

import seamline
from seamline.errors import InvalidRequest
from seamline.events import Event, Text, TextDelta, Usage
from seamline.loop.messages import ModelRequest
from seamline.providers.base import BLOCK_ENV, Provider
from seamline.providers.settings import OpenAISettings
from seamline.sessions import open_store
from seamline.testing import scripted
from seamline.tools import tool
from tests.fakes.openai_api import FakeOpenAI


class Recorder(Provider):
    """Answers ``turn N``, remembering every request it was given."""

    name: ClassVar[str] = "recorder"
    default_model: ClassVar[str | None] = "recorder-1"
    cost_source = "free"
    real = False

    def __init__(self, *, model: str | None = None, options: dict[str, str] | None = None) -> None:
        super().__init__(model=model, options=options)
        self.requests: list[ModelRequest] = []

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        self.requests.append(msgspec.structs.replace(request, messages=list(request.messages)))
        return self._answer(len(self.requests))

    async def _answer(self, count: int) -> AsyncIterator[Event]:
        yield TextDelta(text=f"turn {count}")
        yield Text(text=f"turn {count}")
        yield Usage(input_tokens=1, output_tokens=1, cost_usd=0.0, priced=True)


@tool
def add(a: int, b: int = 2) -> str:
    """Add two integers."""
    return str(a + b)


def _system(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "system"]


def test_run_sync_gives_the_instructions_and_only_the_tools_asked_for(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = seamline.Agent(
        provider=recorder, instructions="Be brief.", tools=[add], workspace=tmp_path, workspace_tools=False
    )
    result = agent.run_sync("hi")
    assert result.outcome == "completed" and result.text == "turn 1"
    (request,) = recorder.requests
    assert _system(request) == ["Be brief."]
    assert [spec.name for spec in request.tools] == ["add"]  # workspace_tools=False: none of the workspace's


def test_a_workspace_given_offers_its_read_tools_only(tmp_path: Path) -> None:
    recorder = Recorder()
    seamline.Agent(provider=recorder, tools=[add], workspace=tmp_path).run_sync("hi")
    names = sorted(spec.name for spec in recorder.requests[0].tools)
    assert names == ["add", "grep", "list_dir", "read_file"]  # no write or shell tool without asking


def test_no_workspace_given_offers_only_the_tools_given() -> None:
    recorder = Recorder()
    seamline.Agent(provider=recorder, tools=[add]).run_sync("hi")
    assert [spec.name for spec in recorder.requests[0].tools] == ["add"]


def test_workspace_tools_are_offered_when_asked(tmp_path: Path) -> None:
    recorder = Recorder()
    seamline.Agent(provider=recorder, tools=[add], workspace=tmp_path, workspace_tools=True).run_sync("hi")
    names = [spec.name for spec in recorder.requests[0].tools]
    assert "add" in names and "read_file" in names


def test_a_tool_runs_through_the_agent(tmp_path: Path) -> None:
    provider = scripted([{"tool_calls": [{"name": "add", "arguments": {"a": 40}}]}, {"text": "42"}])
    result = seamline.Agent(provider=provider, tools=[add], workspace=tmp_path).run_sync("40 + 2?")
    assert result.text == "42"
    assert [e.output for e in result.events if e.type == "tool_result"] == ["42"]


def test_stream_yields_the_events_of_one_turn(tmp_path: Path) -> None:
    agent = seamline.Agent(provider=Recorder(), workspace=tmp_path)

    async def main() -> list[str]:
        return [event.type async for event in agent.stream("hi")]

    kinds = asyncio.run(main())
    assert kinds[0] == "session" and kinds[-1] == "complete" and "text_delta" in kinds


def test_a_session_keeps_the_conversation_across_turns(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = seamline.Agent(provider=recorder, instructions="Count.", workspace=tmp_path)

    async def main() -> tuple[str, str, str]:
        async with agent.session() as session:
            first = await session.run("one")
            second = await session.run("two")
            return first.session_id, second.session_id, second.text

    first_id, second_id, text = asyncio.run(main())
    assert first_id == second_id and text == "turn 2"
    contents = [m.content for m in recorder.requests[1].messages]
    assert contents[0] == "Count." and "one" in contents and "turn 1" in contents and contents[-1] == "two"


@pytest.mark.parametrize("how", ["resume", "fork"])
def test_instructions_survive_resume_and_fork(tmp_path: Path, how: str) -> None:
    store = open_store(tmp_path / "store.db")
    try:
        first = seamline.Agent(provider=Recorder(), instructions="Answer in French.", store=store, workspace=tmp_path)
        earlier = first.run_sync("bonjour").session_id
        later = Recorder()
        again = seamline.Agent(provider=later, store=store, workspace=tmp_path)  # no instructions of its own

        async def main() -> str:
            where = {"resume": earlier} if how == "resume" else {"fork": earlier}
            async with again.session(**where) as session:
                await session.run("encore")
                return session.session_id

        sid = asyncio.run(main())
        assert _system(later.requests[0]) == ["Answer in French."]
        assert store.require(sid).run_options.get("system_prompt") == "Answer in French."
        assert (sid == earlier) == (how == "resume")
    finally:
        store.close()


def test_resume_without_a_store_is_refused(tmp_path: Path) -> None:
    agent = seamline.Agent(provider=Recorder(), workspace=tmp_path)

    async def main() -> None:
        async with agent.session(resume="abc"):
            pass

    with pytest.raises(InvalidRequest, match="need a store"):
        asyncio.run(main())


def test_a_bad_provider_option_fails_when_the_agent_is_made() -> None:
    with pytest.raises(InvalidRequest):
        seamline.Agent(provider="openai", options={"route": "nowhere"})
    with pytest.raises(InvalidRequest):
        seamline.Agent(provider="no-such-provider")


@pytest.fixture
def real_allowed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The openai provider, pointed at the fake on 127.0.0.1, with a test key."""
    monkeypatch.delenv(BLOCK_ENV, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-agent")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield


@pytest.mark.usefixtures("real_allowed")
@pytest.mark.filterwarnings("error")
def test_typed_settings_and_sessions_close_their_clients(tmp_path: Path) -> None:
    script = [{"text": f"answer {n}", "usage": {"input_tokens": 3, "output_tokens": 1}} for n in range(4)]
    with FakeOpenAI(script) as fake:
        settings = OpenAISettings(base_url=fake.base_url, route="responses", max_retries=0)
        agent = seamline.Agent(provider=settings, model="gpt-4o", workspace=tmp_path)
        gc.collect()  # what earlier tests left behind is theirs, not this test's
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an unclosed client or "Event loop is closed" fails here
            assert agent.run_sync("one").text == "answer 0"
            assert agent.run_sync("two").text == "answer 1"

            async def main() -> str:
                async with agent.session() as session:
                    await session.run("three")
                    return (await session.run("four")).text

            assert asyncio.run(main()) == "answer 3"
            gc.collect()
    assert {r.path for r in fake.model_requests()} == {"/v1/responses"}


def test_settings_options_match_the_providers() -> None:
    from seamline.providers import settings as room
    from seamline.providers.registry import provider_class

    for name in room.__all__:
        kind = getattr(room, name)
        if kind is room.ProviderSettings:
            continue
        fields = {f.name for f in dataclasses.fields(kind) if f.name != "model"}
        known = set(provider_class(kind.provider).options)
        assert fields == known, f"{name}: {sorted(fields ^ known)}"
    assert OpenAISettings(route="responses", temperature=0.5).options() == {"route": "responses", "temperature": "0.5"}


def test_dir_lists_the_public_api_and_nothing_private() -> None:
    names = dir(seamline)
    assert names == sorted(seamline.__all__)
    for wanted in ("Agent", "AgentSession", "OpenAISettings", "RunResult", "run_sync", "tool", "Event"):
        assert wanted in names
    assert not [n for n in names if n.startswith("_") and n != "__version__"]
    assert not {"TYPE_CHECKING", "Any", "annotations", "importlib"} & set(names)
    for name in names:
        getattr(seamline, name)  # every listed name resolves


def test_the_functions_take_typed_settings_too(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Notes\nThe answer is forty-two.\n")
    settings = seamline.OfflineSettings(passages=1)
    result = seamline.run_sync("What is the answer?", provider=settings, workspace=tmp_path)
    assert result.outcome == "completed" and "forty-two" in result.text
    with pytest.raises(InvalidRequest, match="in the settings object"):
        seamline.Agent(provider=settings, options={"passages": "2"})
