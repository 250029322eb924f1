"""Replay from the trace alone (no provider may be called), re-drive, drift, replayability."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import msgspec
import pytest

import seamline.providers.registry as registry
from seamline.cli.main import main
from seamline.events import Event, Text, Usage
from seamline.loop.messages import ModelRequest
from seamline.pipeline import RoleBinding, resolve_pipeline
from seamline.pipeline.redrive import redrive
from seamline.providers.base import BLOCK_ENV, Provider, ProviderSession
from seamline.trace.records import GENESIS, chain_hash, encode_line, split_line
from seamline.trace.replay import replay
from seamline.trace.verify import verify_trace
from tests.pipeline.support import (
    GOOD_ANSWER,
    NO_SOURCES,
    make_workspace,
    read_then_answer,
    run_pipeline,
    scripted_writer,
)

REVIEW = resolve_pipeline("answer-review")


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A two-round answer-review run with a scripted writer, traced to a file."""
    path = tmp_path / "run.jsonl"
    writer = scripted_writer([{"text": NO_SOURCES}, *read_then_answer(GOOD_ANSWER, cost=0.002)])
    run_pipeline(
        REVIEW, "What is a provider?", workspace=make_workspace(tmp_path), providers={"writer": writer}, trace_file=path
    )
    return path


def _trap(*args: Any, **kwargs: Any) -> NoReturn:
    pytest.fail("a provider was called during replay or re-drive")


@pytest.fixture
def no_provider_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Provider, "open", _trap)
    monkeypatch.setattr(Provider, "_step", _trap)
    monkeypatch.setattr(ProviderSession, "send", _trap)
    monkeypatch.setattr(registry, "create_provider", _trap)
    monkeypatch.setattr(registry, "provider_class", _trap)


def test_replay_rebuilds_the_result_without_any_provider(recorded: Path, no_provider_calls: None) -> None:
    result = replay(recorded)
    assert (result.outcome, result.stop_reason, result.text) == ("completed", "converged", GOOD_ANSWER)
    assert result.transitions == [("write", "review"), ("review", "write"), ("write", "review"), ("review", "done")]
    assert [d["status"] for d in result.decisions] == ["continue", "converged"]
    assert result.usage_by_role["writer"]["input_tokens"] == 200
    assert result.usage_by_role["writer"]["cost_usd"] == pytest.approx(0.004)
    assert result.usage_by_phase["review"]["input_tokens"] == 0
    assert result.mismatches == []


def test_redrive_reaches_the_same_decisions_without_any_provider(recorded: Path, no_provider_calls: None) -> None:
    report = redrive(recorded)
    assert report.same and report.differences == []
    assert report.drift == {"definition": [], "config": [], "model": [], "prompt": []}
    assert (report.outcome, report.stop_reason) == ("completed", "converged")


def test_cli_replay_and_redrive_without_any_provider(
    recorded: Path, no_provider_calls: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trace", "replay", "--file", str(recorded), "--json"]) == 0
    data = msgspec.json.decode(capsys.readouterr().out)
    assert data["text"] == GOOD_ANSWER and data["stop_reason"] == "converged"
    assert main(["trace", "redrive", "--file", str(recorded)]) == 0
    assert capsys.readouterr().out.startswith("re-drive: same")


def test_redrive_reports_each_kind_of_drift(recorded: Path, no_provider_calls: None) -> None:
    stricter = msgspec.structs.replace(
        REVIEW,
        roles={**REVIEW.roles, "reviewer": RoleBinding(kind="citation-reviewer", options={"min_sources": "2"})},
    )
    report = redrive(recorded, definition=stricter)
    assert report.drift["definition"] and not report.same
    assert any(d.startswith("decision 2: continue") for d in report.differences)

    reworded = msgspec.structs.replace(
        REVIEW, roles={**REVIEW.roles, "writer": RoleBinding(kind="agent", prompt="Answer briefly: {task}")}
    )
    prompt = redrive(recorded, definition=reworded)
    assert prompt.drift["prompt"] == ["write/writer round 1 attempt 1", "write/writer round 2 attempt 1"]

    header = verify_trace(recorded).header
    config = redrive(recorded, config={**header["config"], "max_steps": 7})
    assert config.drift["config"] == ["config differs in max_steps"] and config.same

    ident = dict(header["providers"]["writer"], model="another-model")
    model = redrive(recorded, identities={"writer": ident})
    assert model.drift["model"] == ["role writer: model 'another-model' != recorded 'scripted'"]


def _without(lines: list[bytes], predicate: Any) -> bytes:
    out, previous = [], GENESIS
    for line in lines:
        parts = split_line(line.rstrip(b"\n"))
        assert parts is not None
        record = msgspec.json.decode(parts[1])
        if predicate(record):
            continue
        body = msgspec.json.encode({**record, "seq": len(out)})
        previous = chain_hash(previous, body)
        out.append(encode_line(previous, body))
    return b"".join(out)


def test_a_missing_response_makes_the_trace_unreplayable(recorded: Path, no_provider_calls: None) -> None:
    lines = recorded.read_bytes().splitlines(keepends=True)
    data = _without(
        lines, lambda r: r["kind"] == "event" and r["d"]["round"] == 2 and r["d"]["event"]["type"] == "complete"
    )
    verification = verify_trace(data)
    assert verification.ok and not verification.replayable
    assert verification.replay_reasons == ["missing response: write/writer round 2 attempt 1"]
    report = redrive(data)
    assert not report.same and "missing response: write/writer round 2 attempt 1" in report.differences


class _RemoteLike(Provider):
    """Marked ``real`` (as a hosted model would be) but answers locally."""

    name: ClassVar[str] = "remote-like"
    default_model: ClassVar[str | None] = "remote-1"

    async def _answer(self, request: ModelRequest) -> AsyncIterator[Event]:
        yield Text(text=GOOD_ANSWER)
        yield Usage(input_tokens=3, output_tokens=3, cost_usd=0.0, priced=True)

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        return self._answer(request)


@pytest.mark.parametrize(
    ("params", "replayable"), [({}, False), ({"temperature": 0.7}, False), ({"temperature": 0}, True)]
)
def test_non_deterministic_parameters_make_a_trace_unreplayable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, params: dict[str, Any], replayable: bool
) -> None:
    monkeypatch.delenv(BLOCK_ENV)
    from seamline.live import open_run
    from seamline.pipeline.builtin import stream_pipeline

    controller = open_run(
        resolve_pipeline("single"),
        provider=_RemoteLike(),
        workspace=make_workspace(tmp_path),
        in_memory=True,
        params=params,
    )

    async def drive() -> None:
        async for _ in stream_pipeline(controller, "q"):
            pass

    import asyncio

    asyncio.run(drive())
    verification = verify_trace(controller.writer.data())
    assert verification.ok and verification.replayable is replayable
    if not replayable:
        assert verification.replay_reasons[0].startswith("role agent: provider remote-like is non-deterministic (")
