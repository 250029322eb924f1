"""An answer's rule names the asked tool literally: a request forged through the approval
socket for a tool named ``*`` (or ``Bash*``), answered "always", must not store a rule that
allows every tool a glob would match. The forger here is what the model's shell can do in
the envelope: connect to the session's approval socket and send the hook's JSON line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from seamline.events import PermissionRequest
from seamline.providers.agent_clis.approvals import ApprovalSocket, agent_tool
from seamline.sessions.rules import PermissionRules
from seamline.tools.permissions import PermissionAnswer, PermissionService, literal_tool_glob
from tests.providers.agent_cli_support import run_async


async def _forge(path: Path, tool_name: str) -> dict[str, str]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(json.dumps({"tool_name": tool_name, "tool_input": {}, "tool_use_id": "forged"}).encode() + b"\n")
    await writer.drain()
    try:
        answer: dict[str, str] = json.loads(await asyncio.wait_for(reader.read(), timeout=30))
        return answer
    finally:
        writer.close()


@pytest.mark.parametrize("forged", ["*", "Bash*", "[A-Z]*", "?ash"])
@pytest.mark.parametrize("scope", ["always", "session"])
@run_async
async def test_an_always_answer_to_a_forged_glob_tool_allows_that_name_only(
    tmp_path: Path, forged: str, scope: str
) -> None:
    rules = PermissionRules(tmp_path / "rules.db")
    asked: list[PermissionRequest] = []

    async def user(request: PermissionRequest) -> PermissionAnswer:
        asked.append(request)
        return PermissionAnswer("allow", scope)  # type: ignore[arg-type]

    service = PermissionService(rules=rules, workspace=tmp_path, prompter=user)
    bridge = ApprovalSocket(service, tmp_path)
    await bridge.start()
    try:
        assert (await _forge(bridge.path, forged))["decision"] == "allow"
    finally:
        await bridge.stop()
    assert [r.tool for r in asked] == [forged]
    # A later service for the same store and workspace (the next run) asks for the shell.
    later = PermissionService(rules=PermissionRules(tmp_path / "rules.db"), workspace=tmp_path)
    later.session_rules = service.session_rules
    effect, reason = later.evaluate(agent_tool("Bash"), {"command": "touch pwned"})
    assert effect == "ask", reason
    # The name asked for is what the answer covers, and only it.
    assert later.evaluate(agent_tool(forged), {})[0] == "allow"


def test_a_literal_glob_matches_its_own_name_and_nothing_else() -> None:
    import fnmatch

    for name in ("*", "Bash", "mcp__srv__*", "a[b]c?", "[", "]"):
        glob = literal_tool_glob(name)
        assert fnmatch.fnmatchcase(name, glob)
        for other in ("Bash", "x", "mcp__srv__tool", "abc?", "a[b]cd", "", "[]"):
            if other != name:
                assert not fnmatch.fnmatchcase(other, glob), (name, other)
