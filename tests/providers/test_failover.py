"""Failover (``fallback=``, ``--fallback``): a turn that fails for want of capacity is
handed over to the next backend and sent again; one transcript, the switch recorded with
its reason (see ``seamline.providers.failover``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline.errors import InvalidRequest
from seamline.events import Complete, Error, Event, Raw, Session
from seamline.providers.base import ProviderSession
from seamline.providers.failover import Fallback, fails_over, parse_fallback
from seamline.runner import RunOptions, open_session
from seamline.sessions.handoffs import backend_spans, handoffs_of
from seamline.sessions.records import RawRow
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.sessions.transcript import derive_transcript
from seamline.testing import scripted
from seamline.tools import Toolset
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import lookup
from tests.providers.model_api_support import model_api_env as model_api_env  # a fixture

OVERLOADED = {"error": {"kind": "provider", "message": "overloaded", "retryable": True}}


def _the_one_complete(events: list[Event]) -> Complete:
    completes = [e for e in events if isinstance(e, Complete)]
    assert len(completes) == 1 and events[-1] is completes[0], events
    return completes[0]


def _handoff_events(events: list[Event]) -> list[dict[str, Any]]:
    return [e.payload for e in events if isinstance(e, Raw) and e.source == "handoff"]


def _said(store: SQLiteStore, session_id: str) -> list[tuple[int, str, str]]:
    store.flush()
    return [(e.turn, e.role, e.content) for e in store.transcript(session_id) if e.kind in ("user", "assistant")]


@pytest.mark.usefixtures("model_api_env")
def test_an_overloaded_anthropic_hands_the_turn_to_openai(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    with (
        FakeAnthropic([], fallback={"status": 529}) as anthropic,
        FakeOpenAI([{"text": "The backup answers."}]) as openai,
    ):
        result = seamline.run_sync(
            "Which bird?",
            provider="anthropic",
            model="claude-sonnet-4-6",
            options={"base_url": anthropic.base_url, "max_retries": "0"},
            fallback=[Fallback("openai", "gpt-4o-mini", {"base_url": openai.base_url})],
            store=store,
            workspace=tmp_path,
        )
        sent = [json.dumps(r.body) for r in openai.model_requests()]
    assert (result.outcome, result.text) == ("completed", "The backup answers.")
    final = _the_one_complete(result.events)
    assert final.outcome == "completed"
    sessions = [(e.provider, e.model) for e in result.events if isinstance(e, Session)]
    assert sessions == [("anthropic", "claude-sonnet-4-6"), ("openai", "gpt-4o-mini")]
    errors = [e for e in result.events if isinstance(e, Error)]
    assert [(e.kind, e.retryable) for e in errors] == [("provider", True)]  # the 529, as it ended the attempt
    (switch,) = _handoff_events(result.events)
    assert (switch["from"], switch["to"], switch["to_model"], switch["reason"]) == (
        "anthropic",
        "openai",
        "gpt-4o-mini",
        "provider",
    )
    assert "529" in switch["message"]
    assert len(sent) == 1 and sent[0].count("Which bird?") == 1  # the prompt once, not twice
    assert _said(store, result.session_id) == [(1, "user", "Which bird?"), (1, "assistant", "The backup answers.")]
    record = store.require(result.session_id)
    assert (record.provider, record.model, record.status) == ("openai", "gpt-4o-mini", "completed")
    (entry,) = handoffs_of(record.metadata)
    assert (entry["from"], entry["to"], entry["reason"], entry["failover"], entry["after_turn"]) == (
        "anthropic",
        "openai",
        "provider",
        True,
        0,
    )
    sources = [row.source for row in store.raw_rows(result.session_id)]
    assert sources.count("prompt") == 2 and sources.index("handoff") < len(sources) - sources[::-1].index("prompt")
    assert record.run_options["provider_options"] == {"base_url": openai.base_url}  # `run --session` goes on there
    store.close()


def test_a_session_fails_over_mid_way_with_its_history(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    backup = scripted([{"text": "second answer"}], model="backup-model")
    agent = seamline.Agent(
        provider=scripted([{"text": "first answer"}, {"error": {"kind": "quota", "message": "rate limited"}}]),
        fallback=[backup],
        store=store,
        workspace=tmp_path,
        instructions="Be brief.",
    )

    async def go() -> tuple[str, seamline.RunResult, seamline.RunResult]:
        async with agent.session() as session:
            return session.session_id, await session.run("one"), await session.run("two")

    sid, first, second = asyncio.run(go())
    assert (first.text, second.text, second.outcome) == ("first answer", "second answer", "completed")
    assert backup.last_call is not None
    asked = [(m.role, m.content) for m in backup.last_call.messages]
    assert asked == [("system", "Be brief."), ("user", "one"), ("assistant", "first answer"), ("user", "two")]
    assert _said(store, sid) == [
        (1, "user", "one"),
        (1, "assistant", "first answer"),
        (2, "user", "two"),
        (2, "assistant", "second answer"),
    ]
    record = store.require(sid)
    (entry,) = handoffs_of(record.metadata)
    assert (entry["after_turn"], entry["at_message"], entry["reason"]) == (1, 2, "quota")
    spans = backend_spans(record.provider, record.model, handoffs_of(record.metadata), store.usage_rows(sid))
    assert [(s.model, s.turns) for s in spans] == [("scripted", (1, 1)), ("backup-model", (2, None))]
    store.close()


@pytest.mark.usefixtures("model_api_env")
def test_an_invalid_request_does_not_fail_over(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    backup = scripted([{"text": "never"}])
    with FakeAnthropic([], fallback={"status": 400, "message": "bad field"}) as anthropic:
        result = seamline.run_sync(
            "go",
            provider="anthropic",
            model="claude-sonnet-4-6",
            options={"base_url": anthropic.base_url, "max_retries": "0"},
            fallback=[backup],
            store=store,
            workspace=tmp_path,
        )
    assert (result.outcome, result.stop_reason) == ("failed", "invalid_request")
    assert backup.last_call is None and _handoff_events(result.events) == []
    record = store.require(result.session_id)
    assert record.provider == "anthropic" and handoffs_of(record.metadata) == []
    store.close()


def test_every_fallback_failing_ends_with_the_last_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    second = scripted([{"error": {"kind": "quota", "message": "out of credit", "retryable": False}}], model="b")
    third = scripted([{"error": {"kind": "provider", "message": "also overloaded", "retryable": True}}], model="c")
    result = seamline.run_sync(
        "go", provider=scripted([OVERLOADED]), fallback=[second, third], store=store, workspace=tmp_path
    )
    final = _the_one_complete(result.events)
    assert (final.outcome, final.stop_reason) == ("failed", "provider")
    assert [e.message for e in result.events if isinstance(e, Error)] == [
        "overloaded",
        "out of credit",
        "also overloaded",
    ]
    assert [(h["to_model"], h["reason"]) for h in _handoff_events(result.events)] == [("b", "provider"), ("c", "quota")]
    assert len(second.calls) == 1 and len(third.calls) == 1  # each at most once in the turn
    assert _said(store, result.session_id) == [(1, "user", "go")]  # the last attempt's prompt, once
    store.close()


def test_the_budget_covers_every_backend_of_the_turn(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    spent = {"input_tokens": 10, "output_tokens": 1, "cost_usd": 0.008}
    first = scripted([{"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}], "usage": spent}, OVERLOADED])
    backup = scripted([{"text": "done", "usage": {"input_tokens": 10, "output_tokens": 1, "cost_usd": 0.005}}])
    result = seamline.run_sync(
        "go",
        provider=first,
        fallback=[backup],
        budget_usd=0.01,
        tools=Toolset([lookup]),
        store=store,
        workspace=tmp_path,
    )
    assert (result.outcome, result.stop_reason) == ("budget", "budget")  # 0.008 + 0.005 passed 0.01
    assert len(backup.calls) == 1
    store.close()


def test_a_fallback_that_cannot_start_passes_the_turn_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    store = SQLiteStore(tmp_path / "s.db")
    keyless = Fallback("openai", "gpt-4o-mini", {"base_url": "https://api.openai.com/v1"})
    result = seamline.run_sync(
        "go",
        provider=scripted([OVERLOADED]),
        fallback=[keyless, scripted([{"text": "taken"}])],
        store=store,
        workspace=tmp_path,
    )
    errors = [e.kind for e in result.events if isinstance(e, Error)]
    assert errors[0] == "provider" and errors[1] in ("auth", "permission")  # no key, or real calls blocked
    assert result.text == "taken"
    assert [h["to"] for h in _handoff_events(result.events)] == ["scripted"]
    assert [h["to"] for h in handoffs_of(store.require(result.session_id).metadata)] == ["scripted"]
    store.close()


def test_a_stop_while_the_fallback_gets_ready_ends_the_turn_aborted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    opened: list[ProviderSession] = []
    backup = scripted([{"text": "never"}])

    async def stopped_meanwhile(session: ProviderSession) -> None:
        await opened[0].provider.abort(opened[0])  # Ctrl-C lands on the session that failed

    monkeypatch.setattr(backup, "_open", stopped_meanwhile)
    result = seamline.run_sync(
        "go", provider=scripted([OVERLOADED]), fallback=[backup], store=store, workspace=tmp_path, on_open=opened.append
    )
    assert (result.outcome, result.stop_reason) == ("aborted", "aborted")
    assert backup.calls == [] and len(_handoff_events(result.events)) == 1
    _the_one_complete(result.events)
    store.close()


def test_fallbacks_are_checked_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="unknown provider 'nope'"):
        seamline.run_sync("go", fallback=["nope:model"], store=tmp_path / "s.db", workspace=tmp_path)
    opened: list[object] = []
    with pytest.raises(InvalidRequest, match="needs a store"):
        seamline.run_sync("go", fallback=["offline"], store=None, workspace=tmp_path, on_open=opened.append)
    assert opened == []  # refused before a session opened
    with pytest.raises(InvalidRequest, match="needs a store"):
        seamline.Agent(fallback=["offline"], store=None)
    with pytest.raises(InvalidRequest, match="unknown provider"):
        seamline.Agent(fallback=["nope"], store=tmp_path / "s.db")
    with pytest.raises(InvalidRequest, match="open_failover"):
        asyncio.run(_open_plain(RunOptions(fallback=["offline"], store=tmp_path / "s.db", workspace=tmp_path)))
    assert not (tmp_path / "s.db").exists() or SQLiteStore(tmp_path / "s.db").list_sessions() == []


async def _open_plain(options: RunOptions) -> None:
    async with open_session(options):
        pass


def test_a_fallback_names_a_provider_and_maybe_a_model() -> None:
    assert parse_fallback("openai:gpt-4o-mini") == Fallback("openai", "gpt-4o-mini")
    assert parse_fallback("offline") == Fallback("offline", None)
    assert parse_fallback("openai:ollama/llama3:8b").model == "ollama/llama3:8b"  # the first colon splits
    for bad in ("", ":gpt-4o", "nope"):
        with pytest.raises(InvalidRequest):
            parse_fallback(bad)


def test_only_a_want_of_capacity_fails_over() -> None:
    assert fails_over(Error(kind="quota", message="429", retryable=True))
    assert fails_over(Error(kind="quota", message="insufficient_quota", retryable=False))
    assert fails_over(Error(kind="provider", message="529 overloaded", retryable=True))
    assert not fails_over(Error(kind="provider", message="a bug", retryable=False))
    for kind in ("invalid_request", "auth", "transport", "timeout", "budget", "permission"):
        assert not fails_over(Error(kind=kind, message="x", retryable=True))  # type: ignore[arg-type]


def test_a_turn_sent_again_keeps_its_rows_from_its_last_prompt_on() -> None:
    def row(seq: int, turn: int, source: str, payload: object) -> RawRow:
        return RawRow(seq, "s", turn, "out", source, json.dumps(payload), 0.0)

    rows = [
        row(1, 1, "prompt", "one"),
        row(2, 1, "event", {"type": "text", "text": "a"}),
        row(3, 2, "prompt", "two"),
        row(4, 2, "event", {"type": "text", "text": "half an answer"}),
        row(5, 2, "handoff", {"from": "x", "to": "y"}),
        row(6, 2, "prompt", "two"),
        row(7, 2, "event", {"type": "text", "text": "b"}),
    ]
    said = [(e.turn, e.kind, e.content) for e in derive_transcript(rows)]
    assert said == [(1, "user", "one"), (1, "assistant", "a"), (2, "user", "two"), (2, "assistant", "b")]
