"""``seamline.testing.cassette``: the first run records, later runs replay; a replay
runs with the switch against real providers on, with no key and the API stopped (the
real Claude Code, the fake Anthropic API on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seamline import Agent
from seamline.errors import InvalidRequest, PermissionDenied
from seamline.testing import CASSETTE_MODE_ENV, block_real_providers, cassette
from tests.providers.agent_cli_support import AgentAnthropic, cli_path, make_world

ONE = {"input_tokens": 300, "output_tokens": 20}


def test_auto_records_when_the_file_is_missing_and_replays_when_it_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CASSETTE_MODE_ENV, raising=False)
    tape = tmp_path / "t.jsonl"
    assert cassette(tape) == {"record": str(tape)}
    tape.write_text("")
    assert cassette(tape) == {"replay": str(tape)}
    assert cassette(tape, mode="record") == {"record": str(tape)}
    monkeypatch.setenv(CASSETTE_MODE_ENV, "record")
    assert cassette(tape) == {"record": str(tape)}
    assert cassette(tmp_path / "none.jsonl", mode="replay") == {"replay": str(tmp_path / "none.jsonl")}
    monkeypatch.setenv(CASSETTE_MODE_ENV, "sometimes")
    with pytest.raises(InvalidRequest, match="choose auto, record or replay"):
        cassette(tape)


@pytest.mark.real
def test_a_test_records_once_then_replays_offline_under_the_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CASSETTE_MODE_ENV, raising=False)
    world = make_world(tmp_path, monkeypatch)
    tape = tmp_path / "cassettes" / "hello.jsonl"
    script = [{"text": "Hello from the tape.", "usage": ONE}]

    def agent(base_url: str) -> Agent:
        options = {"executable": cli_path("claude"), "base_url": base_url, "max_retries": "0", "warm": "false"}
        return Agent(
            provider="claude-code",
            model="claude-sonnet-4-5",
            options=options,
            workspace=world.workspace,
            store=None,
            yes=True,
            **cassette(tape),
        )

    with AgentAnthropic(script, fallback={"text": "side", "usage": ONE}) as fake:
        first = asyncio.run(agent(fake.root_url).run("Say hello."))
        gone = fake.root_url
    assert first.outcome == "completed" and first.text == "Hello from the tape.", first.events
    assert tape.is_file()

    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with block_real_providers():
        again = asyncio.run(agent(gone).run("Say hello."))
        assert again.outcome == "completed" and again.text == "Hello from the tape.", again.events
        tape.unlink()  # no cassette: the switch holds again
        with pytest.raises(PermissionDenied):
            asyncio.run(agent(gone).run("Say hello."))
