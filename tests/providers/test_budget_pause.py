"""``on_budget="pause"`` on the model-API path, against the fake OpenAI server: a turn that
reaches its budget stops before its next model request with status ``paused`` and the
reason; raising the budget goes on from the stored conversation, and the fake sees exactly
the requests an unpaused run of the same script makes (no finished request sent again).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline.errors import InvalidRequest, RunNotPaused
from seamline.events import Event, Usage
from seamline.providers.registry import create_provider
from seamline.runner import open_session, raise_budget
from seamline.sessions.records import SessionRecord
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools import Toolset
from seamline.usage import priced_usage
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import FAST, lookup, model_api_env, of_type, tool_step

__all__ = ["model_api_env"]

pytestmark = pytest.mark.usefixtures("model_api_env")

MODEL = "gpt-4o"
USAGE = {"input_tokens": 1000, "output_tokens": 100}
# Three requests that call a tool, then the answer: four model requests in all.
SCRIPT: list[dict[str, Any]] = [
    tool_step(("lookup", {"key": "a"}), **USAGE),
    tool_step(("lookup", {"key": "b"}), **USAGE),
    tool_step(("lookup", {"key": "c"}), **USAGE),
    {"text": "all found", "usage": USAGE},
]


def one_request() -> float:
    cost = priced_usage(Usage(**USAGE), model=MODEL, rates=create_provider("openai", model=MODEL).rates(MODEL)).cost_usd
    assert cost is not None
    return cost


def stored(store_file: Path, session_id: str) -> SessionRecord:
    store = SQLiteStore(store_file)
    try:
        return store.require(session_id)
    finally:
        store.close()


def options(fake: FakeOpenAI) -> dict[str, str]:
    return {"base_url": fake.base_url, **FAST}


def unpaused_count() -> tuple[int, str]:
    """How many model requests the script takes without a budget, and its answer."""
    with FakeOpenAI(SCRIPT) as fake:
        result = seamline.run_sync(
            "go", provider="openai", model=MODEL, options=options(fake), tools=Toolset([lookup]), store=None
        )
        return len(fake.model_requests()), result.text


def test_a_paused_run_raised_from_the_store_sends_no_request_twice(tmp_path: Path) -> None:
    baseline, answer = unpaused_count()
    assert baseline == 4 and answer == "all found"
    store_file = tmp_path / "runs.db"
    with FakeOpenAI(SCRIPT) as fake:
        first = seamline.run_sync(
            "go",
            provider="openai",
            model=MODEL,
            options=options(fake),
            tools=Toolset([lookup]),
            store=store_file,
            budget_usd=2 * one_request(),
            on_budget="pause",
        )
        assert len(fake.model_requests()) == 2  # paused before the third
        assert first.outcome == "budget" and first.stop_reason == "paused"
        (notice,) = of_type(first.events, "error")
        assert notice.kind == "budget" and notice.message.startswith("paused:") and notice.retryable
        assert f"spent {2 * one_request():.6f} USD" in notice.message
        assert len(of_type(first.events, "tool_result")) == 2  # the second request's tool ran
        record = stored(store_file, first.session_id)
        assert record.status == "paused"
        assert record.metadata["paused"]["spent_usd"] == pytest.approx(2 * one_request())

        async def go_on() -> list[Event]:
            return [
                e
                async for e in raise_budget(
                    first.session_id,
                    budget_usd=10 * one_request(),
                    store=store_file,
                    options=seamline.RunOptions(options=options(fake), tools=Toolset([lookup])),
                )
            ]

        events = asyncio.run(go_on())
        sent = fake.model_requests()
    final = events[-1]
    assert final.type == "complete" and final.outcome == "completed" and final.text == "all found"  # type: ignore[union-attr]
    assert len(sent) == baseline  # no request of the paused part was sent again
    # The third request goes on from the conversation: both tool results are in it, once.
    third = sent[2].body
    tool_messages = [m for m in third["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["value of a", "value of b"]
    assert [m["role"] for m in third["messages"]].count("user") == 1
    record = stored(store_file, first.session_id)
    assert record.status == "completed" and record.metadata.get("paused") is None


def test_a_live_session_goes_on_in_process_and_may_pause_again() -> None:
    baseline, _ = unpaused_count()
    one = one_request()
    with FakeOpenAI(SCRIPT) as fake:

        async def scenario() -> tuple[list[Event], list[Event], list[Event]]:
            async with open_session(
                provider="openai", model=MODEL, options=options(fake), tools=Toolset([lookup]), on_budget="pause"
            ) as session:
                first = [e async for e in session.send("go", budget_usd=0.5 * one)]
                again = [e async for e in session.continue_paused(budget_usd=2.5 * one)]
                last = [e async for e in session.continue_paused(budget_usd=10 * one)]
                return first, again, last

        first, again, last = asyncio.run(scenario())
        bodies = [r.body for r in fake.model_requests()]
        sent = len(bodies)
    assert [e.stop_reason for e in (first[-1], again[-1])] == ["paused", "paused"]  # type: ignore[union-attr]
    assert len(of_type(first, "usage")) == 1 and len(of_type(again, "usage")) == 2
    assert last[-1].outcome == "completed" and last[-1].text == "all found"  # type: ignore[union-attr]
    assert sent == baseline
    # Each request carries every tool result before it, once: nothing was asked again.
    assert [sum(m["role"] == "tool" for m in b["messages"]) for b in bodies] == [0, 1, 2, 3]


def test_a_run_that_is_not_paused_cannot_be_raised(tmp_path: Path) -> None:
    store_file = tmp_path / "runs.db"
    done = seamline.run_sync("hi", store=store_file)  # the offline provider: completed
    assert done.outcome == "completed"

    async def go_on() -> list[Event]:
        return [e async for e in raise_budget(done.session_id, budget_usd=1.0, store=store_file)]

    with pytest.raises(RunNotPaused, match="is not paused at its budget \\(status: completed\\)"):
        asyncio.run(go_on())


def test_pause_is_refused_for_a_backend_that_runs_its_own_turns() -> None:
    with pytest.raises(InvalidRequest, match="runs its own turns"):
        seamline.run_sync("hi", provider="claude-code", budget_usd=1.0, on_budget="pause", store=None)
