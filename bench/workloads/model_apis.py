"""Model-API providers: seamline's CPU per model call and per streamed delta, against the
bare vendor SDK driven at the same fake server.

The fake (``tests/fakes``) runs in its own process, so only the client side is timed
(``time.process_time`` of this process). Each route answers every request with the same
streamed text. Per call: CPU of calls answering one word. Per delta: the extra CPU of calls
answering ``WORDS`` words, divided by the extra deltas. seamline runs each call as one turn
through ``ProviderSession.send`` with the SQLite store on; the bare SDK makes the same
streamed call and joins the text. Both check what they got.
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
        [sys.executable, "-m", module, "--port", "0", "--script", str(path)],
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


async def _seamline_calls(route: str, base_url: str, calls: int, words: int, model: str, store: Any) -> float:
    from seamline.providers.registry import create_provider
    from seamline.tools import Toolset

    os.environ.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    if route == "anthropic":
        os.environ["ANTHROPIC_API_KEY"] = _KEY
        provider = create_provider("anthropic", model=model, options={"base_url": base_url})
    else:
        os.environ["OPENAI_API_KEY"] = _KEY
        provider = create_provider("openai", model=model, options={"base_url": base_url, "route": route})
    session = await provider.open(store=store, tools=Toolset())
    # one warm-up call: imports, connection set-up
    async for _ in session.send("warm up"):
        pass
    started = time.process_time()
    for _ in range(calls):
        session.messages.clear()  # every call the same size: the history is not what is measured
        deltas = 0
        final = None
        async for event in session.send("go"):
            if event.type == "text_delta":
                deltas += 1
            final = event
        assert final is not None and final.type == "complete" and final.outcome == "completed", final  # type: ignore[union-attr]
        assert deltas == words, (deltas, words)
    spent = time.process_time() - started
    await provider.close(session)
    return spent


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
    proc, base_url = _start_fake(vendor, words, folder)
    try:
        for _ in range(reps):
            for n, model in ((1, small), (words, big)):
                seam = asyncio.run(_seamline_calls(route, base_url, calls, n, model, store))
                bare = asyncio.run(_bare_calls(route, base_url, calls, n, model))
                spent.setdefault(("seamline", n), []).append(seam)
                spent.setdefault(("bare", n), []).append(bare)
    finally:
        _stop(proc)
    out: dict[str, float] = {}
    for who in ("seamline", "bare"):
        one = statistics.median(spent[(who, 1)]) / calls
        many = statistics.median(spent[(who, words)]) / calls
        out[f"{who}_us_per_call"] = round(one * 1e6, 1)
        out[f"{who}_us_per_delta"] = round(max(many - one, 0.0) / (words - 1) * 1e6, 2)
    out["ratio_per_call"] = round(out["seamline_us_per_call"] / out["bare_us_per_call"], 2)
    out["ratio_per_delta"] = round(out["seamline_us_per_delta"] / max(out["bare_us_per_delta"], 1e-9), 2)
    out["overhead_us_per_call"] = round(out["seamline_us_per_call"] - out["bare_us_per_call"], 1)
    out["overhead_us_per_delta"] = round(out["seamline_us_per_delta"] - out["bare_us_per_delta"], 2)
    return out


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
    for route in ROUTES:
        r = results[route]
        results[f"{route}_ratio_per_call"] = r["ratio_per_call"]
        results[f"{route}_ratio_per_delta"] = r["ratio_per_delta"]
    return results


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
