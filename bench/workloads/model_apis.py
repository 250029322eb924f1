"""Model-API providers: seamline's CPU per model call and per streamed delta, against the
bare vendor SDK driven at the same fake server.

The fake (``tests/fakes``) runs in its own process, so only the client side is timed
(``time.process_time`` of this process). Each route answers every request with the same
streamed text. Per call: CPU of calls answering one word. Per delta: the extra CPU of calls
answering ``WORDS`` words, divided by the extra deltas. seamline runs each call as one turn
through ``ProviderSession.send`` with the SQLite store on; the bare SDK makes the same
streamed call and joins the text. Both check what they got.

seamline runs each route twice: with the gateway's in-process transport (the default: the
SDK's own HTTP client with its transports behind :class:`seamline.gateway.sdk_transport.
GatedTransport`: per-upstream slots, the retry-after hold, cassettes) and with
``gateway=off`` (the SDK's plain client). The difference in this process's CPU is
``gateway_added_cpu_us_per_call`` / ``_per_delta``. The time it adds is measured apart, on a
busy machine's terms: two sessions, one with the gateway and one without, take turns call by
call (so both see the same load), each call timed from ``send`` to ``complete``;
``gateway_added_ms_per_call`` is the difference of their medians (one-word answers),
``gateway_added_ms_per_call_long`` the same for ``WORDS``-word answers.

Those end-to-end differences are small beside a call's own CPU (about a millisecond) and so
within its noise; ``transport_added_cpu_us_per_request`` measures the transport alone: the
CPU of a request and its answer's close through ``GatedTransport`` over an inner transport
that answers at once, less the same through the inner transport alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORDS = 200
ROUTES = ("chat", "responses", "anthropic")
MODELS = {"openai": ("gpt-4o", "gpt-4o-mini"), "anthropic": ("claude-sonnet-4-6", "claude-haiku-4-5")}
SMALL = {vendor: small for vendor, (_, small) in MODELS.items()}
_KEY = "sk-bench-not-a-real-key"


# The fake with TCP_NODELAY on, as production HTTP servers run: without it its head and first
# frame, written apart, wait out the client's delayed ACK (40 ms) on a reused connection, and
# the direct calls (a kept-alive connection) would look slower than the gateway's (a fresh
# upstream connection per request).
_FAKE = """
import sys
from tests.fakes import _http
_http._Handler.disable_nagle_algorithm = True
module = __import__(sys.argv[1], fromlist=["main"])
raise SystemExit(module.main(sys.argv[2:]))
"""


def _start_fake(vendor: str, words: int, folder: Path) -> tuple[subprocess.Popen[str], str]:
    """One fake per vendor: the small model answers one word, the other ``words`` words."""
    many = " ".join(f"w{i}" for i in range(words))
    script = [
        {
            "match": {"model": SMALL[vendor]},
            "times": -1,
            "text": "w0",
            "usage": {"input_tokens": 20, "output_tokens": 1},
        },
        {"times": -1, "text": many, "usage": {"input_tokens": 20, "output_tokens": words}},
    ]
    path = folder / f"{vendor}-script.json"
    path.write_text(json.dumps(script))
    module = "tests.fakes.anthropic_api" if vendor == "anthropic" else "tests.fakes.openai_api"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _FAKE, module, "--port", "0", "--script", str(path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"fake {module} did not start: {line!r}")
    return proc, line.split()[1]


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _provider(route: str, base_url: str, model: str, gateway: str) -> Any:
    from seamline.providers.registry import create_provider

    os.environ.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    if route == "anthropic":
        os.environ["ANTHROPIC_API_KEY"] = _KEY
        return create_provider("anthropic", model=model, options={"base_url": base_url, "gateway": gateway})
    os.environ["OPENAI_API_KEY"] = _KEY
    return create_provider("openai", model=model, options={"base_url": base_url, "route": route, "gateway": gateway})


async def _one_call(session: Any, words: int) -> None:
    session.messages.clear()  # every call the same size: the history is not what is measured
    deltas = 0
    final = None
    async for event in session.send("go"):
        if event.type == "text_delta":
            deltas += 1
        final = event
    assert final is not None and final.type == "complete" and final.outcome == "completed", final
    assert deltas == words, (deltas, words)


async def _seamline_calls(
    route: str, base_url: str, calls: int, words: int, model: str, store: Any, gateway: str = "on"
) -> float:
    from seamline.tools import Toolset

    provider = _provider(route, base_url, model, gateway)
    session = await provider.open(store=store, tools=Toolset())
    # one warm-up call: imports, connection set-up
    async for _ in session.send("warm up"):
        pass
    started = time.process_time()
    for _ in range(calls):
        await _one_call(session, words)
    spent = time.process_time() - started
    await provider.close(session)
    return spent


async def _gateway_times(route: str, base_url: str, calls: int, words: int, model: str, store: Any) -> list[float]:
    """The median seconds per call with the gateway and without it, the two sessions taking
    turns call by call (which goes first alternates)."""
    from seamline.tools import Toolset

    providers = {g: _provider(route, base_url, model, g) for g in ("on", "off")}
    sessions = {g: await p.open(store=store, tools=Toolset()) for g, p in providers.items()}
    times: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for g in ("on", "off"):
            await _one_call(sessions[g], words)  # warm-up
        for i in range(calls):
            for g in ("on", "off") if i % 2 == 0 else ("off", "on"):
                started = time.perf_counter()
                await _one_call(sessions[g], words)
                times[g].append(time.perf_counter() - started)
    finally:
        for g, p in providers.items():
            await p.close(sessions[g])
    return [statistics.median(times["on"]), statistics.median(times["off"])]


async def _bare_calls(route: str, base_url: str, calls: int, words: int, model: str) -> float:
    if route == "anthropic":
        import anthropic

        aclient = anthropic.AsyncAnthropic(api_key=_KEY, base_url=base_url.removesuffix("/v1"), max_retries=0)

        async def once() -> int:
            stream = await aclient.messages.create(
                model=model,
                max_tokens=8192,
                messages=[{"role": "user", "content": "go"}],
                stream=True,
            )
            parts = [
                e.delta.text async for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta"
            ]
            return len(parts)

        closer: Callable[[], Awaitable[None]] = aclient.close
    else:
        import openai

        oclient = openai.AsyncOpenAI(api_key=_KEY, base_url=base_url, max_retries=0)

        async def once() -> int:
            if route == "chat":
                stream = await oclient.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": "go"}],
                    stream=True,
                    stream_options={"include_usage": True},
                )
                parts = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
                return len(parts)
            rstream = await oclient.responses.create(model=model, input="go", stream=True, store=False)
            return len([e.delta async for e in rstream if e.type == "response.output_text.delta"])

        closer = oclient.close
    await once()
    started = time.process_time()
    for _ in range(calls):
        got = await once()
        assert got == words, (got, words)
    spent = time.process_time() - started
    await closer()
    return spent


def _measure(route: str, calls: int, reps: int, words: int, store: Any, folder: Path) -> dict[str, float]:
    vendor = "anthropic" if route == "anthropic" else "openai"
    big, small = MODELS[vendor]
    spent: dict[tuple[str, int], list[float]] = {}
    walls: dict[int, list[list[float]]] = {}
    proc, base_url = _start_fake(vendor, words, folder)
    try:
        for _ in range(reps):
            for n, model in ((1, small), (words, big)):
                seam = asyncio.run(_seamline_calls(route, base_url, calls, n, model, store))
                direct = asyncio.run(_seamline_calls(route, base_url, calls, n, model, store, "off"))
                bare = asyncio.run(_bare_calls(route, base_url, calls, n, model))
                spent.setdefault(("seamline", n), []).append(seam)
                spent.setdefault(("direct", n), []).append(direct)
                spent.setdefault(("bare", n), []).append(bare)
                walls.setdefault(n, []).append(asyncio.run(_gateway_times(route, base_url, calls, n, model, store)))
    finally:
        _stop(proc)
    out: dict[str, float] = {}
    for who in ("seamline", "direct", "bare"):
        one = statistics.median(spent[(who, 1)]) / calls
        many = statistics.median(spent[(who, words)]) / calls
        out[f"{who}_us_per_call"] = round(one * 1e6, 1)
        out[f"{who}_us_per_delta"] = round(max(many - one, 0.0) / (words - 1) * 1e6, 2)
    out["ratio_per_call"] = round(out["seamline_us_per_call"] / out["bare_us_per_call"], 2)
    out["ratio_per_delta"] = round(out["seamline_us_per_delta"] / max(out["bare_us_per_delta"], 1e-9), 2)
    out["overhead_us_per_call"] = round(out["seamline_us_per_call"] - out["bare_us_per_call"], 1)
    out["overhead_us_per_delta"] = round(out["seamline_us_per_delta"] - out["bare_us_per_delta"], 2)
    # The gateway transport's share: seamline with it (the default) against gateway=off.
    for n, label in ((1, "call"), (words, "call_long")):
        on = statistics.median(w[0] for w in walls[n])
        off = statistics.median(w[1] for w in walls[n])
        out[f"ms_per_{label}_gateway_on"] = round(on * 1e3, 3)
        out[f"ms_per_{label}_gateway_off"] = round(off * 1e3, 3)
        out[f"gateway_added_ms_per_{label}"] = round((on - off) * 1e3, 3)
    out["gateway_added_cpu_us_per_call"] = round(out["seamline_us_per_call"] - out["direct_us_per_call"], 1)
    out["gateway_added_cpu_us_per_delta"] = round(out["seamline_us_per_delta"] - out["direct_us_per_delta"], 2)
    return out


def _transport_alone(requests: int, reps: int, *, budgeted: bool = False) -> float:
    """Microseconds of CPU the gated transport adds to one streamed request and its close:
    the median of ``reps`` runs of ``requests`` through it, less the median through the
    inner transport alone (an answer made at once; the runs alternate). ``budgeted``: in a
    turn with a budget not yet spent (the session's check asked before each request)."""
    import httpx2

    from seamline.gateway.sdk_binding import CURRENT, SdkBinding
    from seamline.gateway.sdk_transport import GatedTransport, SdkGate

    class Answering(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())

    class Body(httpx2.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield b"data: {}\n\n"

    binding = SdkBinding(limit=4)
    if budgeted:
        from types import SimpleNamespace

        from seamline.providers.model_apis.gated_client import SessionBinding
        from seamline.usage import UsageTotals

        turn = SimpleNamespace(turn_budget_usd=1.0, totals=UsageTotals(cost_usd=0.5))
        SessionBinding(binding, turn).before_request()  # type: ignore[arg-type]  # a session's two fields
        assert binding.admit is not None
    gated = GatedTransport(Answering(), SdkGate("openai"))
    plain = Answering()
    request = httpx2.Request("POST", "https://api.example.com/v1/chat/completions", headers={"authorization": "k"})

    async def spend(transport: httpx2.AsyncBaseTransport, bound: bool) -> float:
        started = time.process_time()
        for _ in range(requests):
            token = CURRENT.set(binding) if bound else None  # as sending() sets it, per request
            response = await transport.handle_async_request(request)
            if token is not None:
                CURRENT.reset(token)
            async for _piece in response.stream:  # type: ignore[union-attr]
                pass
            await response.aclose()
        return (time.process_time() - started) / requests

    async def alternating() -> float:
        await spend(gated, True)  # warm-up
        await spend(plain, False)
        with_gate, without = [], []
        for _ in range(reps):
            with_gate.append(await spend(gated, True))
            without.append(await spend(plain, False))
        return statistics.median(with_gate) - statistics.median(without)

    return round(asyncio.run(alternating()) * 1e6, 2)


def run(*, quick: bool = False) -> dict[str, Any]:
    try:
        import anthropic  # noqa: F401
        import openai  # noqa: F401
    except ImportError:
        return {"skipped": "needs the openai and anthropic extras: pip install 'seamline[openai,anthropic]'"}
    calls = 3 if quick else 40
    reps = 1 if quick else 5
    words = 50 if quick else WORDS
    from seamline.sessions.sqlite_store import SQLiteStore

    results: dict[str, Any] = {"calls": calls, "repetitions": reps, "words": words}
    before = os.environ.get("SEAMLINE_BLOCK_REAL_PROVIDERS")
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        try:
            for route in ROUTES:
                results[route] = _measure(route, calls, reps, words, store, Path(tmp))
        finally:
            store.close()
            if before is not None:
                os.environ["SEAMLINE_BLOCK_REAL_PROVIDERS"] = before
    results["transport_added_cpu_us_per_request"] = _transport_alone(2000 if quick else 20000, 3 if quick else 7)
    results["transport_added_cpu_us_per_request_with_a_budget"] = _transport_alone(
        2000 if quick else 20000, 3 if quick else 7, budgeted=True
    )
    for route in ROUTES:
        r = results[route]
        results[f"{route}_ratio_per_call"] = r["ratio_per_call"]
        results[f"{route}_ratio_per_delta"] = r["ratio_per_delta"]
        results[f"{route}_gateway_added_ms_per_call"] = r["gateway_added_ms_per_call"]
    return results


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
