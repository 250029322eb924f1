"""What an Agent keeps between its runs: the workspace resolved once and the tool set made
on it (issue 44: per-run set-up was ~14 µs of each model call), and what it makes again
when a field they come from is changed."""

from __future__ import annotations

import pathlib
from pathlib import Path

import pytest

import seamline
from seamline.providers.base import Provider
from seamline.providers.local.scripted import ScriptedProvider
from seamline.providers.settings import ScriptedSettings
from seamline.sessions import open_store
from seamline.testing import scripted
from seamline.tools import tool

MADE: list[ScriptedProvider] = []


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


@tool
def shout(text: str) -> str:
    """Say it loud."""
    return text.upper()


def _script() -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}, {"text": "done"}]


class _Fresh(ScriptedSettings):
    """A fresh scripted provider per session, as settings make one (the script is the run's state)."""

    def create(self) -> Provider:
        made = scripted(_script())
        MADE.append(made)
        return made


def test_an_agent_resolves_its_workspace_once_for_all_its_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ws").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "ws")  # a path that resolving changes
    store = open_store(tmp_path / "s.db")
    agent = seamline.Agent(provider=_Fresh(), tools=[echo], workspace=link, workspace_tools=False, store=store)
    resolved: list[Path] = []
    real = pathlib.Path.resolve

    def counted(self: Path, strict: bool = False) -> Path:
        resolved.append(self)
        return real(self, strict=strict)

    monkeypatch.setattr(pathlib.Path, "resolve", counted)
    results = [agent.run_sync("go") for _ in range(3)]
    assert [r.text for r in results] == ["done"] * 3
    outputs = [[e.output for e in result.events if e.type == "tool_result"] for result in results]
    assert outputs == [["hi"]] * 3  # the tool ran each time
    assert len(resolved) == 1, resolved  # the first run's, not four per run
    for result in results:
        assert store.require(result.session_id).workspace == str(tmp_path / "ws")  # resolved, the link followed
    store.close()


def test_a_changed_workspace_or_tool_list_is_used_from_the_next_run(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    store = open_store(tmp_path / "s.db")
    agent = seamline.Agent(provider=_Fresh(), tools=[echo], workspace=first, workspace_tools=False, store=store)
    before = agent.run_sync("go")
    agent.workspace = second
    agent.tools = (echo, shout)
    after = agent.run_sync("go")
    assert store.require(before.session_id).workspace == str(first.resolve())
    assert store.require(after.session_id).workspace == str(second.resolve())
    assert after.text == "done"
    offered = [[spec.name for spec in provider.calls[0].tools] for provider in MADE[-2:]]
    assert offered == [["echo"], ["echo", "shout"]]
    store.close()
