"""Limits of the whole sandbox, against real bubblewrap: memory, the private /tmp, and
unix sockets in the workspace with the network off."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from seamline.errors import SandboxViolation
from seamline.sandbox import ResourceLimits, Sandbox, probe

pytestmark = pytest.mark.real

MIB = 1024 * 1024

# Three children each touch 96 MiB and hold it until all three have it; the parent says
# whether all three got there and then ended well (one killed by the limit shows as -9).
_THREE_CHILDREN = r"""
import os, select, time
r, w = os.pipe()
release_r, release_w = os.pipe()
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        os.close(release_w)
        block = b"\x01" * (96 << 20)
        os.write(w, b"k")
        os.read(release_r, 1)
        os._exit(0)
    kids.append(pid)
os.close(w)
got, codes, deadline = 0, {}, time.monotonic() + 15
while got < 3 and not codes and time.monotonic() < deadline:
    ready, _, _ = select.select([r], [], [], 0.2)
    if ready:
        chunk = os.read(r, 3)
        if not chunk:
            break
        got += len(chunk)
    else:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            codes[pid] = os.waitstatus_to_exitcode(status)
os.close(release_w)
for pid in kids:
    if pid not in codes:
        codes[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
held = got == 3 and all(code == 0 for code in codes.values())
print("all 3 held" if held else f"{got} reported, exits {sorted(codes.values())}", flush=True)
"""


def _memory_is_a_cgroup() -> str | None:
    report = probe("bwrap")
    return None if report.memory_base is not None else report.memory_limit


def test_memory_is_limited_for_the_whole_sandbox(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> None:
    why = _memory_is_a_cgroup()
    if why is not None:
        pytest.skip(f"not on this machine: no memory cgroup here, the limit is per process: {why}")
    script = host["ws"] / "three.py"
    script.write_text(_THREE_CHILDREN)
    # Each child is well under the limit; together they are over it.
    tight = make_sandbox(limits=ResourceLimits(wall_s=30, memory_bytes=200 * MIB))
    done = asyncio.run(tight.execute("/usr/bin/python3 three.py"))
    assert b"all 3 held" not in done.outcome.output, done.outcome.output
    assert done.oom_kills > 0
    with pytest.raises(SandboxViolation, match="memory limit of 200 MiB"):
        asyncio.run(tight.run_shell("/usr/bin/python3 three.py"))
    # Control: with room for all three, the same script reports all three.
    roomy = make_sandbox(limits=ResourceLimits(wall_s=30, memory_bytes=1024 * MIB))
    done = asyncio.run(roomy.execute("/usr/bin/python3 three.py"))
    assert b"all 3 held" in done.outcome.output, done.outcome.output
    assert done.oom_kills == 0


def test_private_tmp_has_a_size(make_sandbox: Callable[..., Sandbox]) -> None:
    if not probe("bwrap").tmp_size:
        pytest.skip(
            "not on this machine: this bubblewrap has no --size (0.8 or later); sandbox check says /tmp is unsized"
        )
    sandbox = make_sandbox(limits=ResourceLimits(wall_s=30, tmp_bytes=8 * MIB))
    done = asyncio.run(sandbox.execute("dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1; stat -c 'size=%s' /tmp/fill"))
    out = done.outcome.output.decode()
    assert "No space left on device" in out, out
    size = int(out.rsplit("size=", 1)[1].split()[0])
    assert size <= 8 * MIB
    # Within the size, /tmp works as before.
    ok = asyncio.run(sandbox.execute("echo fine > /tmp/x && cat /tmp/x"))
    assert ok.outcome.returncode == 0 and b"fine" in ok.outcome.output


@pytest.fixture
def unix_server(host: dict[str, Path]) -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(host["ws"] / "agent.sock"))
    server.listen(4)
    server.setblocking(False)
    yield server
    server.close()


def _pending(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


_CONNECT = (
    "/usr/bin/python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('/workspace/agent.sock'); "
    "print('connected')\""
)


def test_a_unix_socket_in_the_workspace_is_unreachable_with_network_off(
    make_sandbox: Callable[..., Sandbox], unix_server: socket.socket
) -> None:
    sandbox = make_sandbox()
    done = asyncio.run(sandbox.execute(_CONNECT))
    assert b"connected" not in done.outcome.output.replace(b"not connected", b"")
    assert done.outcome.returncode != 0
    assert _pending(unix_server) == 0
    # Pipes and socket pairs inside the sandbox still work.
    pair = asyncio.run(
        sandbox.execute(
            "/usr/bin/python3 -c \"import socket; a,b=socket.socketpair(); a.send(b'ok'); print(b.recv(2))\""
        )
    )
    assert b"b'ok'" in pair.outcome.output, pair.outcome.output
    # Control: with the network allowed, the same connection reaches the server.
    allowed = make_sandbox(network=True)
    reached = asyncio.run(allowed.execute(_CONNECT))
    assert b"connected" in reached.outcome.output, reached.outcome.output
    assert _pending(unix_server) == 1
