"""seamline's permission prompts answered by the ACP client (``session/request_permission``).

:class:`ClientPrompter` is the prompter of the session's
:class:`~seamline.tools.permissions.PermissionService`: rules, hard denials and the
default allowances decide first, and only an ``ask`` reaches the client. The four ACP
option kinds map to seamline's answers: ``allow_once`` → allow once, ``allow_always`` →
allow always (a stored rule), ``reject_once`` → deny once, ``reject_always`` → deny always
(a stored deny rule). A ``cancelled`` outcome, a client that cannot answer, and a turn
being cancelled all deny once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final

from seamline.acp_agent.connection import AgentConnection
from seamline.acp_agent.updates import tool_kind
from seamline.errors import SeamlineError
from seamline.events import PermissionRequest
from seamline.tools.base import Toolset
from seamline.tools.permissions import PermissionAnswer

__all__ = ["OPTIONS", "ClientPrompter", "answer_for"]

OPTIONS: Final[tuple[dict[str, str], ...]] = (
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Always reject", "kind": "reject_always"},
)
_ANSWERS: Final[dict[str, PermissionAnswer]] = {
    "allow_once": PermissionAnswer("allow", "once"),
    "allow_always": PermissionAnswer("allow", "always"),
    "reject_once": PermissionAnswer("deny", "once"),
    "reject_always": PermissionAnswer("deny", "always"),
}
_DENY: Final = PermissionAnswer("deny", "once")


def answer_for(result: Any) -> PermissionAnswer:
    """The client's ``RequestPermissionResponse`` as a seamline answer."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
        return _DENY
    return _ANSWERS.get(str(outcome.get("optionId")), _DENY)


@dataclass(eq=False)
class ClientPrompter:
    """Asks the client of one session; :meth:`cancel_all` denies what is still open."""

    connection: AgentConnection
    session_id: str
    tools: Toolset | None = None
    _open: set[asyncio.Task[Any]] = field(default_factory=set)

    async def __call__(self, request: PermissionRequest) -> PermissionAnswer:
        tool = self.tools.get(request.tool) if self.tools is not None else None
        params = {
            "sessionId": self.session_id,
            "toolCall": {
                "toolCallId": request.call_id or request.request_id,
                "title": request.tool,
                "kind": tool_kind(tool.tool_class if tool is not None else None),
                "status": "pending",
                "rawInput": request.arguments,
            },
            "options": list(OPTIONS),
            "_meta": {"seamline": {"reason": request.reason}},
        }
        task = asyncio.ensure_future(self.connection.request("session/request_permission", params))
        self._open.add(task)
        try:
            return answer_for(await task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the turn itself is being cancelled
            return _DENY  # the question was withdrawn (session/cancel)
        except SeamlineError:
            return _DENY  # the client answered with an error, or has gone
        finally:
            self._open.discard(task)

    def cancel_all(self) -> None:
        """Withdraw every open question (the turn is being cancelled): each is denied."""
        for task in list(self._open):
            task.cancel()
