"""The escape suite, against real bubblewrap.

Each attempt goes through the agent loop (scripted provider -> tool call) and must come
back as a classified ``sandbox`` or ``permission`` error with the host untouched. Where the
command guard refuses by reading the command, a second attempt built at run time (which
the guard cannot read) goes straight to :meth:`Sandbox.execute` to show that the boundary
itself holds; controls show the same checks do see a success when one is allowed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import InvalidRequest
from seamline.events import Error, Event, ToolResult
from seamline.runner import run
from seamline.sandbox import ResourceLimits, Sandbox, SandboxPolicy
from seamline.testing import scripted
from seamline.tools.workspace import Workspace, workspace_tools
from tests.sandbox.conftest import tree_digest

pytestmark = pytest.mark.real

FAKE_KEY = "sk-ant-SEAMLINE-FAKE-KEY-42"


def attempt(sandbox: Sandbox, ws: Path, name: str, arguments: dict[str, Any]) -> tuple[ToolResult, list[Error]]:
    """One tool call through the loop; its result and the error events it raised."""
    provider = scripted([{"tool_calls": [{"name": name, "arguments": arguments}]}, {"text": "done"}])
    result = asyncio.run(
        run(
            "go",
            provider=provider,
            workspace=ws,
            store=None,
            yes=True,
            tools=workspace_tools(Workspace(ws), sandbox=sandbox),
        )
    )
    events: list[Event] = result.events
    tool_results = [e for e in events if isinstance(e, ToolResult)]
    assert len(tool_results) == 1
    return tool_results[0], [e for e in events if isinstance(e, Error)]


def assert_refused(
    result: ToolResult, errors: list[Error], kinds: tuple[str, ...] = ("sandbox", "permission"), *, leak: str = ""
) -> None:
    assert result.is_error, result.output
    assert errors, f"no classified error event for: {result.output}"
    assert errors[0].kind in kinds, errors[0]
    assert "--yes" not in errors[0].message  # refused by the sandbox, not by approval
    if leak:
        assert leak not in result.output and leak not in errors[0].message


@pytest.fixture
def guarded(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> Iterator[tuple[Sandbox, Path]]:
    before = {k: tree_digest(host[k]) for k in ("home", "outside", "inputs")}
    yield make_sandbox(), host["ws"]
    after = {k: tree_digest(host[k]) for k in ("home", "outside", "inputs")}
    assert after == before, "the host outside the workspace changed"


def test_dotdot_traversal_is_refused(guarded: tuple[Sandbox, Path]) -> None:
    sandbox, ws = guarded
    assert_refused(*attempt(sandbox, ws, "read_file", {"path": "../outside/secret.txt"}), leak="SEAMLINE-OUTSIDE")
    assert_refused(*attempt(sandbox, ws, "write_file", {"path": "../outside/new.txt", "content": "x"}))
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "cat ../outside/secret.txt"}), leak="SEAMLINE-OUTSIDE")
    contained = asyncio.run(sandbox.execute("d=..; cat $d/outside/secret.txt; cat /workspace/$d/outside/secret.txt"))
    assert b"SEAMLINE-OUTSIDE" not in contained.outcome.output
    assert contained.outcome.returncode != 0


def test_absolute_paths_are_refused(guarded: tuple[Sandbox, Path], host: dict[str, Path]) -> None:
    sandbox, ws = guarded
    secret = str(host["outside"] / "secret.txt")
    assert_refused(*attempt(sandbox, ws, "read_file", {"path": secret}), leak="SEAMLINE-OUTSIDE")
    assert_refused(*attempt(sandbox, ws, "write_file", {"path": "/etc/seamline-evil", "content": "x"}))
    assert_refused(*attempt(sandbox, ws, "shell", {"command": f"cat {secret}"}), leak="SEAMLINE-OUTSIDE")
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "echo x > /usr/seamline-evil"}))
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "ls /root /home"}))
    contained = asyncio.run(sandbox.execute(f"p='{secret}'; cat \"$p\"; touch /usr/seamline-evil /seamline-evil"))
    assert b"SEAMLINE-OUTSIDE" not in contained.outcome.output
    assert b"Read-only file system" in contained.outcome.output
    assert not Path("/usr/seamline-evil").exists() and not Path("/seamline-evil").exists()


def test_symlink_pointing_outside_is_refused(guarded: tuple[Sandbox, Path], host: dict[str, Path]) -> None:
    sandbox, ws = guarded
    (ws / "link").symlink_to(host["outside"] / "secret.txt")
    (ws / "dirlink").symlink_to(host["outside"])
    assert_refused(*attempt(sandbox, ws, "read_file", {"path": "link"}), leak="SEAMLINE-OUTSIDE")
    assert_refused(*attempt(sandbox, ws, "write_file", {"path": "dirlink/planted.txt", "content": "x"}))
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "cat link"}), leak="SEAMLINE-OUTSIDE")
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "echo x > dirlink/planted.txt"}))
    # Built at run time, the guard cannot see it; the link's target does not exist inside.
    contained = asyncio.run(sandbox.execute("n=li; cat ${n}nk; echo x > dir${n}nk/planted.txt"))
    assert b"SEAMLINE-OUTSIDE" not in contained.outcome.output
    assert not (host["outside"] / "planted.txt").exists()


@pytest.mark.parametrize("root", ["/proc/self/root", "/proc/1/root"])
def test_proc_root_is_refused(guarded: tuple[Sandbox, Path], host: dict[str, Path], root: str) -> None:
    sandbox, ws = guarded
    target = f"{root}{host['outside']}/secret.txt"
    assert_refused(*attempt(sandbox, ws, "read_file", {"path": target}), leak="SEAMLINE-OUTSIDE")
    assert_refused(*attempt(sandbox, ws, "shell", {"command": f"cat {target}"}), leak="SEAMLINE-OUTSIDE")
    assert_refused(*attempt(sandbox, ws, "shell", {"command": f"ls {root}/"}))
    # Through /proc the sandbox only finds its own root, where the host's files are absent.
    sneaky = target.replace("/root", "/ro''ot")
    contained = asyncio.run(sandbox.execute(f"cat {sneaky}; ls {root.replace('/root', '/ro' + chr(39) * 2 + 'ot')}/"))
    assert b"SEAMLINE-OUTSIDE" not in contained.outcome.output
    assert b"workspace" in contained.outcome.output  # the listing is the sandbox's own root


def test_writing_to_inputs_is_refused(guarded: tuple[Sandbox, Path], host: dict[str, Path]) -> None:
    sandbox, ws = guarded
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "echo x > /inputs/data.csv"}))
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "rm /inputs/data.csv"}))
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "cp hello.txt /inputs/"}))
    ok, _ = attempt(sandbox, ws, "shell", {"command": "cat /inputs/data.csv"})
    assert not ok.is_error and "1,2" in ok.output  # reading inputs is allowed
    contained = asyncio.run(sandbox.execute("d=/inp; echo x > ${d}uts/data.csv; rm -f ${d}uts/data.csv"))
    assert b"Read-only file system" in contained.outcome.output
    assert (host["inputs"] / "data.csv").read_text() == "a,b\n1,2\n"


def test_home_and_ssh_keys_are_refused(
    guarded: tuple[Sandbox, Path], host: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, ws = guarded
    monkeypatch.setenv("HOME", str(host["home"]))
    for command in ("cat ~/.ssh/id_rsa", "cat $HOME/.ssh/id_rsa", f"cat {host['home']}/notes.txt", "ls /root/.ssh"):
        assert_refused(*attempt(sandbox, ws, "shell", {"command": command}), leak="SEAMLINE-FAKE-KEY")
    assert_refused(*attempt(sandbox, ws, "read_file", {"path": "~/.ssh/id_rsa"}), leak="SEAMLINE-FAKE-KEY")
    home = str(host["home"])
    contained = asyncio.run(
        sandbox.execute(f'h=\'{home[:5]}\'; cat "$h{home[5:]}/.s"sh/id_rsa "$h{home[5:]}/notes.txt"; ls -a ~ /')
    )
    out = contained.outcome.output
    assert b"SEAMLINE-FAKE-KEY" not in out and b"SEAMLINE-PRIVATE-NOTES" not in out
    assert b"home" not in out.split(b"\n/:")[-1]  # the sandbox root has no /home and no /root
    assert b"root" not in out.split(b"\n/:")[-1]


def test_provider_api_key_is_never_visible(guarded: tuple[Sandbox, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox, ws = guarded
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "echo $ANTHROPIC_API_KEY"}), leak=FAKE_KEY)
    assert_refused(*attempt(sandbox, ws, "shell", {"command": "cat /proc/self/environ"}), leak=FAKE_KEY)
    listed, _ = attempt(sandbox, ws, "shell", {"command": "env"})
    assert not listed.is_error and "WORKSPACE=/workspace" in listed.output
    assert FAKE_KEY not in listed.output and "API_KEY" not in listed.output
    contained = asyncio.run(sandbox.execute("v=ANTHROPIC_API; eval echo \\$${v}_KEY; cat /proc/*/environ; env"))
    assert FAKE_KEY.encode() not in contained.outcome.output
    with pytest.raises(InvalidRequest, match="credential"):
        SandboxPolicy(env_allow=("ANTHROPIC_API_KEY",))


@pytest.fixture
def local_server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's 127.0.0.1 that records each connection it accepts."""
    seen: list[str] = []
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except (TimeoutError, OSError):
                continue
            seen.append(addr[0])
            conn.sendall(b"HELLO-FROM-HOST\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_host_loopback_is_unreachable_with_network_off(
    guarded: tuple[Sandbox, Path], make_sandbox: Callable[..., Sandbox], local_server: tuple[int, list[str]]
) -> None:
    sandbox, ws = guarded
    port, seen = local_server
    assert_refused(*attempt(sandbox, ws, "shell", {"command": f"curl -s http://127.0.0.1:{port}/"}))
    assert_refused(*attempt(sandbox, ws, "shell", {"command": f"cat < /dev/tcp/127.0.0.1/{port}"}))
    connect = (
        "import socket,sys; s=socket.create_connection(('127.0.0.'+str(1),int(sys.argv[1])),timeout=3); "
        "print(s.recv(64).decode())"
    )
    contained = asyncio.run(sandbox.execute(f'/usr/bin/python3 -c "{connect}" {port}'))
    assert contained.outcome.returncode != 0
    assert b"HELLO-FROM-HOST" not in contained.outcome.output
    assert seen == []
    # Control: with the network allowed by policy, the same connection reaches the server.
    allowed = make_sandbox(network=True)
    reached = asyncio.run(allowed.execute(f'/usr/bin/python3 -c "{connect}" {port}'))
    assert b"HELLO-FROM-HOST" in reached.outcome.output, reached.outcome.output
    assert seen == ["127.0.0.1"]


