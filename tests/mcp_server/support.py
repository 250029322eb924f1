"""What the ``seamline mcp`` tests share: an agents file, the server's command line, and the
official MCP SDK's client connected over stdio or streamable HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession

ROOT = Path(__file__).resolve().parents[2]

# A reading tool call (tool activity the client sees as progress), then the answer.
READ_THEN_ANSWER: list[dict[str, Any]] = [
    {
        "text": "Looking.",
        "tool_calls": [{"id": "call-r", "name": "read_file", "arguments": {"path": "README.md"}}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.001},
    },
    {
        "text": "The readme says hello.",
        "stream": True,
        "usage": {"input_tokens": 20, "output_tokens": 6, "cost_usd": 0.002},
    },
]
WRITE_NOTE: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "call-w", "name": "write_file", "arguments": {"path": "note.txt", "content": "hi\n"}}]},
    {"text": "Wrote it.", "usage": {"input_tokens": 5, "output_tokens": 2, "cost_usd": 0.001}},
]


def agents_file(folder: Path, agents: dict[str, dict[str, Any]]) -> Path:
    """An agents TOML file (the values are strings, lists and booleans)."""
    lines: list[str] = []
    for name, body in agents.items():
        lines.append(f"[agents.{name}]")
        for key, value in body.items():
            if isinstance(value, dict):
                inner = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inner} }}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
    path = folder / "agents.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def scripted_agent(folder: Path, name: str, script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(script))
    return {"provider": "scripted", "options": {"script": str(path)}, "workspaces": [str(folder)], **extra}


def server_env(home: Path, **extra: str) -> dict[str, str]:
    """The variables the server needs (the SDK's stdio client starts it with a trimmed environment)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PYTHONPATH": str(ROOT / "src"),
        "SEAMLINE_STORE": str(home / "default-store.db"),
        "XDG_DATA_HOME": str(home / "data"),
        **extra,
    }


def server_args(agents: Path, store: Path, workspace: Path, *extra: str) -> list[str]:
    return ["-m", "seamline", "mcp", "--agents", str(agents), "--store", str(store), "-w", str(workspace), *extra]


@contextlib.asynccontextmanager
async def stdio_session(args: list[str], env: dict[str, str], **session: Any) -> AsyncIterator[ClientSession]:
    """The SDK's client on ``python -m seamline mcp`` over stdio, initialized."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(ROOT))
    with open(Path(env["HOME"]) / "server-stderr.txt", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **session) as client:
                await client.initialize()
                yield client


def start_http(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """``seamline mcp --transport http --port 0`` in its own process group, and its URL."""
    errlog = Path(env["HOME"]) / "server-stderr.txt"
    with open(errlog, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, *args, "--transport", "http", "--port", "0"],
            env=env,
            cwd=str(ROOT),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    for _ in range(3000):  # waits for the line that names the bound port, or the exit
        found = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", errlog.read_text())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    stop(proc)
    raise AssertionError(f"seamline mcp did not start: {errlog.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the server's group, then its exit status (SIGKILL after 20 s)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


@contextlib.contextmanager
def http_server(args: list[str], env: dict[str, str]) -> Iterator[str]:
    """The HTTP server for the length of a block; its URL."""
    proc, url = start_http(args, env)
    try:
        yield url
    finally:
        stop(proc)


@contextlib.asynccontextmanager
async def http_session(url: str, **session: Any) -> AsyncIterator[ClientSession]:
    """The SDK's client over streamable HTTP, initialized."""
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write, *_):
        async with ClientSession(read, write, **session) as client:
            await client.initialize()
            yield client
