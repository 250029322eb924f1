"""Codex kept warm: one ``codex app-server`` per session, its thread opened once.

``codex app-server`` speaks JSON-RPC 2.0 on stdio, one message a line (the same framing
:mod:`seamline.providers.agent_clis.codex_hooks` uses to ask it for ``hooks/list``). A new process is
sent ``initialize``, ``initialized`` and the thread request at once: ``thread/start`` for a
new session, ``thread/resume`` (by the stored thread id) when the session has one, or
``thread/fork`` of the parent's; the lines read until the thread's answer are put back for
the first turn's parser (it reports the thread id from them). Each turn is then one
``turn/start`` on that thread and ends with ``turn/completed``; an abort is
``turn/interrupt``, which ends only the turn. Codex's configuration (the model provider,
its sandbox mode, ``approval_policy="never"``, the approval hook) is given as ``-c``
overrides on the process's command line, as for ``codex exec``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from typing import Any, Final

from seamline.errors import ProviderFailure, TimeoutFailure, error_for_kind
from seamline.providers.agent_clis.parsers.codex_app_server import TURN_REQUEST_PREFIX, rpc_error
from seamline.providers.programs.warm_process import WarmProcess

__all__ = ["interrupt_message", "is_turn_end", "open_thread", "turn_message", "watch_turn"]

_THREAD_REQUEST: Final = "seamline-thread"
_TURN_ID_MARK: Final = f'"{TURN_REQUEST_PREFIX}'.encode()
_THREAD_METHODS: Final = {"fresh": "thread/start", "resume": "thread/resume", "fork": "thread/fork"}


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


async def open_thread(warm: WarmProcess, *, mode: str, target: str | None, timeout: float) -> None:
    """The handshake of a new ``codex app-server``: its thread started, resumed or forked.
    The thread id goes into ``warm.carry``; a refusal (a thread Codex does not know) raises
    the classified error, naming Codex's reason."""
    method = _THREAD_METHODS[mode] if target or mode == "fresh" else "thread/start"
    params: dict[str, Any] = {"threadId": target} if method != "thread/start" else {}
    client = {"name": "seamline", "title": "seamline", "version": "0"}
    opening: list[dict[str, Any]] = [
        {"id": "seamline-init", "method": "initialize", "params": {"clientInfo": client}},
        {"method": "initialized"},
        {"id": _THREAD_REQUEST, "method": method, "params": params},
    ]
    if not await warm.proc.write(b"".join(_line(m) for m in opening)):
        raise ProviderFailure("codex: `codex app-server` ended before it took its thread")
    read: list[bytes] = []
    try:
        async with asyncio.timeout(timeout):
            while True:
                line = await warm.next_line()
                if line is None:
                    tail = warm.proc.stderr_tail(20).strip().splitlines()
                    said = f": {tail[-1][:300]}" if tail else ""
                    raise ProviderFailure(f"codex: `codex app-server` ended before it opened its thread{said}")
                read.append(line)
                answer = _decoded(line)
                if answer is None or answer.get("id") != _THREAD_REQUEST:
                    continue
                if "error" in answer:
                    kind, retryable, message = rpc_error(answer["error"])
                    raise error_for_kind(kind, f"codex: {method}: {message}", retryable=retryable)
                thread = answer.get("result", {}).get("thread", {})
                if not isinstance(thread, dict) or not isinstance(thread.get("id"), str):
                    raise ProviderFailure(f"codex: {method} gave no thread id")
                warm.carry["thread_id"] = thread["id"]
                break
        warm.is_terminal = functools.partial(watch_turn, warm)
    except TimeoutError:
        raise TimeoutFailure(f"codex: `codex app-server` did not open its thread within {timeout:g} s") from None
    warm.put_back(read)


def turn_message(prompt: str, thread_id: str) -> bytes:
    """One turn: ``turn/start`` on the thread, the prompt as its one text input."""
    params = {"threadId": thread_id, "input": [{"type": "text", "text": prompt}]}
    return _line({"id": f"{TURN_REQUEST_PREFIX}{uuid.uuid4().hex[:16]}", "method": "turn/start", "params": params})


def interrupt_message(thread_id: str, turn_id: str) -> bytes:
    """``turn/interrupt``: Codex ends the turn (``turn/completed``, status interrupted)."""
    params = {"threadId": thread_id, "turnId": turn_id}
    return _line({"id": f"interrupt-{uuid.uuid4().hex[:16]}", "method": "turn/interrupt", "params": params})


def is_turn_end(line: bytes) -> bool:
    """Whether a line ends the running turn: ``turn/completed``, or an error answer to the
    ``turn/start`` itself."""
    return _turn_line(line)[0]


def watch_turn(warm: WarmProcess, line: bytes) -> bool:
    """The warm process's look at each output line of a turn (its ``is_terminal``): keeps
    the running turn's id in ``warm.carry`` (an interrupt names it), and says whether the
    line ends the turn."""
    ends, turn_id = _turn_line(line)
    if turn_id is not None:
        warm.carry["turn_id"] = turn_id
    if ends:
        warm.carry.pop("turn_id", None)
    return ends


def _turn_line(line: bytes) -> tuple[bool, str | None]:
    # Only a line that names a turn's end or seamline's turn/start is decoded.
    if b"turn/completed" not in line and _TURN_ID_MARK not in line:
        return False, None
    message = _decoded(line)
    if message is None:
        return False, None
    if message.get("method") == "turn/completed":
        return True, None
    if not str(message.get("id", "")).startswith(TURN_REQUEST_PREFIX):
        return False, None
    if "error" in message:
        return True, None
    result = message.get("result")
    turn = result.get("turn") if isinstance(result, dict) else None
    turn_id = turn.get("id") if isinstance(turn, dict) else None
    return False, turn_id if isinstance(turn_id, str) and turn_id else None


def _decoded(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None
