"""The ``anthropic`` provider against the fake Messages API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import seamline
from seamline.errors import InvalidRequest, PermissionDenied
from seamline.events import ToolCall
from seamline.extras import install_hint
from seamline.loop.messages import Message
from seamline.providers.model_apis.anthropic_api import AnthropicProvider, anthropic_messages
from seamline.providers.registry import create_provider
from seamline.sessions.sqlite_store import SQLiteStore
from tests.fakes.anthropic_api import FakeAnthropic
from tests.providers.model_api_support import (
    ANTHROPIC_KEY,
    FAST,
    model_api_env,
    of_type,
    raw_log,
    run_turn,
    tool_step,
)

__all__ = ["model_api_env"]

pytestmark = pytest.mark.usefixtures("model_api_env")
MODEL = "claude-sonnet-4-6"


def bodies(fake: FakeAnthropic) -> list[dict]:
    return [r.body for r in fake.model_requests()]


def test_plain_answer_with_cache_tokens_counted_our_way() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 20, "cache_read_tokens": 600, "cache_write_tokens": 100}
    with FakeAnthropic([{"text": "Hello from Claude", "usage": usage}], api_key=ANTHROPIC_KEY) as fake:
        result = run_turn("anthropic", fake, model=MODEL)
    assert result.outcome == "completed" and result.text == "Hello from Claude"
    assert "".join(e.text for e in of_type(result.events, "text_delta")) == "Hello from Claude"
    (u,) = of_type(result.events, "usage")
    # the wire said input_tokens=300 (cache apart); seamline counts every input token
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (1000, 20, 600, 100)
    assert u.priced and u.cost_usd == pytest.approx((300 * 3 + 600 * 0.3 + 100 * 3.75 + 20 * 15) / 1e6)
    request = fake.model_requests()[0]
    assert request.path == "/v1/messages"
    # this SDK sends the key as a bearer token; older ones as x-api-key
    assert ANTHROPIC_KEY in (request.headers.get("x-api-key"), request.headers.get("authorization", "")[7:])
    assert request.body["stream"] is True and request.body["max_tokens"] == 8192
    assert request.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "go"}]}]


def test_multi_step_run_with_parallel_tool_calls() -> None:
    script = [
        tool_step(("lookup", {"key": "x"}), ("lookup", {"key": "y"}), text="Checking both.", input_tokens=40),
        tool_step(("lookup", {"key": "z"})),
        {"text": "x, y, z done"},
    ]
    with FakeAnthropic(script) as fake:
        result = run_turn("anthropic", fake, model=MODEL)
    assert result.outcome == "completed" and result.text == "x, y, z done"
    calls = of_type(result.events, "tool_call")
    assert [c.arguments for c in calls] == [{"key": "x"}, {"key": "y"}, {"key": "z"}]
    assert all(c.call_id.startswith("toolu_") for c in calls) and len({c.call_id for c in calls}) == 3
    assert [r.call_id for r in of_type(result.events, "tool_result")] == [c.call_id for c in calls]
    sent = bodies(fake)
    assert sent[0]["tools"] == [
        {"name": "lookup", "description": "Look a key up.", "input_schema": sent[0]["tools"][0]["input_schema"]}
    ]
    second = sent[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assistant = second[1]["content"]
    assert assistant[0] == {"type": "text", "text": "Checking both."}
    assert [b["id"] for b in assistant[1:]] == [calls[0].call_id, calls[1].call_id]
    # both results in ONE user message, as the API requires
    results = second[2]["content"]
    assert [(b["type"], b["tool_use_id"], b["content"]) for b in results] == [
        ("tool_result", calls[0].call_id, "value of x"),
        ("tool_result", calls[1].call_id, "value of y"),
    ]
    assert len(of_type(result.events, "usage")) == 3


def test_thinking_streams_as_reasoning_and_is_sent_back_with_its_signature() -> None:
    script = [
        {"reasoning": "I should look it up", "tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
        {"text": "found it"},
    ]
    with FakeAnthropic(script) as fake:
        result = run_turn("anthropic", fake, model=MODEL, options={"reasoning_effort": "low"})
    assert "".join(e.text for e in of_type(result.events, "reasoning_delta")) == "I should look it up"
    first, second = bodies(fake)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024} and "temperature" not in first
    assert first["max_tokens"] > 1024
    replayed = second["messages"][1]["content"][0]
    assert replayed["type"] == "thinking" and replayed["thinking"] == "I should look it up"
    assert replayed["signature"].startswith("sig-fake-")


def test_system_prompt_goes_top_level() -> None:
    system, messages = anthropic_messages(
        [
            Message(role="system", content="Be brief."),
            Message(role="user", content="hi"),
        ]
    )
    assert system == "Be brief." and messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_unknown_model_is_unpriced() -> None:
    with FakeAnthropic([{"text": "hi"}]) as fake:
        result = run_turn("anthropic", fake, model="claude-internal-test")
    (usage,) = of_type(result.events, "usage")
    assert usage.priced is False and usage.cost_usd is None


def test_identity_and_base_url_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic([{"text": "a", "model": "claude-sonnet-4-6-20260101"}, {"text": "b"}, {"text": "c"}]) as fake:
        result = run_turn("anthropic", fake, model=MODEL, options={"base_url": fake.root_url, "temperature": "0.5"})
        (ident,) = [e.payload for e in of_type(result.events, "raw") if e.source == "identity"]
        assert ident["provider"] == "anthropic" and ident["route"] == "messages"
        assert ident["model_requested"] == MODEL and ident["model_answered"] == "claude-sonnet-4-6-20260101"
        assert ident["parameters"] == {"model": MODEL, "max_tokens": 8192, "temperature": 0.5}
        assert len(ident["prompt_sha256"]) == 64 and ident["tool_count"] == 1
        # with /v1 (as for the openai provider) and from ANTHROPIC_BASE_URL
        assert run_turn("anthropic", fake, model=MODEL).text == "b"
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.root_url)
        provider = create_provider("anthropic", model=MODEL, options=FAST)
        assert seamline.run_sync("hi", provider=provider, store=None).text == "c"
    assert [r.path for r in fake.model_requests()] == ["/v1/messages"] * 3


FAILURES = [
    ("401", [{"status": 401}], "auth", False, "failed"),
    ("403", [{"status": 403}], "auth", False, "failed"),
    ("400", [{"status": 400}], "invalid_request", False, "failed"),
    ("429-then-ok", [{"status": 429, "retry_after": 0}, {"text": "ok"}], "quota", True, "completed"),
    ("529-overloaded-then-ok", [{"status": 529}, {"text": "ok"}], "provider", True, "completed"),
    ("500-exhausted", [{"status": 500, "times": 3}], "provider", True, "failed"),
]


@pytest.mark.parametrize(("name", "script", "kind", "retried", "outcome"), FAILURES, ids=[f[0] for f in FAILURES])
def test_http_failures_are_classified_and_retried_by_policy(
    name: str, script: list, kind: str, retried: bool, outcome: str, tmp_path: Path
) -> None:
    first = tool_step(("lookup", {"key": "before"}), text="Step one.")
    store = SQLiteStore(tmp_path / "s.db")
    with FakeAnthropic([first, *script]) as fake:
        result = run_turn("anthropic", fake, model=MODEL, store=store)
    logged = "\n".join(payload for _, payload in raw_log(store, result.session_id))
    assert "Step one." in logged and "value of before" in logged  # nothing recorded before is lost
    assert f'"kind":"{kind}"' in logged
    assert store.require(result.session_id).status == outcome
    store.close()
    errors = of_type(result.events, "error")
    assert {e.kind for e in errors} == {kind} and result.outcome == outcome
    retries = [e for e in errors if e.attempt is not None]
    assert bool(retries) is retried and all(e.retryable for e in retries)
    assert len(fake.model_requests()) == 2 + len(retries)
    if kind == "provider" and name.startswith("529"):
        assert "overloaded_error" in errors[0].message


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ({"text": "partial answer then overloaded", "error_after": 5}, "provider"),
        ({"text": "partial answer then cut", "cut_after": 5}, "transport"),
        ({"text": "partial answer then clean end", "cut_after": 6, "cut": "clean"}, "transport"),
    ],
    ids=["overloaded-mid-stream", "cut-abrupt", "cut-clean"],
)
def test_stream_broken_after_it_began_keeps_what_was_recorded(entry: dict, kind: str, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    with FakeAnthropic([entry]) as fake:
        result = run_turn("anthropic", fake, model=MODEL, store=store)
    (error,) = of_type(result.events, "error")
    assert error.kind == kind and error.attempt is None and result.outcome == "failed"
    assert len(fake.model_requests()) == 1
    streamed = "".join(e.text for e in of_type(result.events, "text_delta"))
    assert streamed.startswith("partial ")
    assert any(streamed in payload for _, payload in raw_log(store, result.session_id))
    assert store.require(result.session_id).status == "failed"
    store.close()


def test_error_event_before_content_is_retried() -> None:
    with FakeAnthropic([{"text": "x", "error_after": 1}, {"text": "recovered"}]) as fake:
        result = run_turn("anthropic", fake, model=MODEL)
    (retry,) = of_type(result.events, "error")
    assert retry.kind == "provider" and retry.attempt == 1 and result.text == "recovered"


def test_slow_server_against_the_timeout() -> None:
    with FakeAnthropic([{"text": "late", "delay": 3}]) as fake:
        result = run_turn("anthropic", fake, model=MODEL, options={"timeout": "0.3", "max_retries": "0"})
    (error,) = of_type(result.events, "error")
    assert error.kind == "timeout" and result.outcome == "failed"


def test_stalled_stream_against_the_timeout() -> None:
    with FakeAnthropic([{"text": "slow words here", "chunk_delay": 2}]) as fake:
        result = run_turn("anthropic", fake, model=MODEL, options={"timeout": "0.4", "max_retries": "0"})
    (error,) = of_type(result.events, "error")
    assert error.kind == "timeout" and result.outcome == "failed"


def test_bad_options() -> None:
    with pytest.raises(InvalidRequest, match="leaves no room"):
        create_provider("anthropic", options={"reasoning_effort": "high", "max_tokens": "1000"})
    with pytest.raises(InvalidRequest, match="reasoning_effort"):
        create_provider("anthropic", options={"reasoning_effort": "extreme"})


def test_block_switch_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEAMLINE_BLOCK_REAL_PROVIDERS", "1")
    with FakeAnthropic([{"text": "no"}]) as fake:
        with pytest.raises(PermissionDenied):
            seamline.run_sync("hi", provider="anthropic", options={"base_url": fake.base_url}, store=None)
        assert fake.model_requests() == []
    checks = asyncio.run(AnthropicProvider(model=MODEL).preflight())
    endpoint = next(c for c in checks if c.name == "endpoint")
    assert endpoint.ok is False and "SEAMLINE_BLOCK_REAL_PROVIDERS" in endpoint.detail


def test_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic(api_key=ANTHROPIC_KEY) as fake:
        checks = {
            c.name: c
            for c in asyncio.run(AnthropicProvider(model=MODEL, options={"base_url": fake.base_url}).preflight())
        }
        assert all(c.ok for c in checks.values()) and set(checks) == {"sdk", "api_key", "endpoint", "model"}
        other = {
            c.name: c
            for c in asyncio.run(AnthropicProvider(model="claude-9", options={"base_url": fake.base_url}).preflight())
        }
        assert other["model"].ok is False
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    checks = {c.name: c for c in asyncio.run(AnthropicProvider(model=MODEL).preflight())}
    assert checks["api_key"].ok is False and checks["api_key"].fix == "export ANTHROPIC_API_KEY=<your key>"
    monkeypatch.setitem(sys.modules, "anthropic", None)
    (sdk,) = asyncio.run(AnthropicProvider(model=MODEL).preflight())
    assert sdk.ok is False and sdk.fix == install_hint("anthropic")


def test_fake_tolerates_what_real_clients_send() -> None:
    import httpx2 as httpx

    with FakeAnthropic([{"text": "hello"}]) as fake:
        with httpx.Client(base_url=fake.root_url) as client:
            assert client.head("/").status_code == 200
            assert client.get("/v1/models").json()["data"][0]["id"] == "claude-sonnet-4-6"
            count = client.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": []})
            assert count.status_code == 200 and "input_tokens" in count.json()
            body = {
                "model": MODEL,
                "max_tokens": 10,
                "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}],
            }
            reply = client.post("/v1/messages?beta=true", json=body, headers={"anthropic-beta": "x-2025"})
            assert reply.status_code == 200 and reply.json()["content"][0]["text"] == "hello"
    assert fake.requests[-1].query == {"beta": ["true"]}


def test_fake_runs_as_a_script(tmp_path: Path) -> None:
    import subprocess

    import httpx2 as httpx

    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "from the script"}]))
    record = tmp_path / "requests.jsonl"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.anthropic_api",
            "--port",
            "0",
            "--script",
            str(script),
            "--record",
            str(record),
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening http://127.0.0.1:")
        base = line.split()[1]
        reply = httpx.post(base + "/messages", json={"model": MODEL, "max_tokens": 5, "messages": []}, timeout=10)
        assert reply.json()["content"][0]["text"] == "from the script"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert json.loads(record.read_text().splitlines()[0])["path"] == "/v1/messages"


_ROLES = st.sampled_from(["system", "user", "assistant", "assistant_calls", "tool"])


@given(st.lists(_ROLES, max_size=12))
def test_converted_messages_alternate_roles_whatever_the_history(kinds: list[str]) -> None:
    history: list[Message] = []
    open_calls: list[str] = []
    for i, kind in enumerate(kinds):
        if kind == "assistant_calls":
            calls = [ToolCall(call_id=f"toolu_{i}_{k}", name="lookup", arguments={"key": str(k)}) for k in range(2)]
            history.append(Message(role="assistant", content="", tool_calls=calls))
            open_calls = [c.call_id for c in calls]
        elif kind == "tool":
            if open_calls:
                history.append(Message(role="tool", content="out", call_id=open_calls.pop(0)))
        elif kind == "assistant":
            history.append(Message(role="assistant", content=f"said {i}"))
        else:
            history.append(Message(role=kind, content=f"{kind} {i}"))  # type: ignore[arg-type]
    system, messages = anthropic_messages(history)
    roles = [m["role"] for m in messages]
    assert all(a != b or a == "assistant" for a, b in itertools.pairwise(roles))
    assert all(m["content"] for m in messages)  # never an empty message
    user_blocks = sum(len(m["content"]) for m in messages if m["role"] == "user")
    assert user_blocks == sum(1 for m in history if m.role in ("user", "tool"))
    assert (system is None) == (not any(m.role == "system" for m in history))
    seen_ids = {b["id"] for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"}
    results = [b for m in messages if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"]
    assert all(r["tool_use_id"] in seen_ids for r in results)


def test_a_local_server_needs_no_key_as_for_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--provider anthropic -o base_url=http://127.0.0.1:…` with no ANTHROPIC_API_KEY: a local
    server runs without one, as `openai` already did (it demanded a key)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with FakeAnthropic([{"text": "no key needed"}]) as fake:
        result = run_turn("anthropic", fake, model=MODEL)
        checks = {
            c.name: c
            for c in asyncio.run(AnthropicProvider(model=MODEL, options={"base_url": fake.base_url}).preflight())
        }
    assert result.outcome == "completed" and result.text == "no key needed"
    assert checks["api_key"].ok
    # The vendor's own endpoint still needs one.
    assert not {c.name: c for c in asyncio.run(AnthropicProvider(model=MODEL).preflight())}["api_key"].ok
