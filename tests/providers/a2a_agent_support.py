"""An A2A agent built with the official SDK (a2a-sdk 1.3.0), for the ``a2a`` provider's tests.

:class:`ScriptedA2AAgent` is an ``AgentExecutor`` that remembers what each context was
told and answers by the prompt's first word:

- ``wait``: starts work, streams one chunk, then waits until the task is cancelled;
- ``fail``: the task fails with the agent's words; ``reject``: it is rejected; ``login``: it
  needs authentication;
- ``ask``: the task asks for input; the answer to it (``colour: ANSWER``) completes the same task;
- ``hello``: answers with a message, no task;
- anything else: streams an artifact in three chunks, ``heard: PROMPT | before: EARLIER``
  where EARLIER is what this context was told in earlier turns (``-`` for none).

:class:`A2AAgentServer` serves it with the SDK's own routes (agent card and JSON-RPC) under
uvicorn on 127.0.0.1 in a thread, and can be told to misbehave (:attr:`faults`).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send


@dataclass
class AgentLog:
    """What the agent saw, written from the server's thread."""

    turns: list[tuple[str, str, str]] = field(default_factory=list)  # (context id, task id, text)
    memory: dict[str, list[str]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    cancel_seen: threading.Event = field(default_factory=threading.Event)
    waiting: threading.Event = field(default_factory=threading.Event)
    headers: list[dict[str, str]] = field(default_factory=list)


class ScriptedA2AAgent(AgentExecutor):
    def __init__(self, log: AgentLog) -> None:
        self.log = log

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = context.get_user_input()
        word = text.split(" ", 1)[0]
        if word == "hello" and context.current_task is None:
            self.log.turns.append((context.context_id or "", "", text))
            reply = new_text_message(f"hello to you, {text}", context_id=context.context_id)
            await event_queue.enqueue_event(reply)
            return
        task = context.current_task
        answering = task is not None  # the answer to this task's question (``ask``)
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        self.log.turns.append((task.context_id, task.id, text))
        before = list(self.log.memory.get(task.context_id, []))
        self.log.memory.setdefault(task.context_id, []).append(text)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if word == "wait":
            await updater.add_artifact([Part(text="working")], artifact_id="w", name="progress")
            self.log.waiting.set()
            await asyncio.Event().wait()  # until CancelTask cancels this
        if word == "fail":
            await updater.failed(new_text_message("the tool broke", context_id=task.context_id, task_id=task.id))
            return
        if word == "reject":
            await updater.reject(new_text_message("not my kind of task", context_id=task.context_id, task_id=task.id))
            return
        if word == "login":
            await updater.requires_auth(new_text_message("sign in first", context_id=task.context_id, task_id=task.id))
            return
        if word == "ask":
            question = new_text_message("which colour?", context_id=task.context_id, task_id=task.id)
            await updater.requires_input(question)
            return
        answer = f"colour: {text}" if answering else f"heard: {text} | before: {', '.join(before) or '-'}"
        third = len(answer) // 3
        chunks = [answer[:third], answer[third : 2 * third], answer[2 * third :]]
        for i, chunk in enumerate(chunks):
            await updater.add_artifact(
                [Part(text=chunk)], artifact_id="answer", name="answer", append=i > 0, last_chunk=i == len(chunks) - 1
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        self.log.cancelled.append(task_id)
        self.log.cancel_seen.set()
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        await updater.cancel()


class _Faults:
    """Misbehaviour of the server, set by a test: answer the card or the JSON-RPC endpoint
    with this status and body instead of the SDK's."""

    def __init__(self, app: ASGIApp, server: A2AAgentServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            self.server.log.headers.append({k.lower(): v for k, v in request.headers.items()})
            path = scope["path"]
            fault = self.server.faults.get("card" if path.startswith("/.well-known/") else "rpc")
            if fault is not None:
                status, body, headers = fault
                await Response(body, status_code=status, headers=headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class A2AAgentServer:
    """The scripted agent on 127.0.0.1, on a port of its own, until :meth:`stop`."""

    def __init__(self, *, streaming: bool = True) -> None:
        self.log = AgentLog()
        self.faults: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        card = AgentCard(
            name="scripted-agent",
            description="answers from a script, remembers each context",
            version="1.0.0",
            supported_interfaces=[
                AgentInterface(url=self.url + "/", protocol_binding="JSONRPC", protocol_version="1.0")
            ],
            capabilities=AgentCapabilities(streaming=streaming),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["test"])],
        )
        handler = DefaultRequestHandler(
            agent_executor=ScriptedA2AAgent(self.log), task_store=InMemoryTaskStore(), agent_card=card
        )
        app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
        config = uvicorn.Config(_Faults(app, self), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self) -> A2AAgentServer:
        self._thread.start()
        started = threading.Event()

        def poll() -> None:
            while not self._server.started and self._thread.is_alive():
                started.wait(0.01)

        poll()
        if not self._server.started:
            raise RuntimeError("the A2A test server did not start")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()
        assert not self._thread.is_alive(), "the A2A test server did not stop"


@contextmanager
def a2a_agent(*, streaming: bool = True) -> Iterator[A2AAgentServer]:
    server = A2AAgentServer(streaming=streaming).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def a2a_real_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``a2a`` provider may run: the agents it reaches here are on 127.0.0.1."""
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)


@pytest.fixture
def a2a_server(a2a_real_allowed: None) -> Iterator[A2AAgentServer]:
    """A streaming scripted agent for one test."""
    with a2a_agent() as server:
        yield server


def dead_url() -> str:
    """A URL of 127.0.0.1 where nothing listens (a port that was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    return f"http://127.0.0.1:{port}"


def texts(events: list[Any]) -> list[str]:
    return [e.text for e in events if getattr(e, "type", "") == "text"]
