"""The MCP Inspector CLI (npm ``@modelcontextprotocol/inspector-cli``, pinned in
scripts/npm/mcp-servers and installed in .tools/mcp-servers) drives ``seamline mcp`` over
stdio (it starts the server itself) and over streamable HTTP on 127.0.0.1: ``tools/list``
names the declared agents, ``tools/call`` runs one (the scripted provider answers for it) and
prints the answer with the run's id and cost; the run is in the store. The Inspector offers
no elicitation, so a write the rules leave to ``ask`` is denied."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from seamline.sessions.sqlite_store import SQLiteStore
from tests.mcp_server.support import (
    READ_THEN_ANSWER,
    ROOT,
    WRITE_NOTE,
    agents_file,
    http_server,
    scripted_agent,
    server_args,
    server_env,
)

PACKAGE = ROOT / ".tools/mcp-servers/node_modules/@modelcontextprotocol/inspector-cli"
INSPECTOR = ROOT / ".tools/mcp-servers/node_modules/.bin/mcp-inspector-cli"
TRANSPORTS = ("stdio", "http")


def inspector_program() -> str:
    """The pinned Inspector CLI; fails the test (not skips) when it is not installed."""
    if not (INSPECTOR.exists() and os.access(INSPECTOR, os.X_OK)):
        pytest.fail(
            f"the MCP Inspector CLI is missing ({INSPECTOR}); install it with "
            "`bash scripts/setup --dev` (scripts/system/30-mcp-servers.sh)"
        )
    return str(INSPECTOR)


def inspect(target: list[str], env: dict[str, str], *method: str) -> dict[str, Any]:
    """``mcp-inspector-cli --cli TARGET... --method ...`` in its own process group; its JSON.

    It runs in the package's ``build`` folder: 1.0.3 looks for ``../package.json`` relative
    to its working directory but imports it relative to its own file, and fails to start
    where the two differ (modelcontextprotocol/inspector#1503)."""
    command = [inspector_program(), "--cli", *target, *method]
    proc = subprocess.Popen(
        command,
        cwd=str(PACKAGE / "build"),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the stdio server it started, if it lingers
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, f"{' '.join(method)} exited {proc.returncode}: {err[-3000:]}"
    result: dict[str, Any] = json.loads(out)
    return result


@contextlib.contextmanager
def target(
    transport: str, tmp_path: Path, agents: dict[str, dict[str, Any]]
) -> Generator[tuple[list[str], dict[str, str]]]:
    """What the Inspector is pointed at (the server's command line, or its URL) and its environment."""
    (tmp_path / "README.md").write_text("hello\n")
    args = server_args(agents_file(tmp_path, agents), tmp_path / "store.db", tmp_path)
    env = server_env(tmp_path)
    if transport == "stdio":
        yield [sys.executable, *args], env
        return
    with http_server(args, env) as url:
        yield [url, "--transport", "http"], env


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_inspector_lists_the_declared_agents_as_tools(tmp_path: Path, transport: str) -> None:
    agents = {
        "helper": scripted_agent(tmp_path, "helper", READ_THEN_ANSWER, description="Reads the readme"),
        "second": scripted_agent(tmp_path, "second", READ_THEN_ANSWER),
    }
    with target(transport, tmp_path, agents) as (where, env):
        listed = inspect(where, env, "--method", "tools/list")
    tools = {t["name"]: t for t in listed["tools"]}
    assert {"helper", "second", "pipeline_single", "sessions_list", "session_read", "session_continue"} <= set(tools)
    assert "run" not in tools  # with --agents, only what the operator declared
    assert tools["helper"]["description"].startswith("Reads the readme")
    assert tools["helper"]["inputSchema"]["required"] == ["task"]
    assert set(tools["helper"]["inputSchema"]["properties"]) == {"task", "workspace", "budget_usd"}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_inspector_calls_an_agent_and_gets_its_answer_run_id_and_cost(tmp_path: Path, transport: str) -> None:
    agents = {"helper": scripted_agent(tmp_path, "helper", READ_THEN_ANSWER)}
    with target(transport, tmp_path, agents) as (where, env):
        called = inspect(
            where,
            env,
            "--method",
            "tools/call",
            "--tool-name",
            "helper",
            "--tool-arg",
            "task=what does the readme say?",
            "budget_usd=1",  # the Inspector sends it as a number, as the input schema says
        )
    assert called.get("isError") is False, called
    out = called["structuredContent"]
    assert out["text"] == "The readme says hello."
    assert out["outcome"] == "completed"
    assert abs(out["cost_usd"] - 0.003) < 1e-9
    texts = [block["text"] for block in called["content"]]
    assert texts[0] == "The readme says hello."
    assert f"[seamline run {out['run_id']} · completed · cost $0.0030]" in texts[1]
    store = SQLiteStore(str(tmp_path / "store.db"))
    try:
        record = store.require(out["session_id"])
    finally:
        store.close()
    assert record.provider == "scripted"
    assert record.metadata.get("agent") == "helper" and record.metadata.get("surface") == "mcp"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_inspector_sees_a_refused_call_as_a_tool_error_and_nothing_runs(tmp_path: Path, transport: str) -> None:
    agents = {"helper": scripted_agent(tmp_path, "helper", READ_THEN_ANSWER)}
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    outside.mkdir()
    with target(transport, tmp_path, agents) as (where, env):
        called = inspect(
            where,
            env,
            "--method",
            "tools/call",
            "--tool-name",
            "helper",
            "--tool-arg",
            "task=read it",
            f"workspace={outside}",
        )
    assert called.get("isError") is True, called
    assert "workspace" in called["content"][0]["text"]
    store = SQLiteStore(str(tmp_path / "store.db"))
    try:
        assert store.list_sessions() == []
    finally:
        store.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_inspector_offers_no_elicitation_so_an_ask_is_denied_and_nothing_is_written(
    tmp_path: Path, transport: str
) -> None:
    agents = {"writer": scripted_agent(tmp_path, "writer", WRITE_NOTE)}
    with target(transport, tmp_path, agents) as (where, env):
        called = inspect(where, env, "--method", "tools/call", "--tool-name", "writer", "--tool-arg", "task=write")
    assert called["structuredContent"]["changed_files"] == [], called
    assert not (tmp_path / "note.txt").exists()
