"""The model gateway relays a program's requests with the real key in place of the
placeholder, streams answers through, meters each response from the wire, refuses what
carries no placeholder of its own and what a budget stops.

The clients are the vendors' own SDKs (anthropic, openai) and raw HTTP; the upstreams are
the wire-format fakes in tests/fakes, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from seamline.events import Usage
from seamline.gateway import ModelGateway, Upstream
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI

REAL_KEY = "sk-real-canary-7f3a"
USAGE = {"input_tokens": 120, "output_tokens": 17, "cache_read_tokens": 40, "cache_write_tokens": 0}


def with_gateway(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run the async ``test`` with a started gateway as its first argument, closed after."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            gw = ModelGateway()
            await gw.start()
            try:
                await test(gw, *args, **kwargs)
            finally:
                await gw.close()

        asyncio.run(main())

    parameters = list(inspect.signature(test).parameters.values())[1:]
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return run


async def _raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        data = await reader.read()
    except ConnectionResetError:
        data = b""  # the gateway reset the connection
    writer.close()
    await writer.wait_closed()
    return data


@with_gateway
async def test_anthropic_stream_goes_through_with_the_real_key_and_is_metered(gateway: ModelGateway) -> None:
    anthropic = pytest.importorskip("anthropic")
    seen: list[Usage] = []
    script = [{"chunks": ["Hel", "lo", "!"], "usage": USAGE, "model": "claude-test-1"}]
    with FakeAnthropic(script=script, api_key=REAL_KEY) as fake:
        binding = gateway.bind(Upstream("anthropic", fake.root_url, REAL_KEY), on_usage=seen.append)
        client = anthropic.AsyncAnthropic(base_url=gateway.base_url(binding), api_key=binding.placeholder)
        texts: list[str] = []
        async with client.messages.stream(
            model="claude-test-1", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            async for text in stream.text_stream:
                texts.append(text)
        await client.close()
        request = fake.model_requests()[0]
    assert "".join(texts) == "Hello!" and len(texts) == 3  # the deltas arrived one by one
    # the upstream got the real key (this SDK sends it as a bearer token)
    assert (request.headers.get("x-api-key") or request.headers["authorization"].removeprefix("Bearer ")) == REAL_KEY
    assert binding.placeholder not in json.dumps(request.to_json())
    assert seen == [
        Usage(
            input_tokens=120,
            output_tokens=17,
            cache_read_tokens=40,
            cache_write_tokens=0,
            model="claude-test-1",
            usage_id=seen[0].usage_id,
        )
    ]
    assert seen[0].usage_id and seen[0].usage_id.startswith("req_")  # the upstream's request id
    assert binding.requests == 1 and gateway.refusals == []


@with_gateway
async def test_openai_responses_and_chat_completions_are_metered(gateway: ModelGateway) -> None:
    openai = pytest.importorskip("openai")
    seen: list[Usage] = []
    script = [
        {"text": "one", "usage": USAGE, "match": {"path": "/responses"}},
        {"text": "two", "usage": USAGE, "match": {"path": "/chat/completions"}},
        {"text": "three", "usage": USAGE, "match": {"path": "/chat/completions"}},
    ]
    with FakeOpenAI(script=script, api_key=REAL_KEY) as fake:
        binding = gateway.bind(Upstream("openai", fake.base_url, REAL_KEY), on_usage=seen.append)
        client = openai.AsyncOpenAI(base_url=gateway.base_url(binding), api_key=binding.placeholder)
        stream = await client.responses.create(model="gpt-test", input="hi", stream=True)
        events = [event.type async for event in stream]
        chat = await client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces = [c.choices[0].delta.content for c in [c async for c in chat] if c.choices]
        plain = await client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        await client.close()
        keys = {r.headers["authorization"] for r in fake.model_requests()}
    assert "response.completed" in events and "".join(p or "" for p in pieces) == "two"
    assert plain.choices[0].message.content == "three"
    assert keys == {f"Bearer {REAL_KEY}"}
    assert [(u.input_tokens, u.output_tokens, u.cache_read_tokens) for u in seen] == [(120, 17, 40)] * 3


@with_gateway
async def test_gemini_key_in_the_query_is_swapped_and_metered(gateway: ModelGateway) -> None:
    seen: list[Usage] = []
    with FakeGemini(script=[{"text": "ok", "usage": USAGE}], api_key=REAL_KEY) as fake:
        binding = gateway.bind(Upstream("gemini", fake.root_url, REAL_KEY), on_usage=seen.append)
        body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
        path = f"/v1beta/models/gemini-test:streamGenerateContent?alt=sse&key={binding.placeholder}"
        answer = await _raw(
            gateway.port,
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body,
        )
        request = fake.model_requests()[0]
    assert answer.startswith(b"HTTP/1.1 200") and b'"ok"' in answer
    assert request.query["key"] == [REAL_KEY] and request.query["alt"] == ["sse"]
    assert [(u.input_tokens, u.output_tokens, u.cache_read_tokens) for u in seen] == [(120, 17, 40)]


@pytest.mark.parametrize(
    "credential",
    ["", "x-api-key: sk-guessed\r\n", "authorization: Bearer sl-gw-not-issued\r\n"],
    ids=["none", "a-real-looking-key", "a-placeholder-never-issued"],
)
@with_gateway
async def test_a_request_without_an_issued_placeholder_goes_nowhere(gateway: ModelGateway, credential: str) -> None:
    with FakeAnthropic(script=[{"text": "never"}]) as fake:
        gateway.bind(Upstream("anthropic", fake.root_url, REAL_KEY))
        body = b'{"model": "m", "max_tokens": 5, "messages": []}'
        answer = await _raw(
            gateway.port,
            f"POST /v1/messages HTTP/1.1\r\nhost: x\r\n{credential}content-length: {len(body)}\r\n\r\n".encode() + body,
        )
        assert fake.requests == []
    assert answer.startswith(b"HTTP/1.1 401")
    assert [(r.method, r.path) for r in gateway.refusals] == [("POST", "/v1/messages")]


@with_gateway
async def test_a_budget_refusal_answers_in_the_vendors_words_and_spends_nothing(gateway: ModelGateway) -> None:
    anthropic = pytest.importorskip("anthropic")
    spent: list[Usage] = []

    def admit() -> str | None:
        return "seamline: the budget of 0.01 USD is spent" if spent else None

    with FakeAnthropic(script=[{"text": "first", "usage": USAGE}, {"text": "second"}]) as fake:
        binding = gateway.bind(Upstream("anthropic", fake.root_url, REAL_KEY), on_usage=spent.append, admit=admit)
        client = anthropic.AsyncAnthropic(
            base_url=gateway.base_url(binding), api_key=binding.placeholder, max_retries=0
        )
        first = await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "a"}])
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "b"}])
        await client.close()
        sent = len(fake.model_requests())
    assert first.content[0].text == "first"  # type: ignore[union-attr]
    assert "budget of 0.01 USD is spent" in str(refused.value)
    assert sent == 1 and binding.requests == 1


@with_gateway
async def test_an_unreachable_upstream_is_a_connection_that_fails(gateway: ModelGateway) -> None:
    # As the program calling it itself would see: no answer, so its own retries apply.
    with FakeOpenAI() as fake:
        dead = fake.base_url  # the port is free once the fake stops
    binding = gateway.bind(Upstream("openai", dead, REAL_KEY))
    body = b'{"model": "m", "input": "x"}'
    answer = await _raw(
        gateway.port,
        f"POST /v1/responses HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {binding.placeholder}\r\n"
        f"content-length: {len(body)}\r\n\r\n".encode()
        + body,
    )
    assert answer == b""
    assert len(binding.failures) == 1 and "unreachable" in binding.failures[0]
    assert REAL_KEY not in binding.failures[0]


@with_gateway
async def test_a_keep_alive_client_sends_several_requests_on_one_connection(gateway: ModelGateway) -> None:
    with FakeAnthropic(script=[{"text": "a", "usage": USAGE}, {"text": "b", "usage": USAGE}]) as fake:
        binding = gateway.bind(Upstream("anthropic", fake.root_url, REAL_KEY))
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        texts = []
        for _ in range(2):
            body = b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}'
            writer.write(
                f"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: {binding.placeholder}\r\n"
                f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            )
            texts.append(json.loads(await reader.readexactly(length))["content"][0]["text"])
        writer.close()
        await writer.wait_closed()
    assert texts == ["a", "b"] and len(binding.usages) == 2


@with_gateway
async def test_a_program_that_hangs_up_at_the_last_event_is_still_metered(gateway: ModelGateway) -> None:
    # Codex ends its connection at `response.completed`, before the body's end: an upstream
    # that sends more after that event finds the program gone.
    completed = {
        "type": "response.completed",
        "response": {"model": "m", "usage": {"input_tokens": 120, "output_tokens": 17}},
    }
    frame = f"event: response.completed\ndata: {json.dumps(completed)}\n\n".encode()

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        await writer.drain()
        await asyncio.sleep(0.5)  # the program has hung up by now
        for _ in range(20):
            writer.write(b"5\r\n: pad\r\n")
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    binding = gateway.bind(Upstream("openai", f"http://127.0.0.1:{port}/v1", REAL_KEY))
    body = b'{"model": "m", "input": "x", "stream": true}'
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(
        f"POST /v1/responses HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {binding.placeholder}\r\n"
        f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await reader.readuntil(b"response.completed")
    writer.transport.abort()  # a reset, as a program that exits does
    await asyncio.sleep(0.05)
    await asyncio.wait_for(gateway.idle(), 10)
    server.close()
    await server.wait_closed()
    assert [(u.input_tokens, u.output_tokens) for u in binding.usages] == [(120, 17)]


@with_gateway
async def test_a_keyless_connectivity_check_is_answered_here_and_goes_nowhere(gateway: ModelGateway) -> None:
    with FakeAnthropic() as fake:
        gateway.bind(Upstream("anthropic", fake.root_url, REAL_KEY))
        answer = await _raw(gateway.port, b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert fake.requests == []
    assert answer.startswith(b"HTTP/1.1 200") and gateway.refusals == []
