"""What the envelope tests share: a second local server that must stay unreachable, the
command a model runs to try it, and how to read `seamline run --json` output."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        body = b"SECOND-SERVER-REACHED\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def second_server() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on 127.0.0.1 that is on no allowlist: (port, paths it was asked for)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.hits = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], server.hits  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def reach_command(port: int) -> str:
    """A shell command that tries the second server directly, then through the proxy."""
    return (
        f"curl -sS -m 10 http://127.0.0.1:{port}/direct; echo; "
        f'env -u NO_PROXY -u no_proxy curl -sS -m 10 -x "$HTTP_PROXY" http://127.0.0.1:{port}/proxied'
    )


def json_events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def tool_outputs(events: list[dict[str, Any]]) -> str:
    return "\n".join(str(e["output"]) for e in events if e["type"] == "tool_result")


def refused(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e["payload"]
        for e in events
        if e["type"] == "raw" and e.get("source") == "seamline" and e["payload"].get("egress") == "refused"
    ]
