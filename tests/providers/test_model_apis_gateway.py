"""The model-API providers (``openai`` on both routes, ``anthropic``) take the gateway's
in-process transport (:mod:`seamline.gateway.sdk_transport`) by default: no HTTP hop, the
key in the SDK client in-process as without the gateway; usage is counted once; a budget
stops the turn; requests take turns at the upstream with every other run of the process,
and an upstream's ``retry-after`` holds the requests that follow; the SDK's own proxies and
redirects stand; cassettes record and replay with the API stopped and no key.

Against the wire-format fakes in ``tests/fakes`` (streamed answers), on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline.errors import InvalidRequest
from seamline.events import Event, Usage, encode_event
from seamline.gateway.sdk_transport import GatedTransport
from seamline.gateway.upstream_slots import upstream_slots
from seamline.providers.model_apis.base import ModelAPIProvider
from seamline.providers.registry import create_provider
from seamline.tools import Toolset
from seamline.usage import priced_usage
from tests.fakes._http import (
    FakeAPI,
    JsonReply,
    RecordedRequest,
    StreamReply,
    _Server,  # pyright: ignore[reportPrivateUsage]  # its listen backlog
)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import FAST, lookup, model_api_env, of_type, tool_step

__all__ = ["model_api_env"]

pytestmark = pytest.mark.usefixtures("model_api_env")

CANARY = "sk-canary-REAL-key-0123456789abcdef"
# (provider, fake, model, extra options)
BACKENDS: list[tuple[str, type[FakeAPI], str, dict[str, str]]] = [
    ("openai", FakeOpenAI, "gpt-4o", {"route": "chat"}),
    ("openai", FakeOpenAI, "gpt-4o", {"route": "responses"}),
    ("anthropic", FakeAnthropic, "claude-sonnet-4-6", {}),
]
IDS = ["openai-chat", "openai-responses", "anthropic"]
# Each backend's model path under the fake's base URL.
MODEL_PATHS = {"openai-chat": "/chat/completions", "openai-responses": "/responses", "anthropic": "/messages"}


def _key_of(request: RecordedRequest) -> str:
    return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")


def _gated(client: Any) -> bool:
    """Whether an SDK client's HTTP client sends through the gateway's transport."""
    return isinstance(client._client._transport, GatedTransport)  # pyright: ignore[reportPrivateUsage]


async def _turn(provider: ModelAPIProvider, prompt: str = "go", budget_usd: float | None = None) -> list[Event]:
    """One turn of a new session of ``provider`` (closed again) with the ``lookup`` tool."""
    session = await provider.open(tools=Toolset([lookup]))
    try:
        return [event async for event in session.send(prompt, budget_usd=budget_usd)]
    finally:
        await provider.close(session)


@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_by_default_every_request_takes_the_gated_transport_the_key_stays_in_the_sdk_client(
    name: str, fake_type: type[FakeAPI], model: str, extra: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hop and no placeholder any more: the SDK client holds the real key in-process (as
    with gateway=off), one client serves every session, and each request passes the
    transport as its session's."""
    monkeypatch.setenv("OPENAI_API_KEY" if name == "openai" else "ANTHROPIC_API_KEY", CANARY)
    script = [tool_step(("lookup", {"key": "a"}), input_tokens=30, output_tokens=4), {"text": "done", "times": 2}]

    async def scenario(fake: FakeAPI) -> list[Event]:
        provider = create_provider(name, model=model, options={"base_url": fake.base_url, **FAST, **extra})
        assert isinstance(provider, ModelAPIProvider)
        session = await provider.open(tools=Toolset([lookup]))
        other = await provider.open(tools=Toolset([lookup]))
        try:
            client = provider.client_for(session.session_id)
            assert client is provider.client_for(other.session_id)  # one client, no per-session set-up
            assert client.api_key == CANARY and _gated(client)
            bindings = provider._bindings  # pyright: ignore[reportPrivateUsage]
            binding = bindings[session.session_id].binding
            events = [event async for event in session.send("go")]
            assert binding.requests == len(fake.model_requests()) == 2  # both passed as this session's
            assert bindings[other.session_id].binding.requests == 0
            return events
        finally:
            await provider.close(session)
            await provider.close(other)
            assert provider._bindings == {}  # pyright: ignore[reportPrivateUsage]  # unbound at close

    with fake_type(script, api_key=CANARY) as fake:  # the fake refuses any other key (401)
        events = asyncio.run(scenario(fake))
    assert events[-1].outcome == "completed" and events[-1].text == "done"  # type: ignore[union-attr]
    assert [_key_of(r) for r in fake.model_requests()] == [CANARY, CANARY]
    # The SDK's own request as it would have been sent (no relay asking for identity).
    assert all(r.headers.get("accept-encoding") != "identity" for r in fake.model_requests())
    assert CANARY not in "\n".join(encode_event(e).decode() for e in events)


