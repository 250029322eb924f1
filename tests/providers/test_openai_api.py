"""The ``openai`` provider on both routes against the fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import re
import socket
from pathlib import Path

import msgspec
import pytest

from seamline.errors import InvalidRequest, PermissionDenied
from seamline.extras import install_hint
from seamline.providers.model_apis.openai_api import OpenAIProvider
from seamline.providers.registry import create_provider
from seamline.sessions.sqlite_store import SQLiteStore
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import (
    FAST,
    OPENAI_KEY,
    model_api_env,
    of_type,
    raw_log,
    run_turn,
    tool_step,
)

__all__ = ["model_api_env"]

pytestmark = pytest.mark.usefixtures("model_api_env")
ROUTES = ["chat", "responses"]


def model_bodies(fake: FakeOpenAI) -> list[dict]:
    return [r.body for r in fake.model_requests()]


@pytest.mark.parametrize("route", ROUTES)
def test_plain_answer_streams_deltas_usage_and_cost(route: str) -> None:
    script = [{"text": "Hello from the fake", "usage": {"input_tokens": 20, "output_tokens": 4}}]
    with FakeOpenAI(script, api_key=OPENAI_KEY) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"route": route})
    assert result.outcome == "completed" and result.text == "Hello from the fake"
    deltas = [e.text for e in of_type(result.events, "text_delta")]
    assert len(deltas) == 4 and "".join(deltas) == "Hello from the fake"
    (usage,) = of_type(result.events, "usage")
    assert (usage.input_tokens, usage.output_tokens) == (20, 4)
    assert usage.priced and usage.cost_usd == pytest.approx((20 * 2.5 + 4 * 10) / 1e6)
    (body,) = model_bodies(fake)
    assert body["model"] == "gpt-4o" and body["stream"] is True
    if route == "chat":
        assert fake.model_requests()[0].path == "/v1/chat/completions"
        assert body["stream_options"] == {"include_usage": True}
        assert body["messages"][-1] == {"role": "user", "content": "go"}
    else:
        assert fake.model_requests()[0].path == "/v1/responses"
        assert body["input"][-1] == {"role": "user", "content": "go"} and body["store"] is False


@pytest.mark.parametrize("route", ROUTES)
def test_multi_step_run_with_parallel_tool_calls_keeps_call_ids(route: str) -> None:
    script = [
        tool_step(
            ("lookup", {"key": "a"}), ("lookup", {"key": "b"}), text="Looking.", input_tokens=50, output_tokens=9
        ),
        tool_step(("lookup", {"key": "c"}), input_tokens=80, output_tokens=5),
        {"text": "a, b and c found", "usage": {"input_tokens": 120, "output_tokens": 6, "cache_read_tokens": 64}},
    ]
    with FakeOpenAI(script) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"route": route})
    assert result.outcome == "completed" and result.text == "a, b and c found"
    calls = of_type(result.events, "tool_call")
    results = of_type(result.events, "tool_result")
    assert [c.arguments for c in calls] == [{"key": "a"}, {"key": "b"}, {"key": "c"}]
    assert len({c.call_id for c in calls}) == 3
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert [r.output for r in results] == ["value of a", "value of b", "value of c"]
    usages = of_type(result.events, "usage")
    assert [u.input_tokens for u in usages] == [50, 80, 120]
    assert usages[2].cache_read_tokens == 64
    # cache reads are priced at their own, lower rate
    assert usages[2].cost_usd == pytest.approx(((120 - 64) * 2.5 + 64 * 1.25 + 6 * 10) / 1e6)
    assert len({u.usage_id for u in usages}) == 3
    bodies = model_bodies(fake)
    assert len(bodies) == 3
    if route == "chat":
        second = bodies[1]["messages"]
        assistant = next(m for m in second if m["role"] == "assistant")
        assert [tc["id"] for tc in assistant["tool_calls"]] == [calls[0].call_id, calls[1].call_id]
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"key": "a"}
        tool_msgs = [m for m in second if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_msgs] == [calls[0].call_id, calls[1].call_id]
        assert bodies[0]["tools"][0]["function"]["name"] == "lookup"
    else:
        items = bodies[1]["input"]
        assert [i["call_id"] for i in items if i.get("type") == "function_call"] == [calls[0].call_id, calls[1].call_id]
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        assert [o["output"] for o in outputs] == ["value of a", "value of b"]
        assert bodies[0]["tools"][0]["name"] == "lookup"


@pytest.mark.parametrize("route", ROUTES)
def test_reasoning_streams_as_reasoning_deltas(route: str) -> None:
    with FakeOpenAI([{"reasoning": "think it over", "text": "42"}]) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"route": route, "reasoning_effort": "high"})
    assert "".join(e.text for e in of_type(result.events, "reasoning_delta")) == "think it over"
    body = model_bodies(fake)[0]
    if route == "chat":
        assert body["reasoning_effort"] == "high"
    else:
        assert body["reasoning"] == {"effort": "high", "summary": "auto"}


def test_unknown_model_is_unpriced_not_free() -> None:
    with FakeOpenAI([{"text": "hi", "usage": {"input_tokens": 5, "output_tokens": 1}}]) as fake:
        result = run_turn("openai", fake, model="my-local-llama-7b")
    (usage,) = of_type(result.events, "usage")
    assert usage.priced is False and usage.cost_usd is None and result.cost_usd is None


@pytest.mark.parametrize("route", ROUTES)
def test_identity_names_provider_route_host_models_parameters_and_hashes(route: str, tmp_path: Path) -> None:
    script = [{"text": "ok", "model": "gpt-4o-2024-08-06"}]
    store = SQLiteStore(tmp_path / "s.db")
    with FakeOpenAI(script) as fake:
        result = run_turn(
            "openai",
            fake,
            model="gpt-4o",
            options={"route": route, "temperature": "0.3", "max_tokens": "77"},
            store=store,
        )
    identities = [e.payload for e in of_type(result.events, "raw") if e.source == "identity"]
    assert len(identities) == 1
    ident = identities[0]
    assert ident["provider"] == "openai" and ident["route"] == route
    assert ident["base_url_host"] == f"127.0.0.1:{fake.port}"
    assert ident["model_requested"] == "gpt-4o" and ident["model_answered"] == "gpt-4o-2024-08-06"
    body = model_bodies(fake)[0]
    assert ident["parameters"]["temperature"] == 0.3 == body["temperature"]
    max_key = "max_tokens" if route == "chat" else "max_output_tokens"
    assert ident["parameters"][max_key] == 77 == body[max_key]
    prompt = {"messages": body["messages"]} if route == "chat" else {"input": body["input"]}
    canonical = msgspec.json.encode(prompt, order="sorted")
    assert ident["prompt_sha256"] == hashlib.sha256(canonical).hexdigest()
    assert ident["tools_sha256"] == hashlib.sha256(msgspec.json.encode(body["tools"], order="sorted")).hexdigest()
    assert ("identity", json.dumps(ident, separators=(",", ":"))) in [
        (s, json.dumps(json.loads(p), separators=(",", ":"))) for s, p in raw_log(store, result.session_id)
    ]
    store.close()


# -- failures --------------------------------------------------------------------------------
FAILURES = [
    # (id, script, error kind, retried?, outcome)
    ("401", [{"status": 401}], "auth", False, "failed"),
    ("403", [{"status": 403}], "auth", False, "failed"),
    ("400", [{"status": 400, "message": "bad tool schema"}], "invalid_request", False, "failed"),
    ("429-then-ok", [{"status": 429, "retry_after": 0}, {"text": "ok"}], "quota", True, "completed"),
    ("500-then-ok", [{"status": 500}, {"text": "ok"}], "provider", True, "completed"),
    ("503-exhausted", [{"status": 503, "times": 3}], "provider", True, "failed"),
    ("insufficient-quota", [{"status": 429, "error_type": "insufficient_quota"}], "quota", False, "failed"),
]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("name", "script", "kind", "retried", "outcome"), FAILURES, ids=[f[0] for f in FAILURES])
def test_http_failures_are_classified_and_retried_by_policy(
    route: str, name: str, script: list, kind: str, retried: bool, outcome: str, tmp_path: Path
) -> None:
    # A first step that works, so the failure hits a turn that has already recorded things.
    first = tool_step(("lookup", {"key": "before"}), text="Step one.")
    store = SQLiteStore(tmp_path / "s.db")
    with FakeOpenAI([first, *script]) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"route": route}, store=store)
    logged = "\n".join(payload for _, payload in raw_log(store, result.session_id))
    assert "Step one." in logged and "value of before" in logged  # nothing recorded before is lost
    assert f'"kind":"{kind}"' in logged
    assert store.require(result.session_id).status == outcome
    store.close()
    errors = of_type(result.events, "error")
    assert errors and {e.kind for e in errors} == {kind}
    assert result.outcome == outcome
    retries = [e for e in errors if e.attempt is not None]
    assert bool(retries) is retried
    assert all(e.retryable for e in retries)
    assert [e.attempt for e in retries] == list(range(1, len(retries) + 1))
    expected_requests = 2 + len(retries)
    assert len(fake.model_requests()) == expected_requests
    if name == "503-exhausted":
        assert len(retries) == int(FAST["max_retries"]) and "after 3 attempts" in errors[-1].message


def test_retry_after_is_honoured_and_a_too_long_one_is_not_waited_for() -> None:
    with FakeOpenAI([{"status": 429, "retry_after": 0.25}, {"text": "ok"}]) as fake:
        result = run_turn("openai", fake, model="gpt-4o")
    (retry,) = of_type(result.events, "error")
    assert retry.kind == "quota" and "in 0.25s" in retry.message and result.outcome == "completed"
    with FakeOpenAI([{"status": 429, "retry_after": 3600}]) as fake:
        result = run_turn("openai", fake, model="gpt-4o")
    (error,) = of_type(result.events, "error")
    assert error.kind == "quota" and error.attempt is None and result.outcome == "failed"
    assert len(fake.model_requests()) == 1


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ({"text": "partial answer then boom", "error_after": 4}, "provider"),
        ({"text": "partial answer then cut", "cut_after": 4}, "transport"),
        ({"text": "partial answer then clean end", "cut_after": 4, "cut": "clean"}, "transport"),
    ],
    ids=["error-mid-stream", "cut-abrupt", "cut-clean"],
)
def test_stream_broken_after_it_began_fails_without_retry_and_keeps_what_was_recorded(
    route: str, entry: dict, kind: str, tmp_path: Path
) -> None:
    if route == "responses":
        entry = {**entry, **({"error_after": 7} if "error_after" in entry else {"cut_after": 7})}
    store = SQLiteStore(tmp_path / "s.db")
    with FakeOpenAI([entry]) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"route": route}, store=store)
    assert result.outcome == "failed"
    (error,) = of_type(result.events, "error")
    assert error.kind == kind and error.attempt is None
    assert len(fake.model_requests()) == 1  # text already reached the user: no retry
    streamed = "".join(e.text for e in of_type(result.events, "text_delta"))
    assert streamed.startswith("partial ")
    logged = raw_log(store, result.session_id)
    assert any(streamed in payload for _, payload in logged)
    assert any(json.loads(p).get("type") == "error" for s, p in logged if s == "event")
    assert store.require(result.session_id).status == "failed"
    store.close()


@pytest.mark.parametrize("route", ROUTES)
def test_stream_cut_before_any_content_is_retried(route: str) -> None:
    with FakeOpenAI([{"text": "never seen", "cut_after": 1}, {"text": "second try"}]) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"route": route})
    (retry,) = of_type(result.events, "error")
    assert retry.kind == "transport" and retry.retryable and retry.attempt == 1
    assert result.outcome == "completed" and result.text == "second try"


def test_slow_server_against_the_timeout() -> None:
    with FakeOpenAI([{"text": "too late", "delay": 3}]) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"timeout": "0.3", "max_retries": "0"})
    (error,) = of_type(result.events, "error")
    assert error.kind == "timeout" and result.outcome == "failed"


def test_connection_refused_is_transport_and_retried() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before use: nothing listens there
    result = run_turn_at(f"http://127.0.0.1:{port}/v1")
    errors = of_type(result.events, "error")
    assert {e.kind for e in errors} == {"transport"}
    assert [e.attempt for e in errors] == [1, 2, None]


def run_turn_at(base_url: str):  # type: ignore[no-untyped-def]
    class _Nowhere:
        pass

    fake = _Nowhere()
    fake.base_url = base_url  # type: ignore[attr-defined]
    return run_turn("openai", fake, model="gpt-4o")  # type: ignore[arg-type]


# -- configuration ----------------------------------------------------------------------------
def test_environment_variables_work_as_users_expect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_GATEWAY_KEY", "sk-gateway-SECRET-999")
    with FakeOpenAI([{"text": "via env"}], api_key="sk-gateway-SECRET-999") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        provider = create_provider("openai", model="gpt-4o", options={"api_key_env": "MY_GATEWAY_KEY", **FAST})
        assert isinstance(provider, OpenAIProvider) and provider.base_url == fake.base_url
        import seamline

        result = seamline.run_sync("hi", provider=provider, store=None)
    assert result.text == "via env"
    assert fake.model_requests()[0].headers["authorization"] == "Bearer sk-gateway-SECRET-999"


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(InvalidRequest, match="temperature"):
        create_provider("openai", options={"temperature": "warm"})
    with pytest.raises(InvalidRequest, match="route"):
        create_provider("openai", options={"route": "completions"})
    with pytest.raises(InvalidRequest, match="max_tokens"):
        create_provider("openai", options={"max_tokens": "0"})


def test_official_endpoint_without_key_is_an_auth_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    import seamline

    with pytest.raises(Exception) as info:
        seamline.run_sync("hi", provider="openai", store=None)
    assert getattr(info.value, "kind", None) == "auth" and "OPENAI_API_KEY" in str(info.value)


def test_block_switch_refuses_the_real_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEAMLINE_BLOCK_REAL_PROVIDERS", "1")
    import seamline

    with FakeOpenAI([{"text": "must not be asked"}]) as fake:
        with pytest.raises(PermissionDenied):
            seamline.run_sync("hi", provider="openai", options={"base_url": fake.base_url}, store=None)
        assert fake.model_requests() == []


# -- preflight --------------------------------------------------------------------------------
def _preflight(provider: OpenAIProvider) -> dict[str, tuple[bool, str, str | None]]:
    import asyncio

    return {c.name: (c.ok, c.detail, c.fix) for c in asyncio.run(provider.preflight())}


def test_preflight_checks_sdk_key_endpoint_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(api_key=OPENAI_KEY, models=["gpt-4o", "gpt-4o-mini"]) as fake:
        good = _preflight(OpenAIProvider(model="gpt-4o", options={"base_url": fake.base_url}))
        assert good["sdk"][0] and good["api_key"][0] and good["endpoint"][0] and good["model"][0]
        assert "2 models" in good["endpoint"][1]
        missing = _preflight(OpenAIProvider(model="gpt-9", options={"base_url": fake.base_url}))
        assert missing["model"][0] is False and "gpt-4o" in missing["model"][1]
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-0000")
        wrong = _preflight(OpenAIProvider(model="gpt-4o", options={"base_url": fake.base_url}))
        assert wrong["endpoint"][0] is False and "auth" in wrong["endpoint"][1]
    down = _preflight(OpenAIProvider(model="gpt-4o", options={"base_url": fake.base_url}))
    assert down["endpoint"][0] is False and "transport" in down["endpoint"][1]
    monkeypatch.delenv("OPENAI_API_KEY")
    nokey = _preflight(OpenAIProvider(model="gpt-4o"))
    assert nokey["api_key"][0] is False and nokey["api_key"][2] == "export OPENAI_API_KEY=<your key>"


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)  # as if `seamline[openai]` were not installed
    checks = _preflight(OpenAIProvider(model="gpt-4o"))
    assert checks["sdk"][0] is False and checks["sdk"][2] == install_hint("openai")
    import seamline

    with pytest.raises(InvalidRequest, match=re.escape(install_hint("openai"))):
        seamline.run_sync("hi", provider="openai", store=None)


def test_importing_seamline_does_not_import_the_sdks() -> None:
    import subprocess
    import sys

    code = (
        "import sys, seamline, seamline.providers.model_apis.openai_api, seamline.providers.model_apis.anthropic_api;"
    )
    code += "print('openai' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]


def test_sessions_of_one_provider_share_the_client_until_the_last_closes() -> None:
    import asyncio

    async def scenario(fake: FakeOpenAI) -> list[str]:
        # Without the gateway: with it, each session has its own client, pointed at its gateway.
        provider = OpenAIProvider(model="gpt-4o", options={"base_url": fake.base_url, **FAST, "gateway": "off"})
        first = await provider.open()
        second = await provider.open()
        texts = []
        async for event in first.send("one"):
            if event.type == "complete":
                texts.append(event.text)  # type: ignore[union-attr]
        await provider.close(first)
        async for event in second.send("two"):
            if event.type == "complete":
                texts.append(event.text)  # type: ignore[union-attr]
        await provider.close(second)
        assert provider._client is None
        return texts

    with FakeOpenAI([{"text": "first"}, {"text": "second"}]) as fake:
        assert asyncio.run(scenario(fake)) == ["first", "second"]


def test_fake_tolerates_what_real_clients_send() -> None:
    import httpx2 as httpx

    with FakeOpenAI([{"text": "plain"}, {"text": "streamed", "match": {"path": "/responses", "stream": True}}]) as fake:
        with httpx.Client(base_url=fake.root_url) as client:
            assert client.head("/").status_code == 200
            assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["gpt-4o", "gpt-4o-mini"]
            assert client.get("/v1/models/gpt-4o").json()["id"] == "gpt-4o"
            body = {
                "model": "gpt-4o",
                "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}],
            }
            reply = client.post("/v1/chat/completions", json=body, headers={"x-extra": "1"})
            assert reply.json()["choices"][0]["message"]["content"] == "plain"
            streamed = client.post("/v1/responses", json={"model": "gpt-4o", "input": "hi", "stream": True})
            events = [line[7:] for line in streamed.text.splitlines() if line.startswith("event: ")]
            assert events[0] == "response.created" and events[-1] == "response.completed"
            assert "response.output_text.delta" in events
    assert fake.requests[3].body["messages"][0]["role"] == "system"


def test_responses_reasoning_items_go_back_with_the_tool_results() -> None:
    script = [
        {"reasoning": "need the value", "tool_calls": [{"name": "lookup", "arguments": {"key": "q"}}]},
        {"text": "q is known"},
    ]
    with FakeOpenAI(script) as fake:
        result = run_turn("openai", fake, model="gpt-4o", options={"route": "responses", "reasoning_effort": "low"})
    assert result.text == "q is known"
    first, second = model_bodies(fake)
    assert first["include"] == ["reasoning.encrypted_content"]
    kinds = [item.get("type", item.get("role")) for item in second["input"]]
    assert kinds == ["user", "reasoning", "function_call", "function_call_output"]
    replayed = second["input"][1]
    assert replayed["encrypted_content"].startswith("enc-fake-") and replayed["id"].startswith("rs_")


def test_abort_ends_a_retry_wait() -> None:
    import asyncio

    async def scenario(fake: FakeOpenAI) -> list[str]:
        options = {"base_url": fake.base_url, "retry_base_delay": "600", "retry_max_delay": "600"}
        provider = OpenAIProvider(model="gpt-4o", options=options)
        session = await provider.open()
        seen = []
        async for event in session.send("hi"):
            seen.append(event.type)
            if event.type == "error":
                # abort from elsewhere (as Ctrl-C does) while the provider waits up to 10 minutes to retry
                asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(provider.abort(session)))
            if event.type == "complete":
                assert event.outcome == "aborted"  # type: ignore[union-attr]
        await provider.close(session)
        return seen

    with FakeOpenAI([{"status": 503, "times": -1}]) as fake:
        # the guard only keeps a broken abort from hanging the suite
        seen = asyncio.run(asyncio.wait_for(scenario(fake), 60))
        assert len(fake.model_requests()) == 1
    assert seen == ["session", "error", "complete"]
