"""The approval socket the hook talks to: one JSON line each way, decided by the
permission service; bad requests are denied, and a decision still waiting when the
socket stops is cancelled so the hook hears the close (and denies); the hook program is
written without following a link planted at its name."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from seamline.events import PermissionRequest
from seamline.providers.agent_clis.approvals import HOOK_NAME, HOOK_SOURCE, ApprovalSocket
from seamline.sandbox.private_files import PrivatePathRefused
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


@run_async
async def test_start_replaces_a_link_planted_at_the_hook_and_never_writes_through_it(tmp_path: Path) -> None:
    # The attack: the program in the envelope put a link to a host file at the hook's name;
    # the next bridge of the session wrote the hook (and its mode) through it.
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    host_file = tmp_path / "host.txt"
    host_file.write_bytes(b"a host file\n")
    os.chmod(host_file, 0o644)
    (runtime / HOOK_NAME).symlink_to(host_file)
    bridge = ApprovalSocket(PermissionService(workspace=tmp_path, yes=True), runtime)
    await bridge.start()
    await bridge.stop()
    assert host_file.read_bytes() == b"a host file\n" and stat.S_IMODE(host_file.stat().st_mode) == 0o644
    assert not bridge.hook.is_symlink() and bridge.hook.is_file()
    assert bridge.hook.read_text() == HOOK_SOURCE and stat.S_IMODE(bridge.hook.stat().st_mode) == 0o700


@run_async
async def test_start_writes_a_rewritten_hook_anew_and_refuses_a_linked_folder(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    (runtime / HOOK_NAME).write_text("print('allow')\n")
    os.chmod(runtime / HOOK_NAME, 0o777)
    bridge = ApprovalSocket(PermissionService(workspace=tmp_path, yes=True), runtime)
    await bridge.start()
    await bridge.stop()
    assert bridge.hook.read_text() == HOOK_SOURCE and stat.S_IMODE(bridge.hook.stat().st_mode) == 0o700
    linked = tmp_path / "linked"
    linked.symlink_to(runtime)
    with pytest.raises(PrivatePathRefused):
        await ApprovalSocket(PermissionService(workspace=tmp_path, yes=True), linked).start()


@run_async
async def test_with_announcements_only_an_announced_call_is_decided(tmp_path: Path) -> None:
    bridge = ApprovalSocket(PermissionService(workspace=tmp_path, yes=True), tmp_path, announced_within=0.5)
    await bridge.start()
    try:
        forged = json.loads(await _ask(bridge.path, _line(tool_name="Bash", tool_input={}, tool_use_id="never")))
        nameless = json.loads(await _ask(bridge.path, _line(tool_name="Bash", tool_input={})))
        bridge.announce("t1")
        announced = json.loads(await _ask(bridge.path, _line(tool_name="Bash", tool_input={}, tool_use_id="t1")))

        async def late() -> None:
            await asyncio.sleep(0.1)
            bridge.announce("t2")  # the stream's line read a moment after the hook asked

        later = asyncio.ensure_future(late())
        raced = json.loads(await _ask(bridge.path, _line(tool_name="Bash", tool_input={}, tool_use_id="t2")))
        await later
    finally:
        await bridge.stop()
    assert forged["decision"] == "deny" and "not a tool call the agent announced" in forged["reason"]
    assert nameless["decision"] == "deny"
    assert announced["decision"] == "allow" and raced["decision"] == "allow"