@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_the_ledger_holds_the_fakes_usage_once(
    name: str, fake_type: type[FakeAPI], model: str, extra: dict[str, str]
) -> None:
    sent = [
        {"input_tokens": 50, "output_tokens": 9, "cache_read_tokens": 20},
        {"input_tokens": 80, "output_tokens": 5},
        {"input_tokens": 120, "output_tokens": 6, "cache_read_tokens": 64},
    ]
    script = [
        {**tool_step(("lookup", {"key": "a"})), "usage": sent[0]},
        {**tool_step(("lookup", {"key": "b"})), "usage": sent[1]},
        {"text": "found", "usage": sent[2]},
    ]
    with fake_type(script) as fake:
        provider = create_provider(name, model=model, options={"base_url": fake.base_url, **FAST, **extra})
        result = seamline.run_sync("go", provider=provider, tools=Toolset([lookup]), store=None)
        requests = len(fake.model_requests())
    assert result.outcome == "completed" and requests == 3
    usages: list[Usage] = of_type(result.events, "usage")
    assert len(usages) == 3  # one per request: the gateway's reading of the wire is not added
    for key in ("input_tokens", "output_tokens", "cache_read_tokens"):
        assert sum(getattr(u, key) for u in usages) == sum(s.get(key, 0) for s in sent)
    assert result.input_tokens == 250 and result.output_tokens == 20
    assert result.cost_usd == pytest.approx(sum(u.cost_usd or 0 for u in usages))


