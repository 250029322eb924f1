"""The `seamline serve` program (its `--agents FILE` and `--token`) as an A2A server for the
official SDK's client, and the run it made visible afterwards to `seamline sessions` and
`seamline watch` like any serve run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")
pytest.importorskip("a2a")

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse, TaskState

from tests.server.test_a2a_serve import READ_THEN_ANSWER
from tests.server.test_cli import _line

TOKEN = "a2a-cli-token-0123456789"


async def _drive(base: str) -> list[StreamResponse]:
    async with httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {TOKEN}"}) as http:
        client = await create_client(f"{base}/v1/agents/reader/a2a", ClientConfig(httpx_client=http))
        ask = SendMessageRequest(
            message=Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="what does the readme say?")])
        )
        async with asyncio.timeout(60):
            return [event async for event in client.send_message(ask)]


def test_the_serve_program_answers_a2a_and_the_run_is_in_sessions_and_watch(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    (tmp_path / "README.md").write_text("hello\n")
    script = tmp_path / "reader.json"
    script.write_text(json.dumps(READ_THEN_ANSWER))
    agents = tmp_path / "agents.toml"
    agents.write_text(
        f'[agents.reader]\nprovider = "scripted"\noptions = {{ script = "{script}" }}\nworkspaces = ["{tmp_path}"]\n'
    )
    store = str(tmp_path / "s.db")
    command = [*seamline_cmd, "serve", "--port", "0", "--store", store, "--workspace", str(tmp_path)]
    command += ["--agents", str(agents), "--token", TOKEN]
    proc = subprocess.Popen(command, env=cli_env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/", _line(proc, time.monotonic() + 60))
        assert found
        events = asyncio.run(_drive(found.group(1)))
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for p in events[-2].artifact_update.artifact.parts] == ["The readme says hello."]
    session_id = final.context_id
    listed = subprocess.run(
        [*seamline_cmd, "sessions", "list", "--json", "--store", store],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    assert [(r["id"], r["status"]) for r in rows] == [(session_id, "completed")]
    watched = subprocess.run(
        [*seamline_cmd, "watch", "--snapshot", "--json", "--store", store],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert watched.returncode == 0, watched.stderr
    assert session_id in watched.stdout
