"""The official MCP Python SDK's client drives ``seamline mcp`` over stdio and over
streamable HTTP (127.0.0.1): it lists the tools, calls an agent backed by the scripted
provider and gets progress before the answer, cost and run id; the run is in the store;
a cancel aborts the run (the fake model server sees no further request)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession

from seamline.sessions.sqlite_store import SQLiteStore
from tests.fakes.openai_api import FakeOpenAI
from tests.mcp_server.support import (
    READ_THEN_ANSWER,
    ROOT,
    WRITE_NOTE,
    agents_file,
    http_server,
    http_session,
    scripted_agent,
    server_args,
    server_env,
    start_http,
    stdio_session,
    stop,
)
from tests.providers.agent_cli_support import run_async

TRANSPORTS = ("stdio", "http")


@contextlib.asynccontextmanager
async def connect(
    transport: str, tmp_path: Path, agents: dict[str, dict[str, Any]], **session: Any
) -> AsyncIterator[ClientSession]:
    (tmp_path / "README.md").write_text("hello\n")
    args = server_args(agents_file(tmp_path, agents), tmp_path / "store.db", tmp_path)
    env = server_env(tmp_path, OPENAI_API_KEY="sk-test")
    if transport == "stdio":
        async with stdio_session(args, env, **session) as client:
            yield client
        return
    with http_server(args, env) as url:
        async with http_session(url, **session) as client:
            yield client


def stored(tmp_path: Path, session_id: str) -> Any:
    store = SQLiteStore(str(tmp_path / "store.db"))
    try:
        return store.require(session_id)
    finally:
        store.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@run_async
async def test_tools_list_offers_declared_agents_pipelines_and_sessions(tmp_path: Path, transport: str) -> None:
    agents = {"helper": scripted_agent(tmp_path, "helper", READ_THEN_ANSWER, description="Reads the readme")}
    async with connect(transport, tmp_path, agents) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"helper", "pipeline_single", "sessions_list", "session_read", "session_continue"} <= set(tools)
    assert "run" not in tools  # with --agents, only what the operator declared
    helper = tools["helper"]
    assert helper.description is not None and helper.description.startswith("Reads the readme")
    assert helper.input_schema["required"] == ["task"]
    # No options (client_options is empty) and no `yes` (the operator did not allow it).
    assert set(helper.input_schema["properties"]) == {"task", "workspace", "budget_usd"}


@pytest.mark.parametrize("transport", TRANSPORTS)
@run_async
async def test_call_streams_progress_before_the_answer_cost_and_run_in_the_store(
    tmp_path: Path, transport: str
) -> None:
    agents = {"helper": scripted_agent(tmp_path, "helper", READ_THEN_ANSWER)}
    seen: list[tuple[str, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(("progress", message))

    async with connect(transport, tmp_path, agents) as client:
        result = await client.call_tool("helper", {"task": "what does the readme say?"}, progress_callback=progress)
        seen.append(("result", None))
        listed = await client.call_tool("sessions_list", {})
    assert not result.is_error, result.content
    out = result.structured_content
    assert out is not None
    assert out["text"] == "The readme says hello."
    assert out["outcome"] == "completed"
    assert out["cost_usd"] == pytest.approx(0.003)
    assert result.content[0].type == "text" and result.content[0].text == "The readme says hello."
    assert out["run_id"] in result.content[1].text  # type: ignore[union-attr]
    # Progress came before the result, with the tool activity and the streamed text in it.
    kinds = [k for k, _ in seen]
    assert "progress" in kinds and kinds.index("progress") < kinds.index("result")
    messages = " | ".join(m or "" for k, m in seen if k == "progress")
    assert "Looking." in messages  # a step's text that was not streamed
    assert 'tool read_file {"path": "README.md"}' in messages and "tool read_file done" in messages
    assert "The readme says hello." in messages
    # The run's session is in the store like any, and the session tools list it.
    record = stored(tmp_path, out["session_id"])
    assert record.provider == "scripted"
    assert record.metadata.get("agent") == "helper" and record.metadata.get("surface") == "mcp"
    assert listed.structured_content is not None
    assert out["session_id"] in [s["id"] for s in listed.structured_content["sessions"]]


@run_async
async def test_the_run_is_visible_to_seamline_sessions_and_watch(tmp_path: Path) -> None:
    agents = {"helper": scripted_agent(tmp_path, "helper", READ_THEN_ANSWER)}
    async with connect("stdio", tmp_path, agents) as client:
        result = await client.call_tool("helper", {"task": "what does the readme say?"})
    assert result.structured_content is not None
    session_id = result.structured_content["session_id"]
    shown = subprocess.run(
        [sys.executable, "-m", "seamline", "sessions", "list", "--store", str(tmp_path / "store.db")],
        capture_output=True,
        text=True,
        env=server_env(tmp_path),
        cwd=str(ROOT),
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert session_id[:8] in shown.stdout
    watched = subprocess.run(
        [sys.executable, "-m", "seamline", "watch", "--snapshot", "--json", "--store", str(tmp_path / "store.db")],
        capture_output=True,
        text=True,
        env=server_env(tmp_path),
        cwd=str(ROOT),
        timeout=120,
    )
    assert watched.returncode == 0, watched.stderr
    assert session_id in watched.stdout


@pytest.mark.parametrize("transport", TRANSPORTS)
@run_async
async def test_cancel_aborts_the_run_and_the_model_sees_no_further_request(tmp_path: Path, transport: str) -> None:
    # The first model call streams a tool call; the second stalls until cancelled.
    script = [
        {"tool_calls": [{"id": "call-l", "name": "list_dir", "arguments": {"path": "."}}]},
        {"text": "never", "chunks": ["nev", "er"], "cut_after": 1, "cut": "stall"},
    ]
    with FakeOpenAI(script=script, fallback={"text": "a further request"}) as fake:
        agents = {
            "slow": {
                "provider": "openai",
                "model": "gpt-4o",
                "options": {"base_url": fake.base_url},
                "workspaces": [str(tmp_path)],
            }
        }
        started = asyncio.Event()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if message and "tool list_dir" in message:
                started.set()

        async with connect(transport, tmp_path, agents) as client:
            call = asyncio.create_task(client.call_tool("slow", {"task": "list"}, progress_callback=progress))
            await asyncio.wait_for(started.wait(), timeout=60)
            for _ in range(3000):  # the stalled second model call has arrived
                if len(fake.model_requests()) >= 2:
                    break
                await asyncio.sleep(0.02)
            assert len(fake.model_requests()) == 2
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            listed = None
            for _ in range(3000):  # the run ends aborted (the store says so)
                listed = await client.call_tool("sessions_list", {})
                rows = (listed.structured_content or {}).get("sessions", [])
                if rows and rows[0]["status"] == "aborted" and not rows[0]["busy"]:
                    break
                await asyncio.sleep(0.02)
            assert listed is not None
            row = (listed.structured_content or {})["sessions"][0]
            assert row["status"] == "aborted"
            assert not row["busy"]
        assert len(fake.model_requests()) == 2  # nothing after the cancel


@pytest.mark.parametrize("transport", TRANSPORTS)
@run_async
async def test_ask_without_elicitation_is_denied_and_nothing_is_written(tmp_path: Path, transport: str) -> None:
    agents = {"writer": scripted_agent(tmp_path, "writer", WRITE_NOTE)}
    async with connect(transport, tmp_path, agents) as client:
        result = await client.call_tool("writer", {"task": "write a note"})
    assert result.structured_content is not None
    assert not (tmp_path / "note.txt").exists()
    assert result.structured_content["changed_files"] == []


@pytest.mark.parametrize("transport", TRANSPORTS)
@run_async
async def test_ask_goes_to_the_client_through_elicitation(tmp_path: Path, transport: str) -> None:
    import mcp_types as types

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"allow": True})

    agents = {"writer": scripted_agent(tmp_path, "writer", WRITE_NOTE)}
    async with connect(transport, tmp_path, agents, elicitation_callback=elicit) as client:
        result = await client.call_tool("writer", {"task": "write a note"})
    assert asked and "write_file" in asked[0]
    assert (tmp_path / "note.txt").read_text() == "hi\n"
    assert result.structured_content is not None
    assert result.structured_content["changed_files"] == ["note.txt"]
    assert result.structured_content["text"] == "Wrote it."


@run_async
async def test_sigterm_stops_the_http_server_cleanly_and_its_running_call_ends_aborted(tmp_path: Path) -> None:
    script = [{"text": "never", "chunks": ["nev", "er"], "cut_after": 1, "cut": "stall"}]
    with FakeOpenAI(script=script) as fake:
        agents = {
            "slow": {
                "provider": "openai",
                "model": "gpt-4o",
                "options": {"base_url": fake.base_url},
                "workspaces": [str(tmp_path)],
            }
        }
        args = server_args(agents_file(tmp_path, agents), tmp_path / "store.db", tmp_path)
        proc, url = start_http(args, server_env(tmp_path, OPENAI_API_KEY="sk-test"))
        try:
            async with http_session(url) as client:
                call = asyncio.create_task(client.call_tool("slow", {"task": "list"}))
                for _ in range(3000):  # the stalled model call has arrived
                    if fake.model_requests():
                        break
                    await asyncio.sleep(0.02)
                assert len(fake.model_requests()) == 1
                status = await asyncio.to_thread(stop, proc)
                with contextlib.suppress(BaseException):
                    await call
        finally:
            stop(proc)
    assert status == 0, (tmp_path / "server-stderr.txt").read_text()
    store = SQLiteStore(str(tmp_path / "store.db"))
    try:
        rows = store.list_sessions()
    finally:
        store.close()
    assert [r.status for r in rows] == ["aborted"]
