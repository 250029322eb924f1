"""Approval: whether a tool call may run.

Every entry point (``seamline run``, ``run --session``, ``sessions resume`` and ``fork``,
pipelines, :func:`seamline.run_sync`, the loop itself) defaults to
:class:`seamline.tools.permissions.PermissionService`: hard denials, the store's rules,
then ``--yes`` or a prompt. :class:`YesApproval` is a bare gate for tests of a provider's
own plumbing; nothing uses it by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from seamline.events import Event, ToolCall
from seamline.tools.base import Tool, tool_article

__all__ = ["Approval", "ApprovalDecision", "YesApproval"]


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """Whether a call may run. ``events`` are the permission events the gate produced
    (``permission_request``, ``permission_decision``); the loop reports them before the
    call's result, and adds a ``permission_decision`` of its own only when there are none."""

    allow: bool
    reason: str = ""
    scope: Literal["once", "session", "always"] = "once"
    events: tuple[Event, ...] = field(default=())


class Approval(Protocol):
    """Decides whether a tool call may run; see :class:`seamline.tools.permissions.PermissionService`."""

    async def decide(self, tool: Tool, call: ToolCall) -> ApprovalDecision: ...


@dataclass(frozen=True, slots=True)
class YesApproval:
    """Reading tools are allowed; the rest only with ``yes=True``. No hard denials and no
    rules: for tests only; use :func:`seamline.sessions.rules.permission_service`."""

    yes: bool = False

    async def decide(self, tool: Tool, call: ToolCall) -> ApprovalDecision:
        if tool.tool_class == "read" or self.yes:
            return ApprovalDecision(True, "allowed" if tool.tool_class == "read" else "allowed by --yes")
        return ApprovalDecision(False, f"{tool.name} is {tool_article(tool.tool_class)} tool; pass --yes to allow it")
