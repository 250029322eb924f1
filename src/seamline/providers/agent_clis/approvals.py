"""The approval bridge for agent CLIs: each tool call the CLI is about to run is decided by
the session's permission service (stored rules, hard denials, ``--yes``, the terminal
prompt, the ACP client, the HTTP permissions route), exactly as seamline's own tools are.

Claude Code runs a ``PreToolUse`` hook before every tool call, whatever its permission
mode or ``--allowedTools`` say. The hook is a small stdlib-only Python program
(:data:`HOOK_SOURCE`) written into the session's runtime folder (never through a link;
the envelope binds that folder read-only); it runs under the system
``python3`` (the CLI may run inside the sandbox, where seamline's environment is not
visible), sends the hook's JSON to :class:`ApprovalSocket` over a unix socket in the same
folder, and prints Claude Code's answer. It fails closed: when seamline cannot be reached
or answers nothing, the hook exits 2, which blocks the call.

The socket speaks one JSON line each way: ``{"tool_name", "tool_input", "tool_use_id"}``
in, ``{"decision": "allow"|"deny", "reason"}`` out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from seamline.errors import InvalidRequest
from seamline.events import Complete, Event, PermissionDecision, ToolCall
from seamline.sandbox.private_files import write_private_file
from seamline.tools.approval import Approval
from seamline.tools.base import Tool, ToolClass
from seamline.tools.permission_bridge import CLAUDE_TOOL_CLASSES

__all__ = [
    "HOOK_SOURCE",
    "ApprovalSocket",
    "agent_tool",
    "claude_hook_settings",
    "gemini_hook_settings",
    "hook_command",
    "decide_agent_call",
    "merge_events",
]

SOCKET_NAME: Final = "approve.sock"
HOOK_NAME: Final = "approve_hook.py"
_MAX_REQUEST: Final = 8 * 1024 * 1024
_PATH_KEYS: Final = ("file_path", "notebook_path", "absolute_path", "dir_path", "path")

HOOK_SOURCE: Final = r"""#!/usr/bin/python3
# seamline's PreToolUse hook: asks seamline whether Claude Code may run a tool call.
# Stdlib only. Fails closed: exit 2 (Claude Code blocks the call) when seamline cannot answer.
import json, socket, sys

def fail(why):
    sys.stderr.write("seamline approval: " + why + "; the tool call is denied\n")
    sys.exit(2)

def main():
    if len(sys.argv) not in (3, 4):
        fail("usage: hook SOCKET TIMEOUT [claude|gemini|codex]")
    dialect = sys.argv[3] if len(sys.argv) == 4 else "claude"
    try:
        hook = json.loads(sys.stdin.buffer.read() or b"{}")
    except ValueError:
        fail("the hook input is not JSON")
    ask = {k: hook.get(k) for k in ("tool_name", "tool_input", "tool_use_id")}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(float(sys.argv[2]))
            sock.connect(sys.argv[1])
            sock.sendall(json.dumps(ask).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        answer = json.loads(data)
    except (OSError, ValueError) as exc:
        fail("cannot reach seamline (" + type(exc).__name__ + ")")
    decision = answer.get("decision") if isinstance(answer, dict) else None
    if decision not in ("allow", "deny"):
        fail("seamline gave no decision")
    reason = str(answer.get("reason") or decision)
    if dialect == "gemini":  # the Gemini CLI's BeforeTool hook
        out = {"decision": decision, "reason": reason}
    elif dialect == "codex":  # Codex's PreToolUse hook: exit 2 blocks, stderr is the reason
        if decision == "deny":
            sys.stderr.write(reason + "\n")
            sys.exit(2)
        return
    else:  # Claude Code's PreToolUse hook
        out = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                      "permissionDecisionReason": reason}}
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()

main()
"""


def _never(**_: Any) -> str:
    raise InvalidRequest("an agent CLI's tool runs in the agent CLI, never here")


def agent_tool(name: str, classes: Mapping[str, ToolClass] = CLAUDE_TOOL_CLASSES) -> Tool:
    """A stand-in :class:`Tool` for an agent's own tool, with its seamline class
    (unknown tools are ``execute``: they ask unless a rule allows them)."""
    return Tool(
        name=name,
        description="",
        parameters={},
        function=_never,
        tool_class=classes.get(name, "execute"),
        source="agent",
    )


ArgumentsView = Callable[[str, Mapping[str, Any]], dict[str, Any]]
"""Turns an agent's tool name and input into the arguments rules see."""
DeniedReport = Callable[[str, Mapping[str, Any], str, str], list[Event]]
"""What to add to the stream for a refused call (name, input, call id, reason)."""


