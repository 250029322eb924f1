"""Many agents at once in a race and in a pipeline (issue 44 §2), at a small size: four
racers, and a pipeline phase of four roles run in parallel, each a real agent CLI (two
Claude Code, two Codex, warm by default) against the fake APIs on 127.0.0.1, run in this
test's process. Once the race or the pipeline is over, nothing may be left: no process it
started, no file descriptor of this process over the baseline, no runtime folder.

bench/many_roles.py measures the same at full size (10 racers, 10 roles)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Complete
from seamline.live import open_run
from seamline.live.race import Racer, open_race
from seamline.pipeline import resolve_pipeline, stream_pipeline
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.providers.agent_clis.codex import CodexProvider
from seamline.providers.base import Provider
from seamline.sessions.sqlite_store import open_store
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.worktrees import create
from tests.leftovers import Leftovers
from tests.providers.agent_cli_support import AgentAnthropic, AgentOpenAI, CliWorld, cli_path, make_world
from tests.worktrees.git_repo import environ_with, git_home, make_repo

pytestmark = pytest.mark.real
EACH = 2  # agents of each CLI
CLAUDE_MODEL, CODEX_MODEL = "claude-sonnet-4-5", "gpt-5.5"
DEADLINE_S = 120.0


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


@pytest.fixture
def runtime_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private ``$XDG_RUNTIME_DIR``: the runtime folders go under its ``seamline/``."""
    made = Path(tempfile.mkdtemp(prefix="slroles-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(made))
    yield made / "seamline"
    shutil.rmtree(made, ignore_errors=True)


def claude_options(fake: AgentAnthropic) -> dict[str, str]:
    return {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0"}


def codex_options(fake: AgentOpenAI) -> dict[str, str]:
    # Codex's own sandbox cannot work under /tmp; seamline's envelope is not asked for here.
    return {
        "executable": cli_path("codex"),
        "base_url": fake.base_url,
        "max_retries": "0",
        "codex_sandbox": "danger-full-access",
    }


def _fakes() -> tuple[AgentAnthropic, AgentOpenAI]:
    return AgentAnthropic([{"text": "From Claude."}] * EACH, fallback={"text": "side"}), AgentOpenAI(
        [{"text": "From Codex."}] * EACH
    )


async def _watched(drive: Any, watch: Leftovers) -> None:
    """Run ``drive`` while remembering every process this test's process has meanwhile."""
    task = asyncio.create_task(drive)
    while not task.done():
        watch.watch()
        await asyncio.sleep(0.05)
    await task


def _settle(watch: Leftovers) -> list[str]:
    deadline = time.monotonic() + DEADLINE_S
    while (found := watch.problems()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_a_race_of_agent_clis_leaves_no_process_descriptor_or_folder(
    world: CliWorld, tmp_path: Path, runtime_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in git_home(tmp_path / "git-home").items():
        monkeypatch.setenv(key, value)
    repo = make_repo(tmp_path / "repo", environ_with({}))
    claude, codex = _fakes()
    watch = Leftovers(folders=(runtime_root,))
    with claude, codex:
        store = open_store(tmp_path / "store.db")
        watch.baseline()
        try:
            backends: list[Provider] = [ClaudeCodeProvider(model=CLAUDE_MODEL, options=claude_options(claude))] * EACH
            backends += [CodexProvider(model=CODEX_MODEL, options=codex_options(codex))] * EACH
            racers: list[Racer] = []
            for n, backend in enumerate(backends, 1):
                tree = create(repo, run_id=f"{n:02d}" + "0" * 30, store=store.location)
                tools = workspace_tools(Workspace(tree.workspace))
                racers.append(Racer(label=backend.name, provider=backend, tree=tree, tools=tools))
            controller, agents = open_race(racers, store=store, yes=True, trace_file=tmp_path / "race.jsonl")
            completes: list[Complete] = []

            async def drive() -> None:
                async for event in stream_pipeline(controller, "say it"):
                    if isinstance(event, Complete):
                        completes.append(event)

            asyncio.run(_watched(drive(), watch))
            agents.release()
        finally:
            store.close()
        assert len(watch.seen) >= 2 * EACH, "the racers' programs never ran"
        problems = _settle(watch)
    assert not problems, "\n".join(problems)
    assert controller.report.outcome == "completed", controller.report
    texts = sorted(c.text for c in completes if c.text in ("From Claude.", "From Codex."))
    assert texts == ["From Claude."] * EACH + ["From Codex."] * EACH, completes


def _fan_out(tmp_path: Path, claude: AgentAnthropic, codex: AgentOpenAI) -> Path:
    roles = {f"claude{n}": ("claude-code", CLAUDE_MODEL, claude_options(claude)) for n in range(EACH)}
    roles |= {f"codex{n}": ("codex", CODEX_MODEL, codex_options(codex)) for n in range(EACH)}
    definition = {
        "name": "many-at-once",
        "phases": [{"name": "fan", "roles": list(roles), "next": "done"}],
        "transitions": {"fan": ["done"]},
        "roles": {
            role: {"kind": "agent", "provider": provider, "model": model, "options": options}
            for role, (provider, model, options) in roles.items()
        },
        "team": {"max_parallel": len(roles)},
    }
    path = tmp_path / "many.json"
    path.write_text(json.dumps(definition))
    return path


def test_a_pipeline_of_parallel_agent_cli_roles_leaves_no_process_descriptor_or_folder(
    world: CliWorld, tmp_path: Path, runtime_root: Path
) -> None:
    claude, codex = _fakes()
    watch = Leftovers(folders=(runtime_root,))
    with claude, codex:
        definition = resolve_pipeline(str(_fan_out(tmp_path, claude, codex)))
        store = open_store(tmp_path / "store.db")
        watch.baseline()
        try:
            controller = open_run(
                definition, workspace=world.workspace, store=store, trace_file=tmp_path / "run.jsonl", run_id="many"
            )
            completes: list[Complete] = []

            async def drive() -> None:
                async for event in stream_pipeline(controller, "say it"):
                    if isinstance(event, Complete):
                        completes.append(event)

            asyncio.run(_watched(drive(), watch))
        finally:
            store.close()
        assert len(watch.seen) >= 2 * EACH, "the roles' programs never ran"
        problems = _settle(watch)
    assert not problems, "\n".join(problems)
    assert controller.report.outcome == "completed", controller.report
    texts = sorted(c.text for c in completes[:-1])  # each role's turn; the last is the pipeline's
    assert texts == ["From Claude."] * EACH + ["From Codex."] * EACH, completes