def _budget_of_two(name: str, model: str, usage: Mapping[str, int]) -> float:
    """What two requests of ``usage`` cost, added up as the gateway and the ledger add them."""
    provider = create_provider(name, model=model)
    counts = Usage(input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"])
    one = priced_usage(counts, model=model, rates=provider.rates(model)).cost_usd
    assert one is not None
    return one + one


@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_a_budget_worth_two_requests_ends_the_turn_budget_before_a_third_is_sent(
    name: str, fake_type: type[FakeAPI], model: str, extra: dict[str, str]
) -> None:
    usage = {"input_tokens": 1000, "output_tokens": 100}
    step = {**tool_step(("lookup", {"key": "k"})), "usage": usage}
    budget = _budget_of_two(name, model, usage)
    with fake_type([{**step, "times": 5}]) as fake:
        provider = create_provider(name, model=model, options={"base_url": fake.base_url, **FAST, **extra})
        assert isinstance(provider, ModelAPIProvider)
        events = asyncio.run(_turn(provider, budget_usd=budget))
        sent = len(fake.model_requests())
    final = events[-1]
    assert final.type == "complete" and final.outcome == "budget"  # type: ignore[union-attr]
    (error,) = of_type(events, "error")
    assert error.kind == "budget" and "budget" in error.message and "is spent" in error.message
    # Two requests spent exactly the budget (not past it, so the loop went on); the
    # transport refused the third before it was sent: the API saw two.
    assert sent == 2
    assert len(of_type(events, "usage")) == sent


@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_a_spent_budget_refuses_the_request_before_it_is_sent_once_not_retried(
    name: str, fake_type: type[FakeAPI], model: str, extra: dict[str, str]
) -> None:
    usage = {"input_tokens": 1000, "output_tokens": 100}
    with fake_type([{"text": "ok", "usage": usage, "times": -1}]) as fake:
        options = {"base_url": fake.base_url, **FAST, **extra, "max_retries": "3"}
        provider = create_provider(name, model=model, options=options)
        assert isinstance(provider, ModelAPIProvider)

        async def turns() -> tuple[list[Event], list[Event], list[Event]]:
            session = await provider.open(tools=Toolset([lookup]))
            try:
                spent = [e async for e in session.send("go", budget_usd=0.0)]  # nothing to spend
                free = [e async for e in session.send("go")]  # no budget: the request goes
                tight = [e async for e in session.send("go", budget_usd=0.0)]
                return spent, free, tight
            finally:
                await provider.close(session)

        spent, free, tight = asyncio.run(turns())
        sent = len(fake.model_requests())
    for events in (spent, tight):
        final = events[-1]
        assert final.type == "complete" and final.outcome == "budget", events  # type: ignore[union-attr]
        (error,) = of_type(events, "error")  # refused once: a budget refusal is not retried
        assert error.kind == "budget" and "budget of 0.000000 USD is spent" in error.message
        assert of_type(events, "usage") == []
    assert free[-1].type == "complete" and free[-1].outcome == "completed"  # type: ignore[union-attr]
    assert sent == 1  # only the turn without a budget reached the API


class _CountingFake(FakeAPI):
    """A fake that accepts ``capacity`` model requests at once (more are answered 429
    without ``retry-after``, as a rate-limited API does; ``None``: any number) and keeps its
    peak. A request is held until ``gather`` are held together, or ``expected`` requests
    have arrived, and a moment more: one more let through beside them would be caught."""

    def __init__(self, script: Sequence[Mapping[str, Any]], *, capacity: int | None, gather: int) -> None:
        super().__init__(script)
        self.capacity = capacity
        self.gather = gather
        self.expected = 20
        self.held = self.peak = self.arrived = self.refused = 0
        self._turns = threading.Condition()

    def _reply_for(self, request: RecordedRequest) -> tuple[JsonReply | StreamReply, float]:
        if not (request.method == "POST" and self.is_model_path(request.path)):
            return super()._reply_for(request)
        with self._turns:
            self.held += 1
            self.arrived += 1
            self.peak = max(self.peak, self.held)
            over = self.capacity is not None and self.held > self.capacity
            if over:
                self.refused += 1
            else:
                self._turns.notify_all()
                # Bounded: a request never let through fails the test instead of hanging it.
                self._turns.wait_for(lambda: self.held >= self.gather or self.arrived >= self.expected, 10)
        try:
            if over:
                return self.error_reply(429, self.default_error_type(429), "too many requests at once"), 0.0
            self._stopping.wait(0.02)
            return super()._reply_for(request)
        finally:
            with self._turns:
                self.held -= 1


class _CountingOpenAI(_CountingFake, FakeOpenAI):
    pass


class _CountingAnthropic(_CountingFake, FakeAnthropic):
    pass


COUNTING: dict[str, type[_CountingFake]] = {"openai": _CountingOpenAI, "anthropic": _CountingAnthropic}


async def _runs(name: str, model: str, options: Mapping[str, str], count: int) -> list[seamline.RunResult]:
    return list(
        await asyncio.gather(
            *(
                seamline.run(f"run {i}", provider=name, model=model, options=dict(options), store=None)
                for i in range(count)
            )
        )
    )


@pytest.mark.parametrize(("name", "model"), [("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-6")])
def test_twenty_runs_with_a_limit_of_four_all_succeed_never_more_than_four_upstream(name: str, model: str) -> None:
    fake = COUNTING[name]([{"text": "ok", "times": -1}], capacity=4, gather=4)
    with fake:
        # No retries: a request sent beyond what the API accepts would fail its run.
        options = {"base_url": fake.base_url, "max_retries": "0", "max_concurrent_requests": "4"}
        results = asyncio.run(_runs(name, model, options, 20))
    assert [r.outcome for r in results] == ["completed"] * 20  # none failed: they waited their turn
    assert fake.arrived == 20 and fake.refused == 0
    assert fake.peak == 4  # four at once, used in full, never more


def test_without_a_limit_the_same_twenty_reach_the_api_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: what keeps the runs above to four at once is the limit. This API takes
    any number at once and answers none until all twenty are there."""
    monkeypatch.setattr(_Server, "request_queue_size", 64)  # twenty connections at once
    fake = _CountingOpenAI([{"text": "ok", "times": -1}], capacity=None, gather=20)
    with fake:
        results = asyncio.run(_runs("openai", "gpt-4o", {"base_url": fake.base_url, "max_retries": "0"}, 20))
    assert [r.outcome for r in results] == ["completed"] * 20
    assert fake.peak == 20


class _TimedOpenAI(FakeOpenAI):
    """Logs when each model request arrived, on the monotonic clock (the event loop's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrival_times: list[float] = []

    def _reply_for(self, request: RecordedRequest) -> tuple[JsonReply | StreamReply, float]:
        if request.method == "POST" and self.is_model_path(request.path):
            self.arrival_times.append(time.monotonic())
        return super()._reply_for(request)


def test_a_429_with_retry_after_holds_the_next_runs_requests_until_it_has_passed() -> None:
    async def scenario(fake: _TimedOpenAI) -> tuple[list[Event], list[Event], float]:
        options = {"base_url": fake.base_url, **FAST, "max_retry_after": "5"}
        first = create_provider("openai", model="gpt-4o", options=options)
        second = create_provider("openai", model="gpt-4o", options=options)
        assert isinstance(first, ModelAPIProvider) and isinstance(second, ModelAPIProvider)
        assert asyncio.get_running_loop().time() == pytest.approx(time.monotonic(), abs=1.0)  # one clock
        slots = upstream_slots(("http", "127.0.0.1", fake.port))
        refused = asyncio.ensure_future(_turn(first, "first"))
        while not slots.held:  # the first run's request was answered 429, retry-after 0.3 s
            await asyncio.sleep(0.005)
        held_until = slots.held_until
        waiting = asyncio.ensure_future(_turn(second, "second"))
        while slots.waiting < 1:
            await asyncio.sleep(0.005)
        # The second run's request waits at the transport; the API has seen only the first.
        assert len(fake.arrival_times) == 1
        return await refused, await waiting, held_until

    script = [
        {"status": 429, "headers": {"retry-after-ms": "300"}},
        {"text": "after the hold", "times": 2},
    ]
    fake = _TimedOpenAI(script)
    with fake:
        first, second, held_until = asyncio.run(asyncio.wait_for(scenario(fake), 10))
    assert first[-1].outcome == second[-1].outcome == "completed"  # type: ignore[union-attr]
    (retry,) = of_type(first, "error")
    assert retry.kind == "quota" and retry.attempt == 1  # the 429 reached the first run, which retried
    assert len(fake.arrival_times) == 3
    assert all(t >= held_until for t in fake.arrival_times[1:])  # nothing went upstream inside the hold


def test_an_unreachable_upstream_is_a_transport_error_that_names_it_without_its_password() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before use: nothing listens there
    result = seamline.run_sync(
        "go",
        provider="openai",
        model="gpt-4o",
        options={"base_url": f"http://user:hunter2-secret@127.0.0.1:{port}/v1", **FAST},
        store=None,
    )
    errors = of_type(result.events, "error")
    assert {e.kind for e in errors} == {"transport"} and result.outcome == "failed"
    assert [e.attempt for e in errors] == [1, 2, None]  # retried by the provider's policy
    assert f"127.0.0.1:{port} is unreachable" in errors[-1].message
    assert "openai API unreachable" in errors[-1].message
    assert "hunter2" not in "\n".join(encode_event(e).decode() for e in result.events)


@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_gateway_off_is_the_sdks_plain_client_and_takes_no_cassette(
    name: str,
    fake_type: type[FakeAPI],
    model: str,
    extra: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY" if name == "openai" else "ANTHROPIC_API_KEY", CANARY)

    async def scenario(fake: FakeAPI) -> Sequence[Event]:
        options = {"base_url": fake.base_url, **FAST, **extra, "gateway": "off"}
        provider = create_provider(name, model=model, options=options)
        assert isinstance(provider, ModelAPIProvider)
        session = await provider.open()
        try:
            client = provider.client_for(session.session_id)
            assert client.api_key == CANARY and not _gated(client)
            return [event async for event in session.send("go")]
        finally:
            await provider.close(session)

    with fake_type([{"text": "direct"}], api_key=CANARY) as fake:
        events = asyncio.run(scenario(fake))
        assert events[-1].outcome == "completed"  # type: ignore[union-attr]
        (request,) = fake.model_requests()
        assert _key_of(request) == CANARY
        options = {"base_url": fake.base_url, **FAST, **extra, "gateway": "off"}
        with pytest.raises(InvalidRequest, match="gateway=off: the SDK calls the API with its plain client"):
            seamline.run_sync("go", provider=name, model=model, options=options, store=None, record=tmp_path / "c")
    assert len(fake.model_requests()) == 1  # the refused run sent nothing


@pytest.mark.parametrize("gateway", ["on", "off"])
@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_the_environments_proxy_is_used_as_the_sdk_uses_it(
    name: str,
    fake_type: type[FakeAPI],
    model: str,
    extra: dict[str, str],
    gateway: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's client sends through the environment's proxy (here one that is not there,
    so the call fails) unless ``NO_PROXY`` names the host: the gated transport keeps the
    transports the SDK's client chose, so gateway=on and gateway=off behave alike."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{sock.getsockname()[1]}"  # a proxy that is not there
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(variable, nowhere)
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    with fake_type([{"text": "past no proxy", "times": -1}]) as fake:
        options = {"base_url": fake.base_url, **FAST, "max_retries": "0", **extra, "gateway": gateway}
        through_proxy = seamline.run_sync("go", provider=name, model=model, options=options, store=None)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        direct = seamline.run_sync("go", provider=name, model=model, options=options, store=None)
        sent = len(fake.model_requests())
    assert through_proxy.outcome == "failed"
    assert {e.kind for e in of_type(through_proxy.events, "error")} == {"transport"}
    assert direct.outcome == "completed" and direct.text == "past no proxy"
    assert sent == 1  # only the call that NO_PROXY let past the proxy reached the API


@pytest.mark.parametrize("gateway", ["on", "off"])
@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_a_redirect_is_followed_as_the_sdk_follows_it_each_request_taking_its_turn(
    name: str, fake_type: type[FakeAPI], model: str, extra: dict[str, str], gateway: str
) -> None:
    """The SDK follows a ``307`` (its client's default); with the gateway the redirected
    request passes the transport as a request of its own: with a limit of one request at a
    time to the upstream, the first has given its slot back (its answer closed) before the
    second, to the same upstream, takes one."""
    path = MODEL_PATHS[IDS[BACKENDS.index((name, fake_type, model, extra))]]

    async def scenario(fake: FakeAPI) -> tuple[list[Event], int]:
        options = {"base_url": fake.base_url, **FAST, **extra, "gateway": gateway, "max_concurrent_requests": "1"}
        provider = create_provider(name, model=model, options=options)
        assert isinstance(provider, ModelAPIProvider)
        session = await provider.open()
        try:
            events = [event async for event in session.send("go")]
            bound = provider._bindings.get(session.session_id)  # pyright: ignore[reportPrivateUsage]
            return events, (bound.binding.requests if bound is not None else 0)
        finally:
            await provider.close(session)

    moved = {"status": 307, "headers": {"location": "/v1/moved" + path}}  # the same host and port
    with fake_type([moved, {"text": "elsewhere"}]) as fake:
        events, passed = asyncio.run(asyncio.wait_for(scenario(fake), 10))
    assert events[-1].outcome == "completed" and events[-1].text == "elsewhere"  # type: ignore[union-attr]
    assert [r.path for r in fake.model_requests()] == [f"/v1{path}", f"/v1/moved{path}"]
    assert passed == (2 if gateway == "on" else 0)


@pytest.mark.parametrize(("name", "fake_type", "model", "extra"), BACKENDS, ids=IDS)
def test_a_recorded_model_api_run_replays_with_the_api_stopped_and_no_key(
    name: str,
    fake_type: type[FakeAPI],
    model: str,
    extra: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    key_var = "OPENAI_API_KEY" if name == "openai" else "ANTHROPIC_API_KEY"
    monkeypatch.setenv(key_var, CANARY)
    cassette = tmp_path / "run.cassette.jsonl"
    script = [tool_step(("lookup", {"key": "alpha"})), {"text": "Alpha is first."}]
    with fake_type(script, api_key=CANARY) as fake:
        options = {"base_url": fake.base_url, **FAST, **extra}
        recorded = seamline.run_sync(
            "go", provider=name, model=model, options=options, tools=Toolset([lookup]), store=None, record=cassette
        )
        sent = len(fake.model_requests())
    assert recorded.outcome == "completed" and sent == 2
    text = cassette.read_text()
    assert CANARY not in text and text.count("\n") == 3  # a header and two exchanges
    monkeypatch.delenv(key_var)
    replayed = seamline.run_sync(
        "go", provider=name, model=model, options=options, tools=Toolset([lookup]), store=None, replay=cassette
    )
    assert replayed.outcome == "completed" and replayed.text == recorded.text == "Alpha is first."
    kinds = [e.type for e in replayed.events]
    assert kinds == [e.type for e in recorded.events]
    assert [(u.input_tokens, u.output_tokens) for u in of_type(replayed.events, "usage")] == [
        (u.input_tokens, u.output_tokens) for u in of_type(recorded.events, "usage")
    ]
    # The vendor's own endpoint with no key: the SDK is given a stand-in, and nothing leaves.
    official = {k: v for k, v in options.items() if k != "base_url"}
    again = seamline.run_sync(
        "go", provider=name, model=model, options=official, tools=Toolset([lookup]), store=None, replay=cassette
    )
    assert again.outcome == "completed" and again.text == "Alpha is first."
    changed = seamline.run_sync(
        "go on", provider=name, model=model, options=options, tools=Toolset([lookup]), store=None, replay=cassette
    )
    assert changed.outcome == "failed"
    (error,) = of_type(changed.events, "error")  # not retried: the cassette will not change
    field = {"openai-chat": "messages[0].content", "openai-responses": "input[0].content"}.get(
        IDS[BACKENDS.index((name, fake_type, model, extra))], "messages[0].content[0].text"
    )
    assert error.kind == "invalid_request"
    assert error.message.startswith(f'cassette: request 1 differs at {field} (recorded "go", sent "go on")')