def test_too_many_processes_are_refused(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> None:
    sandbox = make_sandbox(limits=ResourceLimits(wall_s=20, max_processes=8))
    ws = host["ws"]
    # A bounded count (40), never an unbounded fork bomb.
    result, errors = attempt(sandbox, ws, "shell", {"command": "for i in $(seq 1 40); do sleep 3 & done; wait"})
    assert_refused(result, errors, ("sandbox",))
    assert "more than 8 processes" in errors[0].message
    ok, errs = attempt(sandbox, ws, "shell", {"command": "sleep 0.1 & sleep 0.1 & wait; echo fine"})
    assert not ok.is_error and "fine" in ok.output and errs == []


def test_output_flood_is_capped(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> None:
    sandbox = make_sandbox(limits=ResourceLimits(wall_s=30, output_bytes=100_000))
    # At most 100 MB, stopped at the 100 kB cap.
    result, errors = attempt(sandbox, host["ws"], "shell", {"command": "head -c 100000000 /dev/zero | tr '\\0' y"})
    assert_refused(result, errors, ("sandbox",))
    assert "output cap of 100000 bytes" in errors[0].message
    assert "[output truncated at 100000 bytes]" in result.output
    assert len(result.output) < 20_000
    flood = asyncio.run(sandbox.execute("head -c 100000000 /dev/zero | tr '\\0' y"))
    assert flood.outcome.flooded and len(flood.outcome.output) == 100_000


def _live_commands(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


def test_command_that_never_ends_is_stopped(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> None:
    sandbox = make_sandbox(limits=ResourceLimits(wall_s=1.5))
    marker = "1000.4242"
    result, errors = attempt(sandbox, host["ws"], "shell", {"command": f"sleep {marker} & sleep {marker}"})
    assert_refused(result, errors, ("sandbox",))
    assert "wall-time limit of 1.5s" in errors[0].message
    assert _live_commands(f"sleep\x00{marker}") == []  # nothing it started outlives it


def test_cpu_time_limit_stops_a_busy_loop(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> None:
    sandbox = make_sandbox(limits=ResourceLimits(wall_s=30, cpu_s=1))
    result, errors = attempt(sandbox, host["ws"], "shell", {"command": "while :; do :; done"})
    assert_refused(result, errors, ("sandbox",))
    assert "1s of CPU time" in errors[0].message


def test_a_sandbox_that_cannot_start_is_a_sandbox_error(host: dict[str, Path], tmp_path: Path) -> None:
    from seamline.sandbox.bwrap import BwrapBackend, find_prlimit
    from seamline.sandbox.runtime import Sandbox as RawSandbox

    prlimit = find_prlimit()
    assert prlimit is not None
    broken = RawSandbox(
        backend=BwrapBackend(binary=str(tmp_path / "no-bwrap"), prlimit=prlimit),
        workspace=host["ws"],
        policy=SandboxPolicy(),
        outputs=host["outputs"],
        pids_base=None,
    )
    result, errors = attempt(broken, host["ws"], "shell", {"command": "echo hi"})
    assert_refused(result, errors, ("sandbox",))
    assert "nothing ran" in errors[0].message
