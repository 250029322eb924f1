"""The approval socket the hook talks to: one JSON line each way, decided by the
permission service; bad requests are denied, and a decision still waiting when the
socket stops is cancelled so the hook hears the close (and denies)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from seamline.events import PermissionRequest
from seamline.providers.cli_approvals import ApprovalSocket
from seamline.tools.permissions import PermissionAnswer, PermissionService
from tests.providers.agent_cli_support import run_async


async def _ask(path: Path, line: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(line)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()


def _line(**asked: Any) -> bytes:
    return json.dumps(asked).encode() + b"\n"


@run_async
async def test_a_request_is_decided_and_bad_ones_are_denied(tmp_path: Path) -> None:
    bridge = ApprovalSocket(PermissionService(workspace=tmp_path, yes=True), tmp_path)
    await bridge.start()
    try:
        allowed = json.loads(await _ask(bridge.path, _line(tool_name="Bash", tool_input={"command": "ls"})))
        outside = _line(tool_name="Bash", tool_input={"command": "rm -rf /srv"}, tool_use_id="t2")
        denied = json.loads(await _ask(bridge.path, outside))
        garbage = json.loads(await _ask(bridge.path, b"not json\n"))
        nameless = json.loads(await _ask(bridge.path, _line(tool_input={})))
    finally:
        await bridge.stop()
    assert allowed["decision"] == "allow"
    assert denied["decision"] == "deny" and "hard denial" in denied["reason"]
    assert garbage["decision"] == "deny" and nameless["decision"] == "deny"
    events = [bridge.events.get_nowait() for _ in range(bridge.events.qsize())]
    kinds = [(e.type, getattr(e, "decision", None)) for e in events]
    assert kinds == [("permission_request", None), ("permission_decision", "allow"), ("permission_decision", "deny")]
    assert events[-1].request_id == "perm-t2"  # the hook's tool_use_id is the call id
    assert not bridge.path.exists() and bridge.hook.exists()


@run_async
async def test_stop_cancels_a_waiting_decision_and_closes_its_connection(tmp_path: Path) -> None:
    asked = asyncio.Event()

    async def never(request: PermissionRequest) -> PermissionAnswer:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    bridge = ApprovalSocket(PermissionService(workspace=tmp_path, prompter=never), tmp_path)
    await bridge.start()
    waiting = asyncio.create_task(_ask(bridge.path, _line(tool_name="Write", tool_input={"file_path": "x"})))
    await asked.wait()
    await bridge.stop()
    assert await waiting == b""  # closed without an answer: the hook exits 2
