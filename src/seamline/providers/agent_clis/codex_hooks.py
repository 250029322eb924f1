"""Codex's ``PreToolUse`` hook, given and trusted by seamline, so that every tool call Codex
is about to run (its shell, ``apply_patch``, MCP tools) is decided by seamline's permission
service, as Claude Code's and the Gemini CLI's are.

Codex runs a hook only when it is *trusted* and *enabled*: a ``hooks.state`` entry whose
``trusted_hash`` equals the hash Codex computes over the hook's declaration, and whose
``enabled`` no layer turned off. seamline declares its one hook and its state entry inline
(``-c`` overrides, the session-flags layer) and computes the hash as Codex does: ``sha256:``
and the hex SHA-256 of the compact, key-sorted JSON of ``{"event_name", "matcher", "hooks":
[{"async", "command", "timeout", "type"}]}``. Codex merges ``hooks.state`` field by field
over the user's layers and the session flags, the flags last, so the entry also says
``enabled = true``: a ``[hooks.state."<key>"] enabled = false`` in the user's
``config.toml`` (or the private home's, which the model's shell can write) does not switch
the hook off. It does not use ``--dangerously-bypass-hook-trust``, which would also run a
workspace's own ``.codex`` hooks on the host.

A hook that is not trusted or not enabled is skipped silently, and the call runs. So before
each start of a hooked Codex, seamline asks the Codex program itself (``codex app-server``,
``hooks/list``) with the configuration the run will have: the same ``-c`` flags, the same
environment (its ``CODEX_HOME``), the same workspace, and, in the envelope, inside the
envelope with the private home. When the hook is not listed as trusted and enabled, the
turn fails with the reason and Codex is not started.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from seamline.errors import InvalidRequest
from seamline.events import Event, ToolCall, ToolResult
from seamline.tools.base import ToolClass

__all__ = [
    "CODEX_TOOL_CLASSES",
    "codex_arguments",
    "codex_denied_events",
    "hook_overrides",
    "trust_hash",
    "verify_hook_trust",
]

EVENT: Final = "pre_tool_use"
MATCHER: Final = "*"
STATE_KEY: Final = f"/<session-flags>/config.toml:{EVENT}:0:0"
# Codex's own tools as its PreToolUse hook names them; others (MCP tools) are "execute".
CODEX_TOOL_CLASSES: Final[Mapping[str, ToolClass]] = {"Bash": "execute", "apply_patch": "write"}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$", re.MULTILINE)
_CHECK_TIMEOUT: Final = 30.0
#: seamline's state entry says ``enabled = true`` (a test turns it off to show the check).
FORCE_ENABLED = True


def trust_hash(command: str, timeout: int, *, event: str = EVENT, matcher: str | None = MATCHER) -> str:
    """The ``trusted_hash`` Codex computes for one command hook declared alone in a group."""
    identity: dict[str, Any] = {
        "event_name": event,
        "hooks": [{"async": False, "command": command, "timeout": timeout, "type": "command"}],
    }
    if matcher is not None:
        identity["matcher"] = matcher
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def hook_overrides(command: str, timeout: int) -> list[str]:
    """The ``-c`` values that turn hooks on, declare the one hook before every tool call, and
    trust and enable it."""
    hook = f'{{type="command",command={json.dumps(command)},timeout={timeout}}}'
    entry = f"trusted_hash={json.dumps(trust_hash(command, timeout))}"
    if FORCE_ENABLED:
        entry = f"enabled=true,{entry}"
    state = f"{{{json.dumps(STATE_KEY)}={{{entry}}}}}"
    return [
        "features.hooks=true",
        f"hooks.PreToolUse=[{{matcher={json.dumps(MATCHER)},hooks=[{hook}]}}]",
        f"hooks.state={state}",
    ]


def codex_arguments(tool_name: str, tool_input: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as rules see them. ``apply_patch`` carries its patch as
    ``command``; rules get it as ``patch``, with the files it touches as ``path`` (the
    first) and ``paths``."""
    arguments = dict(tool_input)
    if tool_name == "apply_patch":
        patch = arguments.pop("command", "")
        paths = _PATCH_FILE.findall(patch) if isinstance(patch, str) else []
        arguments["patch"] = patch
        arguments["paths"] = paths
        if paths:
            arguments["path"] = paths[0]
    return arguments