def agent_arguments(tool_input: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments as rules see them: the agent's own, plus ``path`` for a file
    tool that names its file under another key (``file_path``, ``notebook_path``)."""
    arguments = dict(tool_input)
    for key in _PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value and "path" not in arguments:
            arguments["path"] = value
            break
    return arguments


async def decide_agent_call(
    approval: Approval,
    *,
    tool_name: str,
    tool_input: Mapping[str, Any],
    call_id: str | None,
    classes: Mapping[str, ToolClass] = CLAUDE_TOOL_CLASSES,
    arguments: ArgumentsView | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> tuple[bool, str]:
    """Decide one of the agent's tool calls through ``approval``; the permission events it
    produced go to ``on_event``. A call the service cannot judge is denied. ``arguments``
    turns the agent's input into what rules see (default: :func:`agent_arguments`)."""
    tool = agent_tool(tool_name, classes)
    seen = arguments(tool_name, tool_input) if arguments is not None else agent_arguments(tool_input)
    call = ToolCall(call_id=call_id or uuid.uuid4().hex, name=tool_name, arguments=seen, source="agent")
    try:
        decision = await approval.decide(tool, call)
    except Exception as exc:  # noqa: BLE001 - fail closed, and say so in the stream
        reason = f"the permission service failed: {type(exc).__name__}"
        if on_event is not None:
            on_event(PermissionDecision(request_id=f"perm-{call.call_id}", decision="deny", reason=reason))
        return False, reason
    if on_event is not None:
        for event in decision.events:
            on_event(event)
    return decision.allow, decision.reason or ("allowed" if decision.allow else "denied")


class ApprovalSocket:
    """A unix socket in ``folder`` answering the hook with ``approval``'s decisions."""

    def __init__(
        self,
        approval: Approval,
        folder: Path,
        *,
        classes: Mapping[str, ToolClass] = CLAUDE_TOOL_CLASSES,
        arguments: ArgumentsView | None = None,
        on_denied: DeniedReport | None = None,
        announced_within: float | None = None,
    ) -> None:
        self.approval = approval
        #: when set, only a call the CLI announced in its own stream (:meth:`announce`)
        #: within this many seconds of the hook's request is decided; anything else is denied
        self.announced_within = announced_within
        self._announced: dict[str, asyncio.Event] = {}
        self.folder = folder
        self.classes = classes
        self.arguments = arguments
        self.on_denied = on_denied
        self.path = folder / SOCKET_NAME
        self.hook = folder / HOOK_NAME
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self._server: asyncio.base_events.Server | None = None
        # Decisions are taken one at a time, in the order asked, as the loop does.
        self._lock = asyncio.Lock()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._dropped: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        # A new file renamed over the old one: a link planted at the hook's name is replaced,
        # never written through, and a hook rewritten by someone else is written anew.
        write_private_file(self.folder, HOOK_NAME, HOOK_SOURCE, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=_MAX_REQUEST)
        os.chmod(self.path, 0o600)

    def announce(self, call_id: str) -> None:
        """The CLI's stream named the tool call ``call_id`` (its hook may now ask about it)."""
        self._announced.setdefault(call_id, asyncio.Event()).set()

    async def _was_announced(self, call_id: str | None) -> bool:
        if self.announced_within is None:
            return True
        if not call_id:
            return False
        seen = self._announced.setdefault(call_id, asyncio.Event())
        try:
            # The CLI prints the call before it runs the hook, but seamline may not have
            # read that line yet when the hook's request comes in.
            await asyncio.wait_for(seen.wait(), timeout=self.announced_within)
        except TimeoutError:
            self._announced.pop(call_id, None)
            return False
        return True

    def cancel_pending(self) -> None:
        """Cancel the decisions still waiting (a prompt nobody answers): each hook hears its
        connection close and denies, wherever it runs. The socket keeps serving."""
        for task in list(self._handlers):
            self._dropped.add(task)
            task.cancel()

    async def stop(self) -> None:
        server, self._server = self._server, None
        self.cancel_pending()
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    @property
    def running(self) -> bool:
        return self._server is not None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            line = await reader.readline()
            answer = await self._answer(line)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            pass  # the hook hears nothing and denies
        except asyncio.CancelledError:
            if task not in self._dropped:
                raise
            # Dropped on purpose: ends quietly (asyncio logs a handler that ends cancelled).
        finally:
            if task is not None:
                self._handlers.discard(task)
                self._dropped.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, line: bytes) -> dict[str, str]:
        try:
            asked = json.loads(line)
        except ValueError:
            return {"decision": "deny", "reason": "seamline could not read the hook's request"}
        name = asked.get("tool_name") if isinstance(asked, dict) else None
        tool_input = asked.get("tool_input") if isinstance(asked, dict) else None
        call_id = asked.get("tool_use_id") if isinstance(asked, dict) else None
        if not isinstance(name, str) or not name:
            return {"decision": "deny", "reason": "the hook's request names no tool"}
        given = tool_input if isinstance(tool_input, dict) else {}
        if not await self._was_announced(call_id if isinstance(call_id, str) else None):
            # Anything in the envelope can connect here; only the program's own calls count.
            reason = "seamline: not a tool call the agent announced; refused"
            self.events.put_nowait(
                PermissionDecision(request_id=f"perm-{call_id or 'unannounced'}", decision="deny", reason=reason)
            )
            return {"decision": "deny", "reason": reason}
        call = call_id if isinstance(call_id, str) and call_id else uuid.uuid4().hex
        async with self._lock:
            allow, reason = await decide_agent_call(
                self.approval,
                tool_name=name,
                tool_input=given,
                call_id=call,
                classes=self.classes,
                arguments=self.arguments,
                on_event=self.events.put_nowait,
            )
        if not allow and self.on_denied is not None:
            for event in self.on_denied(name, given, call, reason):
                self.events.put_nowait(event)
        return {"decision": "allow" if allow else "deny", "reason": f"seamline: {reason}"}


