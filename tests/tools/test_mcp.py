"""MCP servers as tool sources: the real reference server over stdio, an SDK server over
streamable HTTP on 127.0.0.1, and servers that crash, hang or answer garbage."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from seamline.errors import TransportFailure
from seamline.events import Error, ToolCall, ToolResult
from seamline.runner import run
from seamline.stages import AgentBuilder
from seamline.testing import scripted
from seamline.tools import Toolset
from seamline.tools.mcp import McpModule, McpToolSource
from seamline.tools.mcp_config import McpServerConfig
from seamline.tools.sources import ToolSourceContext
from tests.fixtures.processes import alive

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / ".tools/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
PY_SERVER = Path(__file__).parent / "mcp_servers" / "python_server.py"


@pytest.fixture
def everything() -> McpServerConfig:
    if not EVERYTHING.is_file():
        pytest.fail(
            f"the reference MCP server is missing ({EVERYTHING}); install it with "
            "`bash scripts/setup --dev` (scripts/system/30-mcp-servers.sh)"
        )
    return McpServerConfig(name="everything", transport="stdio", command="node", args=(str(EVERYTHING), "stdio"))


def _py_stdio(name: str = "py", **kw: object) -> McpServerConfig:
    return McpServerConfig(name=name, transport="stdio", command=sys.executable, args=(str(PY_SERVER), "stdio"), **kw)  # type: ignore[arg-type]


def _run(
    script: list[dict[str, object]],
    servers: list[McpServerConfig],
    tmp_path: Path,
    notes: list[str] | None = None,
    **kw: object,
):  # type: ignore[no-untyped-def]
    builder = AgentBuilder().use(McpModule(servers))
    return asyncio.run(
        run(
            "go",
            provider=scripted(script),
            workspace=tmp_path,
            tools=Toolset(),
            builder=builder,
            on_notice=(notes if notes is not None else []).append,
            **kw,
        )
    )


@pytest.mark.real
def test_reference_server_over_stdio_lists_and_calls_a_tool(everything: McpServerConfig, tmp_path: Path) -> None:
    script = [{"tool_calls": [{"name": "echo", "arguments": {"message": "round trip"}}]}, {"text": "ok"}]
    result = _run(script, [everything], tmp_path)
    assert result.outcome == "completed", result.events
    call = next(e for e in result.events if isinstance(e, ToolCall))
    assert call.source == "mcp:everything"
    output = next(e for e in result.events if isinstance(e, ToolResult))
    assert output.output == "Echo: round trip" and not output.is_error


@pytest.mark.real
def test_reference_server_tool_metadata_comes_from_annotations(everything: McpServerConfig) -> None:
    async def go() -> dict[str, tuple[str, str, str | None, bool]]:
        source = McpToolSource([everything])
        try:
            tools = await source.get_tools(ToolSourceContext())
            return {t.name: (t.tool_class, t.source, t.server, t.reaches_outside) for t in tools}
        finally:
            await source.aclose()

    found = asyncio.run(go())
    assert found["echo"] == ("read", "mcp", "everything", False)  # readOnlyHint
    assert found["gzip-file-as-resource"] == ("network", "mcp", "everything", True)  # openWorldHint
    assert found["toggle-simulated-logging"][0] == "execute"  # no hint: the careful class


@pytest.mark.real
def test_one_session_per_server_per_run_and_the_process_ends_with_the_run(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "pid", "arguments": {}}, {"name": "add", "arguments": {"a": 2, "b": 3}}]},
        {"tool_calls": [{"name": "pid", "arguments": {}}]},
        {"text": "ok"},
    ]
    result = _run(script, [_py_stdio()], tmp_path)
    outputs = [e.output for e in result.events if isinstance(e, ToolResult)]
    assert outputs[1] == "5"
    assert outputs[0] == outputs[2]  # both steps talked to the same server process
    pid = int(outputs[0])
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the server outlived its run"


@pytest.fixture
def http_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(PY_SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the streamable-HTTP MCP test server did not start")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.real
def test_streamable_http_server_on_localhost(http_server: str, tmp_path: Path) -> None:
    server = McpServerConfig(name="web", transport="http", url=http_server)
    script = [
        {"tool_calls": [{"name": "add", "arguments": {"a": 40, "b": 2}}, {"name": "fail", "arguments": {}}]},
        {"text": "ok"},
    ]
    result = _run(script, [server], tmp_path)
    assert result.outcome == "completed"
    add, fail = [e for e in result.events if isinstance(e, ToolResult)]
    assert add.output == "42" and not add.is_error
    assert fail.is_error and "MCP tool fail of web failed: Error executing tool fail" in fail.output
    assert next(e for e in result.events if isinstance(e, ToolCall)).source == "mcp:web"


@pytest.mark.real
def test_bad_servers_are_classified_and_the_run_goes_on_without_them(tmp_path: Path) -> None:
    bad = [
        McpServerConfig(
            name="crash", transport="stdio", command=sys.executable, args=("-c", "import sys; sys.exit(3)")
        ),
        McpServerConfig(
            name="hang",
            transport="stdio",
            command=sys.executable,
            args=("-c", "import time; time.sleep(60)"),
            startup_timeout=1.0,
        ),
        McpServerConfig(
            name="garbage",
            transport="stdio",
            command=sys.executable,
            args=("-c", "import sys\nfor line in sys.stdin: print('<html>not json</html>', flush=True)"),
        ),
        McpServerConfig(name="absent", transport="stdio", command="/nonexistent/mcp-server"),
        McpServerConfig(name="refused", transport="http", url="http://127.0.0.1:9/mcp", startup_timeout=5.0),
    ]
    silent = socket.socket()  # listens, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    bad.append(
        McpServerConfig(name="silent", transport="http", url=f"http://127.0.0.1:{port}/mcp", startup_timeout=1.0)
    )
    notes: list[str] = []
    script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, {"text": "ok"}]
    try:
        result = _run(script, [*bad, _py_stdio()], tmp_path, notes)
    finally:
        silent.close()
    assert result.outcome == "completed"
    assert [e.output for e in result.events if isinstance(e, ToolResult)] == ["2"]
    by_server = {n.split()[2]: n for n in notes}
    assert "transport error" in by_server["crash"] and "exited before it answered" in by_server["crash"]
    assert "timeout error" in by_server["hang"]
    assert "transport error" in by_server["garbage"] and "garbage" in by_server["garbage"]
    assert "transport error" in by_server["absent"] and "cannot start" in by_server["absent"]
    assert "transport error" in by_server["refused"]
    assert "timeout error" in by_server["silent"]


@pytest.mark.real
def test_a_server_that_answers_a_call_with_garbage_gives_a_timeout_and_the_run_goes_on(tmp_path: Path) -> None:
    garbage = McpServerConfig(
        name="garbled",
        transport="stdio",
        command=sys.executable,
        args=(str(PY_SERVER.parent / "garbage_on_call.py"),),
        call_timeout=1.0,
        tool_class="read",  # the server gives no annotations; the config says what the tool is
    )
    script = [{"tool_calls": [{"name": "speak", "arguments": {}}]}, {"text": "carried on"}]
    result = _run(script, [garbage], tmp_path)
    assert result.outcome == "completed" and result.text == "carried on"
    (speak,) = [e for e in result.events if isinstance(e, ToolResult)]
    assert speak.is_error and speak.output == "timeout error: MCP server garbled did not answer in time"


def test_a_required_server_that_fails_stops_the_run_before_the_session(tmp_path: Path) -> None:
    crash = McpServerConfig(
        name="crash", transport="stdio", command=sys.executable, args=("-c", "import sys; sys.exit(3)"), required=True
    )
    with pytest.raises(TransportFailure, match="crash exited before it answered"):
        _run([{"text": "never"}], [crash], tmp_path)


@pytest.mark.real
def test_a_server_that_dies_or_stalls_mid_run_fails_that_call_and_the_run_goes_on(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "slow", "arguments": {"seconds": 3}}]},
        {"tool_calls": [{"name": "die", "arguments": {}}]},
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
        {"text": "carried on"},
    ]
    result = _run(script, [_py_stdio(call_timeout=1.0)], tmp_path)
    assert result.outcome == "completed" and result.text == "carried on"
    slow, died, after = [e for e in result.events if isinstance(e, ToolResult)]
    assert slow.is_error and slow.output.startswith("timeout error")
    assert died.is_error and died.output.startswith("transport error")
    assert after.is_error and "is not running" in after.output
    assert any(isinstance(e, Error) and e.kind == "timeout" for e in result.events)


def test_host_tool_wins_over_an_mcp_tool_of_the_same_name(tmp_path: Path) -> None:
    from seamline.tools import tool

    @tool
    def add(a: int, b: int) -> str:
        """Host add."""
        return f"host {a + b}"

    notes: list[str] = []
    builder = AgentBuilder().use(McpModule([_py_stdio()]))
    script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, {"text": "ok"}]
    result = asyncio.run(
        run(
            "go",
            provider=scripted(script),
            workspace=tmp_path,
            tools=Toolset([add]),
            builder=builder,
            on_notice=notes.append,
        )
    )
    assert [e.output for e in result.events if isinstance(e, ToolResult)] == ["host 2"]
    assert "tool 'add' of source mcp is shadowed by the host tool of the same name" in notes


@pytest.mark.real
def test_cli_run_calls_a_tool_of_the_reference_server(
    everything: McpServerConfig, tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "get-sum", "arguments": {"a": 19, "b": 23}}]}, {"text": "summed"}])
    )
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {"mcpServers": {"everything": {"type": "stdio", "command": "node", "args": [str(EVERYTHING), "stdio"]}}}
        )
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    cli_env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    proc = subprocess.run(
        [
            *seamline_cmd,
            "run",
            "--provider",
            "scripted",
            "--provider-option",
            f"script={script}",
            "--mcp-config",
            str(config),
            "--json",
            "-w",
            str(workspace),
            "add them",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["output"] == "The sum of 19 and 23 is 42." and result["is_error"] is False
    assert next(e for e in events if e["type"] == "tool_call")["source"] == "mcp:everything"
    final = {k: v for k, v in events[-1].items() if k != "totals"}  # the line also carries the run's totals
    assert final == {"type": "complete", "outcome": "completed", "stop_reason": "end_turn", "text": "summed"}
    # The server's start-up line ("Starting default (STDIO) server...") is not the user's.
    assert "Starting" not in proc.stderr and proc.stderr == ""


@pytest.mark.real
def test_each_session_is_opened_and_closed_by_one_task_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp.client.session import ClientSession

    entered: list[tuple[int, asyncio.Task[object] | None]] = []
    exited: list[tuple[int, asyncio.Task[object] | None]] = []
    real_enter, real_exit = ClientSession.__aenter__, ClientSession.__aexit__

    async def enter(self: ClientSession) -> ClientSession:
        entered.append((id(self), asyncio.current_task()))
        return await real_enter(self)

    async def leave(self: ClientSession, *exc: object) -> bool | None:
        exited.append((id(self), asyncio.current_task()))
        return await real_exit(self, *exc)  # type: ignore[arg-type]

    monkeypatch.setattr(ClientSession, "__aenter__", enter)
    monkeypatch.setattr(ClientSession, "__aexit__", leave)
    script = [
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}, {"name": "pid", "arguments": {}}]},
        {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 2}}]},
        {"text": "ok"},
    ]
    result = _run(script, [_py_stdio("one"), _py_stdio("two")], tmp_path)
    assert result.outcome == "completed"
    assert len(entered) == 2  # one session per server for the whole run
    assert sorted(entered, key=lambda e: e[0]) == sorted(exited, key=lambda e: e[0])  # same session, same task
    tasks = {task for _, task in entered}
    assert len(tasks) == 2 and all(t is not None and t.get_name().startswith("seamline-mcp-") for t in tasks)


def _cli_run_with(
    server: Mapping[str, object],
    tmp_path: Path,
    seamline_cmd: list[str],
    cli_env: dict[str, str],
    *,
    debug: bool = False,
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}, {"text": "ok"}]))
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"py": server}}))
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    env = {**cli_env, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    if debug:
        env["SEAMLINE_DEBUG"] = "1"
    return subprocess.run(
        [*seamline_cmd, "run", "-p", "scripted", "-o", f"script={script}", "--mcp-config", str(config),
         "-w", str(workspace), "add them"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_a_stdio_servers_stderr_stays_off_the_terminal(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    server = {"type": "stdio", "command": sys.executable, "args": [str(PY_SERVER), "stdio"]}
    done = _cli_run_with(server, tmp_path, seamline_cmd, cli_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"
    assert "Starting seamline-test" not in done.stderr and done.stderr == ""
    # SEAMLINE_DEBUG=1 lets it through, for whoever is debugging the server.
    shown = _cli_run_with(server, tmp_path, seamline_cmd, cli_env, debug=True)
    assert shown.returncode == 0 and "Starting seamline-test (STDIO) server..." in shown.stderr


def test_a_server_that_fails_to_start_shows_the_end_of_its_stderr(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    crash = (
        "import sys; print('starting', file=sys.stderr); print('no API key in FOO_TOKEN', file=sys.stderr); sys.exit(3)"
    )
    server = {"type": "stdio", "command": sys.executable, "args": ["-c", crash]}
    done = _cli_run_with(server, tmp_path, seamline_cmd, cli_env)
    assert done.returncode == 0, done.stderr  # a server not required is left out; the run goes on
    (line,) = [line for line in done.stderr.splitlines() if "MCP server py" in line]
    assert "exited before it answered" in line and "its stderr ended: starting | no API key in FOO_TOKEN" in line
    # A required server's failure stops the run, and says the same.
    crash_cfg = McpServerConfig(
        name="crash", transport="stdio", command=sys.executable, args=("-c", crash), required=True
    )
    with pytest.raises(TransportFailure, match=re.escape("its stderr ended: starting | no API key in FOO_TOKEN")):
        _run([{"text": "never"}], [crash_cfg], tmp_path)
