"""What the tests of the agent CLIs' approval hooks against their settings layers share
(Gemini CLI and Codex, on the host and in the envelope): a service whose only refusal is a
stored deny rule for `touch`, the check that the rule decided, and two turns of one session
kept in a store file."""

from __future__ import annotations

from pathlib import Path

from seamline.events import Event, PermissionDecision, ToolResult
from seamline.providers.agent_clis.base import AgentCliProvider
from seamline.sessions.rules import PermissionRules
from seamline.sessions.sqlite_store import open_store
from seamline.tools.permissions import PermissionService
from tests.providers.agent_cli_support import CliWorld, collect, one_complete


def deny_touch(world: CliWorld, tool: str) -> PermissionService:
    """``--yes`` and a stored rule denying ``tool`` with ``command=touch*``: only the rule can refuse."""
    rules = PermissionRules(":memory:")
    rules.add("deny", tool=tool, pattern="command=touch*")
    return PermissionService(rules=rules, workspace=world.workspace, yes=True)


def assert_denied_by_rule(events: list[Event], marker: Path, *, said_in_result: bool = False) -> None:
    """One decision, the rule's deny; the call failed (its result says why when
    ``said_in_result``), the turn completed, and the marker the call would touch is absent."""
    decisions = [e for e in events if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny"] and "denied by rule" in decisions[0].reason, events
    results = [e for e in events if isinstance(e, ToolResult)]
    assert results and results[0].is_error, events
    if said_in_result:
        assert "denied by rule" in results[0].output, events
    assert one_complete(events).outcome == "completed"
    assert not marker.exists()


def outputs(events: list[Event]) -> str:
    return "\n".join(e.output for e in events if isinstance(e, ToolResult))


async def two_turns(
    provider: AgentCliProvider, world: CliWorld, service: PermissionService, store: Path
) -> tuple[list[Event], list[Event]]:
    """Two turns of one session kept in a store file, as `seamline run` and `seamline run
    --session` keep it (its edit journal beside it)."""
    opened = open_store(store)
    try:
        session = await provider.open(workspace=world.workspace, approval=service, store=opened)
        try:
            return await collect(session, "plant it"), await collect(session, "now touch")
        finally:
            await provider.close(session)
    finally:
        opened.close()