def hook_command(bridge: ApprovalSocket, *, timeout: float, dialect: str = "claude") -> tuple[str, int]:
    """The command line that runs the hook program for ``dialect`` (``claude``, ``gemini``,
    ``codex``), and the seconds it waits for seamline's answer. The CLI must give it longer
    (past its own hook timeout a CLI may run the call: only the hook's exit 2 is safe)."""
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    wait = max(int(timeout), 1)
    suffix = "" if dialect == "claude" else f" {dialect}"
    return f"{python} {bridge.hook} {bridge.path} {wait}{suffix}", wait


def claude_hook_settings(bridge: ApprovalSocket, *, timeout: float) -> str:
    """The ``--settings`` JSON that runs the hook before every tool call. Hooks are turned
    back on (a user's ``disableAllHooks`` would otherwise switch the approval off)."""
    command, wait = hook_command(bridge, timeout=timeout)
    hook = {"type": "command", "command": command, "timeout": wait + 30}
    return json.dumps({"disableAllHooks": False, "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}})


GEMINI_HOOK_NAME: Final = "seamline-approval"
"""The prefix of the approval hook's name; each start of the Gemini CLI gets a name of its
own (``seamline-approval-<32 hex digits>``), since the CLI merges ``hooksConfig.disabled``
as a union over its settings layers: a name another layer could know would let it switch
the hook off."""


def gemini_hook_settings(
    bridge: ApprovalSocket, *, timeout: float, base: Mapping[str, Any], name: str
) -> dict[str, Any]:
    """System settings for the Gemini CLI (the layer merged last, above the user's and the
    workspace's): ``base`` (the machine's own system settings) with hooks turned on, the
    approval hook, named ``name``, first before every tool call, and never listed as
    disabled."""
    command, wait = hook_command(bridge, timeout=timeout, dialect="gemini")
    settings = dict(base)
    found = settings.get("hooksConfig")
    config: dict[str, Any] = dict(found) if isinstance(found, dict) else {}
    listed = config.get("disabled")
    disabled = [d for d in listed if d != name] if isinstance(listed, list) else []
    settings["hooksConfig"] = {**config, "enabled": True, "disabled": disabled}
    given = settings.get("hooks")
    hooks: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
    ours = {"type": "command", "name": name, "command": command, "timeout": (wait + 30) * 1000}
    before = hooks.get("BeforeTool")
    hooks["BeforeTool"] = [{"matcher": ".*", "hooks": [ours]}, *(before if isinstance(before, list) else [])]
    settings["hooks"] = hooks
    return settings


async def merge_events(inner: AsyncIterator[Event], side: asyncio.Queue[Event]) -> AsyncIterator[Event]:
    """``inner``'s events with ``side``'s put in as they come (the permission events of a
    call the CLI is waiting on arrive while its own stream is silent)."""
    pending: asyncio.Future[Event] | None = None
    getter: asyncio.Future[Event] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(inner.__anext__())
            if getter is None:
                getter = asyncio.ensure_future(side.get())
            await asyncio.wait({pending, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                event = getter.result()
                getter = None
                yield event
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                break
            finally:
                pending = None
            if isinstance(event, Complete):
                # Decisions already taken go before the turn's end, which is always last.
                while not side.empty():
                    yield side.get_nowait()
            yield event
    finally:
        for future in (getter, pending):
            if future is not None and not future.done():
                future.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                    await future
        while not side.empty():
            # Anything decided after the turn's end is dropped: nothing follows a complete.
            side.get_nowait()
        aclose = getattr(inner, "aclose", None)
        if aclose is not None:
            await aclose()
