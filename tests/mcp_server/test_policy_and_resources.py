"""``seamline mcp`` keeps serve's policy (the safe defaults without --agents, the operator's
choices with it), runs pipelines whose traces verify, continues sessions, and offers
sessions and traces as MCP resources."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mcp.client.session import ClientSession

from tests.mcp_server.support import (
    READ_THEN_ANSWER,
    ROOT,
    agents_file,
    scripted_agent,
    server_args,
    server_env,
    stdio_session,
)
from tests.providers.agent_cli_support import run_async


def _text(result: object) -> str:
    return " ".join(getattr(c, "text", "") for c in getattr(result, "content", []))


@run_async
async def test_without_agents_one_run_tool_under_the_safe_defaults(tmp_path: Path) -> None:
    args = ["-m", "seamline", "mcp", "--store", str(tmp_path / "store.db"), "-w", str(tmp_path)]
    async with stdio_session(args, server_env(tmp_path)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        answered = await client.call_tool("run", {"task": "hello"})
        # An option that names a program, path or endpoint is the operator's, never a client's.
        refused = await client.call_tool(
            "run", {"task": "hi", "provider": "openai", "options": {"base_url": "http://127.0.0.1:9/v1"}}
        )
        outside = await client.call_tool("run", {"task": "hi", "workspace": "/"})
    assert {"run", "pipeline_single", "sessions_list"} <= set(tools)
    assert "provider" in tools["run"].input_schema["properties"]
    assert not answered.is_error and answered.structured_content is not None
    assert answered.structured_content["outcome"] == "completed"
    assert refused.is_error and "only the server's operator sets it" in _text(refused)
    assert outside.is_error and "outside the folders" in _text(outside)


@run_async
async def test_yes_and_unlisted_options_are_refused_unless_the_operator_allows_them(tmp_path: Path) -> None:
    agents = {
        "strict": scripted_agent(tmp_path, "strict", READ_THEN_ANSWER),
        "trusted": scripted_agent(tmp_path, "trusted", READ_THEN_ANSWER, yes=True),
    }
    (tmp_path / "README.md").write_text("hello\n")
    args = server_args(agents_file(tmp_path, agents), tmp_path / "store.db", tmp_path)
    async with stdio_session(args, server_env(tmp_path)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        refused = await client.call_tool("strict", {"task": "go", "yes": True})
        allowed = await client.call_tool("trusted", {"task": "go", "yes": True})
    assert "yes" not in tools["strict"].input_schema["properties"]
    assert "yes" in tools["trusted"].input_schema["properties"]
    assert refused.is_error and "yes" in _text(refused)
    assert not allowed.is_error, _text(allowed)


async def _read(client: ClientSession, uri: str) -> dict[str, object]:
    result = await client.read_resource(uri)
    text = getattr(result.contents[0], "text", "")
    return json.loads(text)  # type: ignore[no-any-return]


@run_async
async def test_pipeline_run_has_a_trace_that_verifies_and_is_a_resource(tmp_path: Path) -> None:
    agents = {"helper": scripted_agent(tmp_path, "helper", READ_THEN_ANSWER)}
    (tmp_path / "README.md").write_text("hello\n")
    store = tmp_path / "store.db"
    args = server_args(agents_file(tmp_path, agents), store, tmp_path)
    async with stdio_session(args, server_env(tmp_path)) as client:
        result = await client.call_tool("pipeline_single", {"task": "what does the readme say?", "agent": "helper"})
        assert result.structured_content is not None, _text(result)
        run_id = result.structured_content["run_id"]
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        trace = await _read(client, f"seamline://traces/{run_id}")
    assert result.structured_content["outcome"] == "completed"
    assert result.structured_content["text"] == "The readme says hello."
    assert f"seamline://traces/{run_id}" in listed
    verification = trace["verification"]
    assert isinstance(verification, dict) and verification["ok"] is True
    verified = subprocess.run(
        [sys.executable, "-m", "seamline", "trace", "verify", run_id, "--store", str(store)],
        capture_output=True,
        text=True,
        env=server_env(tmp_path),
        cwd=str(ROOT),
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


@run_async
async def test_continue_a_session_and_read_it_as_a_tool_and_a_resource(tmp_path: Path) -> None:
    script = [*READ_THEN_ANSWER, {"text": "Second answer.", "usage": {"input_tokens": 3, "output_tokens": 2}}]
    agents = {"helper": scripted_agent(tmp_path, "helper", script)}
    (tmp_path / "README.md").write_text("hello\n")
    args = server_args(agents_file(tmp_path, agents), tmp_path / "store.db", tmp_path)
    async with stdio_session(args, server_env(tmp_path)) as client:
        first = await client.call_tool("helper", {"task": "what does the readme say?"})
        assert first.structured_content is not None
        session_id = first.structured_content["session_id"]
        second = await client.call_tool("session_continue", {"session_id": session_id, "task": "and then?"})
        read = await client.call_tool("session_read", {"session_id": session_id})
        resource = await _read(client, f"seamline://sessions/{session_id}")
        missing = await client.call_tool("session_read", {"session_id": "nope"})
    assert second.structured_content is not None
    assert second.structured_content["session_id"] == session_id
    assert second.structured_content["text"] == "Second answer."
    assert read.structured_content is not None
    transcript = json.dumps(read.structured_content["transcript"])
    assert "and then?" in transcript and "Second answer." in transcript
    assert resource["session"]["id"] == session_id  # type: ignore[index]
    assert missing.is_error


def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "agents.toml"
    bad.write_text('[agents.x]\nprovider = "no-such-provider"\n')
    cases = [
        ["--agents", str(bad)],
        ["--transport", "http", "--host", "0.0.0.0"],  # no token: loopback only
        ["--workspace", str(tmp_path / "missing")],
    ]
    for extra in cases:
        done = subprocess.run(
            [sys.executable, "-m", "seamline", "mcp", "--store", str(tmp_path / "s.db"), *extra],
            capture_output=True,
            text=True,
            env=server_env(tmp_path),
            cwd=str(ROOT),
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert done.returncode == 2, (extra, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