def codex_denied_events(tool_name: str, tool_input: Mapping[str, Any], call_id: str, reason: str) -> list[Event]:
    """What a refused call leaves in the stream: Codex itself prints nothing for a call its
    hook blocked, so the call and its failed result are reported here (named as the
    stream parser names Codex's tools)."""
    if tool_name == "Bash":
        name, arguments = "shell", {"command": tool_input.get("command", "")}
    elif tool_name == "apply_patch":
        name, arguments = "apply_patch", {"patch": tool_input.get("command", "")}
    else:
        name, arguments = tool_name, dict(tool_input)
    return [
        ToolCall(call_id=call_id, name=name, arguments=arguments, source="agent"),
        ToolResult(call_id=call_id, output=f"denied: {reason}", is_error=True, name=name),
    ]


async def verify_hook_trust(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, command: str, version_hint: str
) -> None:
    """Raise :class:`InvalidRequest` unless ``argv`` (``codex app-server`` with the run's own
    ``-c`` flags, maybe wrapped in the envelope), started with the run's environment in its
    workspace ``cwd``, lists seamline's hook (running ``command``) as trusted and enabled."""
    problem = await _ask_codex(argv, env, cwd, command)
    if problem is not None:
        raise InvalidRequest(
            f"codex: seamline's approval hook would not run in this Codex ({problem}), so its tool calls "
            f"could not be approved; Codex was not started. {version_hint}"
        )


async def _ask_codex(argv: Sequence[str], env: Mapping[str, str], cwd: Path, command: str) -> str | None:
    """``None`` when Codex lists seamline's hook as trusted and enabled; else what it said
    instead."""
    proc: asyncio.subprocess.Process | None = None
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            limit=16 * 1024 * 1024,
        )
        return await asyncio.wait_for(_hooks_list(proc, cwd, command), _CHECK_TIMEOUT)
    except TimeoutError:
        return f"`codex app-server` gave no hook list within {_CHECK_TIMEOUT:.0f} s"
    except OSError as exc:
        return f"`codex app-server` could not start: {exc.strerror or exc}"
    finally:
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def _hooks_list(proc: asyncio.subprocess.Process, cwd: Path, command: str) -> str | None:
    assert proc.stdin is not None and proc.stdout is not None
    messages = [
        {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "seamline", "version": "0"}}},
        {"method": "initialized"},
        {"id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
    ]
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    await proc.stdin.drain()
    while True:
        line = await proc.stdout.readline()
        if not line:
            return "`codex app-server` ended without a hook list"
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("id") != 2:
            continue
        if "error" in message:
            return f"`codex app-server` has no hook list: {json.dumps(message['error'])[:200]}"
        return _judge(message.get("result"), command)


def _judge(result: Any, command: str) -> str | None:
    entries = result.get("data") if isinstance(result, dict) else None
    hooks: list[dict[str, Any]] = []
    for entry in entries if isinstance(entries, list) else []:
        listed = entry.get("hooks") if isinstance(entry, dict) else None
        for hook in listed if isinstance(listed, list) else []:
            if isinstance(hook, dict) and hook.get("key") == STATE_KEY:
                hooks.append(hook)
    if not hooks:
        return "it does not list the hook"
    if hooks[0].get("command") != command:
        return "the first hook of its session flags is not seamline's"
    status, enabled = hooks[0].get("trustStatus"), hooks[0].get("enabled")
    if status != "trusted":
        return f"it lists the hook as {status!r}, not trusted"
    if enabled is not True:
        return "it lists the hook as disabled"
    return None
