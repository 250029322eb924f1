"""Sessions that last, on SQLite and PostgreSQL: record, raw log, ledger, transcript,
resume and fork."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from seamline.errors import AuthFailure, InvalidRequest
from seamline.events import Complete, Event, Session, Text, ToolCall, Usage
from seamline.loop.messages import Message, ModelRequest
from seamline.providers.base import Provider, ProviderSession
from seamline.sessions import transcript as transcript_module
from seamline.sessions.records import SessionRecord
from seamline.testing import scripted
from seamline.tools import Toolset, tool
from tests.sessions.conftest import StoreFactory

Script = list[dict[str, object]]


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def one_turn(session: ProviderSession, prompt: str) -> list[Event]:
    return [e async for e in session.send(prompt)]


def tool_script() -> Script:
    return [
        {
            "text": "checking",
            "tool_calls": [{"name": "lookup", "arguments": {"key": "a"}, "id": "call-a"}],
            "usage": {"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.01},
        },
        {"text": "a is known", "usage": {"input_tokens": 150, "output_tokens": 5, "cost_usd": 0.02}},
    ]


def test_record_raw_log_and_ledger_are_written_as_they_stream(make_store: StoreFactory) -> None:
    store, observer = make_store(), make_store()  # a second connection sees only what is committed

    async def go() -> tuple[str, list[tuple[str, int, int]]]:
        session = await scripted(tool_script()).open(store=store, tools=Toolset([lookup]), metadata={"team": "x"})
        seen: list[tuple[str, int, int]] = []
        async for event in session.send("what is a?"):
            if isinstance(event, (Usage, Complete)):
                seen.append(
                    (
                        event.type,
                        len(observer.usage_rows(session.session_id)),
                        len(list(observer.raw_rows(session.session_id))),
                    )
                )
        return session.session_id, seen

    sid, seen = asyncio.run(go())
    # the first usage is on disk before the caller sees it, and so is the log before complete
    assert seen[0][:2] == ("usage", 1)
    assert seen[1][:2] == ("usage", 2)
    assert seen[-1][0] == "complete" and seen[-1][2] >= seen[1][2]
    record = observer.get(sid)
    assert record is not None
    assert (record.provider, record.model, record.status, record.metadata) == (
        "scripted",
        "scripted",
        "completed",
        {"team": "x"},
    )
    rows = list(observer.raw_rows(sid))
    assert rows[0].source == "prompt" and rows[0].direction == "in"
    assert '"type":"complete"' in rows[-1].payload


def test_transcript_with_stable_tool_call_ids_and_files(make_store: StoreFactory) -> None:
    store = make_store()
    script: Script = [
        {
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "a.txt"}, "id": "c1"},
                {"name": "write_file", "arguments": {"path": "b.txt", "content": "x"}, "id": "c2"},
            ]
        },
        {"text": "done"},
    ]
    import tempfile
    from pathlib import Path

    from seamline.tools import Workspace, workspace_tools
    from seamline.tools.approval import YesApproval

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a.txt").write_text("hello")

        async def go() -> str:
            ws = Workspace(tmp)
            session = await scripted(script).open(
                store=store, tools=workspace_tools(ws), approval=YesApproval(yes=True)
            )
            await one_turn(session, "copy")
            return session.session_id

        sid = asyncio.run(go())
    entries = store.transcript(sid)
    assert [e.kind for e in entries] == [
        "user",
        "tool_call",
        "tool_call",
        "file_change",
        "tool_result",
        "file_change",
        "tool_result",
        "assistant",
    ]
    calls = {e.call_id for e in entries if e.kind == "tool_call"}
    results = {e.call_id for e in entries if e.kind == "tool_result"}
    assert calls == results == {"c1", "c2"}
    current = transcript_module.EventsTranscriptParser.version
    assert all(e.parser == "events" and e.parser_version == current for e in entries)
    touched = {f.path: f.kinds for f in store.files_touched(sid)}
    assert touched == {"a.txt": ("read",), "b.txt": ("edited", "created")}


def test_parser_version_bump_rederives_lazily(make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store()

    async def go() -> str:
        session = await scripted([{"text": "hi"}]).open(store=store)
        await one_turn(session, "hello")
        return session.session_id

    sid = asyncio.run(go())
    current = transcript_module.EventsTranscriptParser.version
    assert {e.parser_version for e in store.transcript(sid)} == {current}
    monkeypatch.setattr(transcript_module.EventsTranscriptParser, "version", current + 1)
    assert {e.parser_version for e in store.transcript(sid)} == {current + 1}
    assert {e.parser_version for e in make_store().transcript(sid)} == {current + 1}


class Recording(Provider):
    """A loop provider that records the conversation each model call receives."""

    name: ClassVar[str] = "recording"
    real = False
    seen: ClassVar[list[list[Message]]] = []

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        Recording.seen.append(list(request.messages))
        return self._answer(len(request.messages))

    async def _answer(self, n: int) -> AsyncIterator[Event]:
        yield Text(text=f"answer after {n} messages")


def test_emulated_resume_gives_the_earlier_conversation(make_store: StoreFactory) -> None:
    store = make_store()
    Recording.seen = []

    async def first() -> str:
        session = await Recording().open(store=store)
        await one_turn(session, "first question")
        return session.session_id

    sid = asyncio.run(first())

    async def second() -> list[Event]:
        session = await Recording().resume(sid, store=make_store())
        assert session.resumed == "emulated"
        return await one_turn(session, "second question")

    events = asyncio.run(second())
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"
    last = Recording.seen[-1]
    assert [(m.role, m.content) for m in last] == [
        ("user", "first question"),
        ("assistant", "answer after 1 messages"),
        ("user", "second question"),
    ]
    record = store.get(sid)
    assert record is not None and record.metadata["last_resume"] == "emulated"
    turns = {r.turn for r in store.raw_rows(sid)}
    assert turns == {1, 2}


class NativeAgent(Provider):
    """An own-tools provider whose backend mints ids and resumes and forks natively."""

    name: ClassVar[str] = "native-agent"
    runs_own_tools = True
    forking = "native"
    resume_support = "native"
    session_ids = "provider"
    real = False
    calls: ClassVar[list[tuple[str, str | None, str | None]]] = []

    async def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        parent = session.state.get("fork_from_provider_session_id")
        NativeAgent.calls.append((prompt, session.provider_session_id, parent))
        native = session.provider_session_id or f"native-{len(NativeAgent.calls)}"
        yield Session(session_id=session.session_id, provider=self.name, model=None, provider_session_id=native)
        yield Complete(outcome="completed", stop_reason="end_turn", text=f"ok {prompt}")


class EmulatingAgent(NativeAgent):
    name: ClassVar[str] = "emulating-agent"
    forking = "emulated"
    resume_support = "emulated"


class StatelessAgent(NativeAgent):
    name: ClassVar[str] = "stateless-agent"
    forking = "none"
    resume_support = "none"


def test_native_resume_and_fork_use_the_provider_id(make_store: StoreFactory) -> None:
    store = make_store()
    NativeAgent.calls = []

    async def go() -> tuple[str, str]:
        first = await NativeAgent().open(store=store)
        await one_turn(first, "one")
        again = await NativeAgent().resume(first.session_id, store=store)
        assert again.resumed == "native"
        await one_turn(again, "two")
        fork = await NativeAgent().fork(first.session_id, store=store)
        await one_turn(fork, "three")
        return first.session_id, fork.session_id

    first, fork = asyncio.run(go())
    assert NativeAgent.calls == [("one", None, None), ("two", "native-1", None), ("three", None, "native-1")]
    record = store.get(fork)
    assert record is not None and record.parent_id == first and record.metadata["fork"] == "native"
    assert record.provider_session_id == "native-3"


def test_emulated_resume_of_an_agent_sends_the_history(make_store: StoreFactory) -> None:
    store = make_store()
    NativeAgent.calls = []

    async def go() -> None:
        first = await EmulatingAgent().open(store=store)
        await one_turn(first, "remember 42")
        again = await EmulatingAgent().resume(first.session_id, store=store)
        await one_turn(again, "what number?")

    asyncio.run(go())
    prompt = NativeAgent.calls[-1][0]
    assert "User: remember 42" in prompt and "Assistant: ok remember 42" in prompt and prompt.endswith("what number?")


def test_a_provider_that_cannot_resume_says_so(make_store: StoreFactory) -> None:
    store = make_store()

    async def go() -> str:
        first = await StatelessAgent().open(store=store)
        await one_turn(first, "x")
        return first.session_id

    sid = asyncio.run(go())
    with pytest.raises(InvalidRequest, match="cannot resume"):
        asyncio.run(StatelessAgent().resume(sid, store=store))
    with pytest.raises(InvalidRequest, match="cannot fork"):
        asyncio.run(StatelessAgent().fork(sid, store=store))
    with pytest.raises(InvalidRequest, match="belongs to provider stateless-agent"):
        asyncio.run(NativeAgent().resume(sid, store=store))
    with pytest.raises(InvalidRequest, match="no session"):
        asyncio.run(NativeAgent().resume("0000000000", store=store))


def test_emulated_fork_at_a_message_copies_history_and_costs_sum(make_store: StoreFactory) -> None:
    store = make_store()
    Recording.seen = []

    async def go() -> tuple[str, str]:
        first = await scripted(tool_script()).open(store=store, tools=Toolset([lookup]))
        await one_turn(first, "what is a?")
        session = await scripted([{"text": "forked", "usage": {"input_tokens": 1, "output_tokens": 1}}]).fork(
            first.session_id, store=store, at=3, tools=Toolset([lookup])
        )
        await one_turn(session, "and b?")
        return first.session_id, session.session_id

    parent, child = asyncio.run(go())
    child_entries = store.transcript(child)
    assert [e.kind for e in child_entries][:4] == ["user", "assistant", "tool_call", "tool_result"]
    assert child_entries[4].content == "and b?"
    record: SessionRecord | None = store.get(child)
    assert record is not None and record.parent_id == parent
    assert record.metadata == {"fork_of": parent, "fork": "emulated", "fork_at": 3}
    own = store.totals(parent, include_descendants=False)
    tree = store.totals(parent)
    assert own.cost_usd == pytest.approx(0.03) and own.cost_known
    # the fork's figure had no price: the sum stays a lower bound, never a silent zero
    assert tree.sessions == 2 and tree.cost_usd == pytest.approx(0.03) and tree.unpriced == 1
    assert tree.describe_cost() == "at least $0.0300 (1 unpriced)"
    with pytest.raises(InvalidRequest, match="outside the session"):
        asyncio.run(scripted([]).fork(parent, store=store, at=99))


def test_remove_a_session(make_store: StoreFactory) -> None:
    store = make_store()

    async def go() -> str:
        session = await scripted(tool_script()).open(store=store, tools=Toolset([lookup]))
        await one_turn(session, "x")
        return session.session_id

    sid = asyncio.run(go())
    store.transcript(sid)
    store.delete_session(sid)
    assert store.get(sid) is None and list(store.raw_rows(sid)) == [] and store.usage_rows(sid) == []


def test_many_runs_at_once_lose_nothing(make_store: StoreFactory) -> None:
    store = make_store()

    async def one(i: int) -> str:
        script: Script = [
            {
                "tool_calls": [{"name": "lookup", "arguments": {"key": str(i)}}],
                "delay": 0.001,
                "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.001},
            },
            {"text": f"done {i}", "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.001}},
        ]
        session = await scripted(script).open(store=store, tools=Toolset([lookup]))
        events = await one_turn(session, f"run {i}")
        assert isinstance(events[-1], Complete) and events[-1].text == f"done {i}"
        return session.session_id

    async def go() -> list[str]:
        return list(await asyncio.gather(*(one(i) for i in range(100))))

    ids = asyncio.run(go())
    assert len(set(ids)) == 100
    for sid in ids:
        assert len(store.usage_rows(sid)) == 2
        assert store.get(sid).status == "completed"  # type: ignore[union-attr]
    assert sum(1 for sid in ids for r in store.raw_rows(sid) if '"type":"complete"' in r.payload) == 100


def test_tool_calls_lacking_results_are_dropped_on_rebuild() -> None:
    from seamline.providers.base import messages_from_transcript
    from seamline.sessions.records import TranscriptEntry

    def entry(i: int, kind: str, call_id: str | None = None) -> TranscriptEntry:
        return TranscriptEntry(i, 1, kind, "assistant", "", call_id, {"name": "t", "arguments": {}}, i, "events", 1)

    messages = messages_from_transcript(
        [entry(0, "tool_call", "a"), entry(1, "tool_call", "b"), entry(2, "tool_result", "a")]
    )
    assert [c.call_id for c in messages[0].tool_calls] == ["a"]
    assert [m.role for m in messages] == ["assistant", "tool"]
    assert isinstance(messages[0].tool_calls[0], ToolCall)


def test_concurrent_sessions_share_commits(make_store: StoreFactory) -> None:
    """Group commit: figures that arrive together are written in one transaction, and each
    caller resumes only after its own figure is on disk."""
    store = make_store()
    observer = make_store()
    commits = 0
    real = store.flush

    def counting_flush() -> None:
        nonlocal commits
        commits += 1
        real()

    store.flush = counting_flush  # type: ignore[method-assign]
    seen_on_disk: list[int] = []

    async def one(i: int) -> None:
        script: Script = [{"text": f"r{i}", "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.001}}]
        session = await scripted(script).open(store=store)
        async for event in session.send("go"):
            if isinstance(event, Usage):
                seen_on_disk.append(len(observer.usage_rows(session.session_id)))

    async def go() -> None:
        await asyncio.gather(*(one(i) for i in range(40)))

    asyncio.run(go())
    assert seen_on_disk == [1] * 40
    # 40 session records, 40 usage figures and 40 turn ends: far fewer commits than writes
    assert commits <= 12, commits
    assert len(store.list_sessions(limit=100)) == 40


def test_every_provider_that_cannot_fork_says_so_before_asking_for_a_key(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from seamline.providers.base import BLOCK_ENV
    from seamline.providers.registry import provider_class, provider_names

    for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", BLOCK_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))  # no stored login either
    store = make_store()

    class KeyedStatelessAgent(StatelessAgent):
        name: ClassVar[str] = "keyed-stateless-agent"

        def _ready(self) -> None:
            raise AuthFailure("keyed-stateless-agent: no KEYED_API_KEY")

    classes: list[type[Provider]] = [KeyedStatelessAgent]
    for name in provider_names():
        try:
            classes.append(provider_class(name))
        except InvalidRequest:
            continue  # an extra that is not installed
    unforkable = [cls for cls in classes if cls.forking == "none"]
    assert {cls.name for cls in unforkable} >= {"gemini-cli", "keyed-stateless-agent"}
    for cls in unforkable:
        store.create_session(f"sid-{cls.name}", provider=cls.name, model=None)
        with pytest.raises(InvalidRequest, match=f"{cls.name} cannot fork"):
            asyncio.run(cls().fork(f"sid-{cls.name}", store=store))
