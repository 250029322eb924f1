"""The ``a2a`` provider when things go wrong: abort reaches the agent's cancel, and a bad
answer (HTTP 500, 429, 401, a dead server, a card that does not parse, malformed JSON-RPC, a
failed task) is one classified error, never a traceback or a secret."""

from __future__ import annotations

import asyncio
import json

import pytest

from seamline.errors import SeamlineError
from seamline.events import Complete, Error, Event
from seamline.providers.registry import create_provider
from tests.providers.a2a_agent_support import A2AAgentServer, dead_url
from tests.providers.agent_cli_support import run_async

TOKEN = "s3cret-a2a-token-value"


pytestmark = pytest.mark.usefixtures("a2a_real_allowed")


async def one_turn(url: str, prompt: str = "go", **options: str) -> list[Event]:
    provider = create_provider("a2a", options={"url": url, **options})
    session = await provider.open()
    try:
        return [e async for e in session.send(prompt)]
    finally:
        await provider.close(session)


def failure(events: list[Event]) -> Error:
    errors = [e for e in events if isinstance(e, Error)]
    end = events[-1]
    assert isinstance(end, Complete) and end.outcome == "failed"
    assert len(errors) == 1
    return errors[0]


async def abort_when_waiting(a2a_server: A2AAgentServer, streaming: str) -> list[Event]:
    provider = create_provider("a2a", options={"url": a2a_server.url, "streaming": streaming, "poll_interval": "0.05"})
    session = await provider.open()

    async def abort_later() -> None:
        while not a2a_server.log.waiting.is_set():
            await asyncio.sleep(0.01)
        await provider.abort(session)

    aborter = asyncio.create_task(abort_later())
    events = [e async for e in session.send("wait for me")]
    await aborter
    await provider.close(session)
    return events


@pytest.mark.parametrize("streaming", ["true", "false"])
@run_async
async def test_abort_reaches_the_agents_cancel_and_the_turn_ends_aborted(
    a2a_server: A2AAgentServer, streaming: str
) -> None:
    events = await abort_when_waiting(a2a_server, streaming)
    end = events[-1]
    assert isinstance(end, Complete) and end.outcome == "aborted"
    assert a2a_server.log.cancel_seen.is_set()
    (_ctx, task_id, _), *_ = a2a_server.log.turns
    assert a2a_server.log.cancelled == [task_id]  # CancelTask named the task under way
    assert not any(isinstance(e, Error) for e in events)


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [(500, "provider", True), (429, "quota", True), (401, "auth", False), (404, "invalid_request", False)],
)
@run_async
async def test_an_http_error_from_the_endpoint_is_classified(
    a2a_server: A2AAgentServer, status: int, kind: str, retryable: bool
) -> None:
    a2a_server.faults["rpc"] = (status, b"upstream says no", {"retry-after": "3"})
    error = failure(await one_turn(a2a_server.url))
    assert (error.kind, error.retryable) == (kind, retryable)
    assert f"HTTP {status}" in error.message


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b"this is not json", "not JSON"),
        (b'{"result": {}}', "not a 2.0 response"),
        (b'{"jsonrpc": "2.0", "id": 1}', "neither result nor error"),
        (b'{"jsonrpc": "2.0", "id": 1, "error": "bad"}', "malformed JSON-RPC error"),
    ],
)
@run_async
async def test_malformed_json_rpc_is_a_provider_failure(a2a_server: A2AAgentServer, body: bytes, what: str) -> None:
    a2a_server.faults["rpc"] = (200, body, {"content-type": "application/json"})
    error = failure(await one_turn(a2a_server.url, streaming="false"))
    assert error.kind == "provider" and "malformed JSON-RPC" in error.message and what in error.message


@run_async
async def test_a_json_rpc_error_response_is_classified_by_its_code(a2a_server: A2AAgentServer) -> None:
    answer = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task not found"}}
    a2a_server.faults["rpc"] = (200, json.dumps(answer).encode(), {"content-type": "application/json"})
    error = failure(await one_turn(a2a_server.url))
    assert error.kind == "invalid_request" and "-32001" in error.message
    answer["error"] = {"code": -32603, "message": "boom"}
    a2a_server.faults["rpc"] = (200, json.dumps(answer).encode(), {"content-type": "application/json"})
    assert failure(await one_turn(a2a_server.url)).kind == "provider"


@run_async
async def test_a_task_that_fails_is_a_provider_failure_with_the_agents_words(a2a_server: A2AAgentServer) -> None:
    error = failure(await one_turn(a2a_server.url, "fail please"))
    assert error.kind == "provider" and "the tool broke" in error.message


@run_async
async def test_a_dead_server_is_a_transport_failure_when_the_session_opens() -> None:
    url = dead_url()
    provider = create_provider("a2a", options={"url": url})
    with pytest.raises(SeamlineError) as caught:
        await provider.open()
    assert caught.value.kind == "transport" and caught.value.retryable
    assert url in caught.value.message
    checks = await provider.preflight()
    assert not checks[0].ok and "transport" in checks[0].detail


