"""The provider-neutral conversation the loop keeps and each provider converts at its edge."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from seamline.events import ToolCall
from seamline.tools.base import ToolSpec

__all__ = ["Message", "ModelRequest", "Role"]

Role = Literal["system", "user", "assistant", "tool"]


class Message(msgspec.Struct, kw_only=True, gc=False):
    """One message. Assistant messages may carry tool calls; tool messages answer one."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    reasoning: str = ""


class ModelRequest(msgspec.Struct, kw_only=True, gc=False):
    """One model call: what the loop hands to a provider's step hook."""

    messages: list[Message]
    tools: list[ToolSpec]
    model: str | None
    session_id: str
    turn: int
    step: int
    params: dict[str, Any] = msgspec.field(default_factory=dict)
