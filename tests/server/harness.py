"""A seamline server on 127.0.0.1 (a free port) in a thread of the test process, and a
small client for its streams. The thread's uvicorn is stopped and joined before the
test returns."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import uvicorn

from seamline.server import create_app
from seamline.sessions.sqlite_store import SQLiteStore

TOOL_TURN = [
    {
        "text": "Let me write it.",
        "stream": True,
        "tool_calls": [{"id": "call-w", "name": "write_file", "arguments": {"path": "hello.txt", "content": "hi\n"}}],
        "usage": {"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.001},
    },
    {"text": "Wrote hello.txt.", "stream": True, "usage": {"input_tokens": 120, "output_tokens": 5, "cost_usd": 0.002}},
]


@dataclass
class Served:
    base: str
    store: SQLiteStore
    workspace: Path
    app: Any
    server: uvicorn.Server

    def client(self, **kwargs: Any) -> httpx2.Client:
        return httpx2.Client(base_url=self.base, timeout=httpx2.Timeout(20.0), **kwargs)

    def script(self, name: str, responses: list[dict[str, Any]]) -> str:
        path = self.workspace.parent / f"{name}.json"
        path.write_text(json.dumps(responses))
        return str(path)


@contextmanager
def serve(tmp_path: Path, **options: Any) -> Iterator[Served]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    store = SQLiteStore(tmp_path / "store.db")
    app = create_app(store, workspace=str(workspace), cancel_grace=0.2, **options)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    ready = threading.Event()

    def main() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)

        async def go() -> None:
            task = loop.create_task(server.serve(sockets=[sock]))
            while not server.started and not task.done():
                await asyncio.sleep(0.01)
            ready.set()
            await task

        try:
            loop.run_until_complete(go())
        finally:
            ready.set()
            loop.close()

    thread = threading.Thread(target=main, name="seamline-serve", daemon=True)
    thread.start()
    assert ready.wait(20), "the server did not start"
    assert server.started, "the server did not start"
    try:
        yield Served(base=f"http://127.0.0.1:{port}", store=store, workspace=workspace, app=app, server=server)
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()
        store.close()
        assert not thread.is_alive(), "the server thread did not stop"


def sse_frames(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """SSE frames (fields id, event, data) from a line iterator; comments are skipped."""
    frame: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in frame:
                yield frame
            frame = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        frame[name] = frame[name] + "\n" + value if name == "data" and name in frame else value