@pytest.mark.parametrize(
    ("fault", "kind", "words"),
    [
        ((200, b"<html>hi</html>", {}), "provider", "does not parse"),
        ((200, b'{"description": "no name"}', {}), "provider", "not an A2A agent card"),
        ((200, b'{"name": "x", "capabilities": {"streaming": "yes"}}', {}), "provider", "streaming"),
        ((200, b'{"name": "x", "supportedInterfaces": [{"url": "http://1/", "protocolBinding": "GRPC"}]}', {}),
         "provider", "no JSON-RPC interface"),
        ((404, b"", {}), "invalid_request", "HTTP 404"),
    ],
)  # fmt: skip
@run_async
async def test_a_card_that_does_not_parse_is_refused_with_a_classified_error(
    a2a_server: A2AAgentServer, fault: tuple[int, bytes, dict[str, str]], kind: str, words: str
) -> None:
    a2a_server.faults["card"] = fault
    provider = create_provider("a2a", options={"url": a2a_server.url})
    with pytest.raises(SeamlineError) as caught:
        await provider.open()
    assert caught.value.kind == kind and words in caught.value.message


@run_async
async def test_a_card_that_points_elsewhere_gets_nothing_sent_there(a2a_server: A2AAgentServer) -> None:
    card = {"name": "x", "supportedInterfaces": [{"url": "http://127.0.0.2:9/", "protocolBinding": "JSONRPC"}]}
    a2a_server.faults["card"] = (200, json.dumps(card).encode(), {})
    provider = create_provider("a2a", options={"url": a2a_server.url, "token": TOKEN})
    with pytest.raises(SeamlineError) as caught:
        await provider.open()
    assert caught.value.kind == "invalid_request" and "rpc_url" in caught.value.message


@run_async
async def test_the_token_goes_to_the_agent_and_never_into_an_error(
    a2a_server: A2AAgentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_TOKEN", TOKEN)
    events = await one_turn(a2a_server.url, "hi", token_env="AGENT_TOKEN")
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"
    assert a2a_server.log.headers and all(h.get("authorization") == f"Bearer {TOKEN}" for h in a2a_server.log.headers)
    assert all(h.get("a2a-version") == "1.0" for h in a2a_server.log.headers)
    # A server that echoes the token in its refusal: the error says so without it.
    a2a_server.faults["rpc"] = (401, f"bad token Bearer {TOKEN}".encode(), {})
    events = await one_turn(a2a_server.url, "hi", token=TOKEN)
    assert failure(events).kind == "auth" and "bad token Bearer ***" in failure(events).message
    assert TOKEN not in repr(events)


@pytest.mark.parametrize(
    ("prompt", "kind", "words"),
    [("reject it", "provider", "not my kind of task"), ("login now", "auth", "sign in first")],
)
@run_async
async def test_a_rejected_task_or_one_that_needs_a_login_is_classified(
    a2a_server: A2AAgentServer, prompt: str, kind: str, words: str
) -> None:
    error = failure(await one_turn(a2a_server.url, prompt))
    assert error.kind == kind and words in error.message


@run_async
async def test_a_turn_past_its_timeout_fails_as_timeout_and_cancels_the_task(a2a_server: A2AAgentServer) -> None:
    error = failure(await one_turn(a2a_server.url, "wait forever", turn_timeout="0.5"))
    assert error.kind == "timeout" and "0.5 s" in error.message
    assert a2a_server.log.cancelled == [a2a_server.log.turns[0][1]]


def test_a_budget_is_refused_before_anything_starts() -> None:
    provider = create_provider("a2a", options={"url": dead_url()})
    provider.check_budget(None)
    with pytest.raises(SeamlineError) as caught:
        provider.check_budget(1.0)
    assert caught.value.kind == "invalid_request" and "cannot be enforced" in caught.value.message


@run_async
async def test_an_event_stream_cut_mid_event_is_a_transport_failure(a2a_server: A2AAgentServer) -> None:
    a2a_server.faults["rpc"] = (200, b'data: {"jsonrpc": "2.0", "id": 1, "res', {"content-type": "text/event-stream"})
    error = failure(await one_turn(a2a_server.url))
    assert error.kind == "transport" and error.retryable and "middle of an event" in error.message


@run_async
async def test_an_error_event_in_the_stream_is_classified_by_its_code(a2a_server: A2AAgentServer) -> None:
    body = b'event: error\ndata: {"jsonrpc": "2.0", "id": 1, "error": {"code": -32004, "message": "no"}}\n\n'
    a2a_server.faults["rpc"] = (200, body, {"content-type": "text/event-stream"})
    error = failure(await one_turn(a2a_server.url))
    assert error.kind == "invalid_request" and "-32004" in error.message
