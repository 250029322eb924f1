"""An abort reaches a model call that is waiting: a stream that stalls after its first
bytes, and an endpoint that never answers. The turn ends ``aborted`` at once with what
streamed, and no retry starts after the abort (in-process, and Ctrl-C on the real CLI)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import seamline
from seamline.events import Complete, Error, Event, TextDelta
from seamline.providers.registry import create_provider
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import FAST, OPENAI_KEY, model_api_env

__all__ = ["model_api_env"]

pytestmark = pytest.mark.usefixtures("model_api_env")
STALL = 600.0  # far longer than any test waits: only an abort ends the call sooner
ROUTES = ["chat", "responses"]


# Frames before the stall: the route's opening frames and two text deltas.
FRAMES_BEFORE_STALL = {"chat": 3, "responses": 6}


@pytest.mark.parametrize("route", ROUTES)
def test_abort_ends_a_stalled_stream_with_what_streamed(route: str) -> None:
    cut = FRAMES_BEFORE_STALL[route]
    script = [{"chunks": ["Hello ", "there ", "and ", "more"], "cut_after": cut, "cut": "stall"}]
    with FakeOpenAI(script, api_key=OPENAI_KEY) as fake:
        provider = create_provider(
            "openai", model="gpt-4o", options={"base_url": fake.base_url, "route": route, **FAST}
        )

        async def main() -> list[Event]:
            seen: list[Event] = []
            opened: list[seamline.ProviderSession] = []
            events = seamline.stream("go", provider=provider, on_open=opened.append)
            async for event in events:
                seen.append(event)
                if isinstance(event, TextDelta):
                    asyncio.get_running_loop().call_soon(asyncio.ensure_future, provider.abort(opened[0]))
            return seen

        seen = asyncio.run(asyncio.wait_for(main(), 90))  # without the abort reaching the call: 600 s
    complete = seen[-1]
    assert isinstance(complete, Complete) and complete.outcome == "aborted"
    assert complete.text.startswith("Hello ")  # what streamed is kept
    assert not [e for e in seen if isinstance(e, Error)]  # no transport error, no retry after the abort
    assert len(fake.model_requests()) == 1


def test_abort_ends_a_call_the_endpoint_never_answers() -> None:
    with FakeOpenAI([{"text": "late", "delay": STALL}], api_key=OPENAI_KEY) as fake:
        provider = create_provider("openai", model="gpt-4o", options={"base_url": fake.base_url, **FAST})

        async def main() -> list[Event]:
            opened: list[seamline.ProviderSession] = []
            seen: list[Event] = []

            async def abort_once_asked() -> None:
                while not fake.model_requests():
                    await asyncio.sleep(0.02)
                await provider.abort(opened[0])

            aborter = asyncio.ensure_future(abort_once_asked())
            async for event in seamline.stream("go", provider=provider, on_open=opened.append):
                seen.append(event)
            await aborter
            return seen

        seen = asyncio.run(asyncio.wait_for(main(), 90))
    assert isinstance(seen[-1], Complete) and seen[-1].outcome == "aborted"
    assert not [e for e in seen if isinstance(e, Error)]
    assert len(fake.model_requests()) == 1  # no retry started after the abort


@pytest.mark.parametrize(
    "entry", [{"chunks": ["Hi ", "there", "!"], "cut_after": 3, "cut": "stall"}, {"text": "x", "delay": STALL}]
)
def test_ctrl_c_on_the_cli_stops_a_waiting_model_call(entry: dict[str, object], tmp_path: Path) -> None:
    with FakeOpenAI([entry], api_key=OPENAI_KEY, fallback={"text": "retried"}) as fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--json", "--store", str(tmp_path / "s.db"),
            "--provider", "openai", "--model", "gpt-4o", "-o", f"base_url={fake.base_url}", "go",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = 1200  # a loaded machine may take long to start the CLI
            while not fake.model_requests() and deadline:
                deadline -= 1
                try:
                    proc.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    pass
            assert fake.model_requests(), "the CLI never called the model"
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=90)  # without the abort reaching the call: 600 s
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        requests = len(fake.model_requests())
    assert proc.returncode == 130, err
    assert "retry" not in err and "Traceback" not in err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "aborted"
    assert requests == 1
