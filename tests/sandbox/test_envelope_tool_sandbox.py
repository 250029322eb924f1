"""`network.allow` in seamline's own tool sandbox (real bubblewrap): the command reaches an
allowed host only through the egress proxy, anything else is refused and reported, and the
unix-socket filter still holds for the command (the bridge alone keeps its socket)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from seamline.sandbox import ResourceLimits, SandboxPolicy, open_sandbox
from tests.sandbox.envelope_support import second_server

pytestmark = pytest.mark.real


def _sandbox(host: dict[str, Path], allow: list[str]) -> object:
    policy = SandboxPolicy(network_allow=tuple(allow), limits=ResourceLimits(wall_s=20))
    return open_sandbox("bwrap", workspace=host["ws"], outputs=host["outputs"], policy=policy)


def test_allowed_host_through_the_proxy_others_refused_direct_fails(bwrap_ready: None, host: dict[str, Path]) -> None:
    with second_server() as (allowed, hits), second_server() as (other, other_hits):
        sandbox = _sandbox(host, [f"127.0.0.1:{allowed}"])
        command = (
            f'env -u NO_PROXY -u no_proxy curl -sS -m 10 -x "$HTTP_PROXY" http://127.0.0.1:{allowed}/ok; '
            f'env -u NO_PROXY -u no_proxy curl -sS -m 10 -x "$HTTP_PROXY" http://127.0.0.1:{other}/no; '
            f"curl -sS -m 10 http://127.0.0.1:{other}/direct"
        )
        output = asyncio.run(sandbox.run_shell(command))  # type: ignore[attr-defined]
    assert hits == ["/ok"] and other_hits == []
    assert "SECOND-SERVER-REACHED" in output and "not on the sandbox's allowlist" in output
    assert "Failed to connect" in output
    assert f"refused 1 connection(s) to 127.0.0.1:{other}" in output
    assert [(r.host, r.port) for r in sandbox.egress_refused] == [("127.0.0.1", other)]  # type: ignore[attr-defined]


def test_the_command_still_cannot_open_a_unix_socket(bwrap_ready: None, host: dict[str, Path], tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = host["ws"] / "agent.sock"
    listener.bind(str(path))
    listener.listen(1)
    try:
        sandbox = _sandbox(host, ["example.org"])
        probe = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('agent.sock'); print('CONNECTED')"
        output = asyncio.run(sandbox.run_shell(f'/usr/bin/python3 -c "{probe}"'))  # type: ignore[attr-defined]
    finally:
        listener.close()
    assert "CONNECTED" not in output and "Address family not supported" in output
