"""read_file and grep are bounded: size, kind of file, time, text only (issue 13)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline.errors import InvalidRequest, TimeoutFailure
from seamline.tools import ToolContext, Workspace, read_tools, workspace_tools
from seamline.tools.read_tools import MAX_ANSWER_BYTES, MAX_FILE_BYTES


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("one beta\n")
    return Workspace(root)


def call(ws: Workspace, name: str, *, read_timeout: float = 30.0, **arguments: object) -> str:
    tool = workspace_tools(ws, read_timeout=read_timeout).get(name)
    assert tool is not None
    ctx = ToolContext(call_id="c1", session_id="s", turn_id=1, emit=lambda _e: None)
    return asyncio.run(tool.invoke(arguments, ctx))


def test_a_fifo_is_refused_not_waited_on(ws: Workspace) -> None:
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(InvalidRequest, match="FIFO"):
        call(ws, "read_file", path="pipe")
    with pytest.raises(InvalidRequest, match="FIFO"):
        call(ws, "grep", pattern="x", path="pipe")
    with pytest.raises(InvalidRequest, match="FIFO"):
        call(ws, "write_file", path="pipe", content="x")
    assert "skipped: 1 special" in call(ws, "grep", pattern="beta")


def test_a_device_is_refused(ws: Workspace) -> None:
    # A link to /dev/zero is refused as a link; a device node itself needs root to make,
    # so the check is shown through the descriptor path with /dev as the workspace.
    dev = Workspace("/dev")
    with pytest.raises(InvalidRequest, match="device"):
        call(dev, "read_file", path="zero")


def test_a_sparse_giant_is_refused(ws: Workspace) -> None:
    with open(ws.root / "sparse.bin", "wb") as fh:
        fh.truncate(8 * 1024 * 1024 * 1024)  # 8 GB of nothing
    with pytest.raises(InvalidRequest, match=r"over the .* byte limit|sparse"):
        call(ws, "read_file", path="sparse.bin")
    with open(ws.root / "holes.txt", "wb") as fh:
        fh.truncate(MAX_FILE_BYTES // 2)
    with pytest.raises(InvalidRequest, match="sparse"):
        call(ws, "read_file", path="holes.txt")
    assert "skipped: 2 too big" in call(ws, "grep", pattern="beta")


def test_read_file_caps_its_answer_and_says_so(ws: Workspace) -> None:
    (ws.root / "long.txt").write_text(("x" * 999 + "\n") * 500)
    out = call(ws, "read_file", path="long.txt", limit=1000)
    assert len(out.encode()) <= MAX_ANSWER_BYTES + 200
    assert "[output truncated at" in out and "use offset=" in out
    offset = int(out.rsplit("use offset=", 1)[1].rstrip("]"))
    assert call(ws, "read_file", path="long.txt", offset=offset, limit=1).startswith(f"{offset}\t")


def test_binary_files_are_a_classified_error(ws: Workspace) -> None:
    (ws.root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (ws.root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    for name in ("image.png", "latin1.txt"):
        with pytest.raises(InvalidRequest, match="binary file"):
            call(ws, "read_file", path=name)
    with pytest.raises(InvalidRequest, match="binary file"):
        call(ws, "grep", pattern="PNG", path="image.png")
    assert call(ws, "grep", pattern="PNG").startswith("no matches")


def test_grep_caps_long_lines_and_its_answer(ws: Workspace) -> None:
    (ws.root / "wide.txt").write_text(("beta" + "y" * 5000 + "\n") * 400)
    out = call(ws, "grep", pattern="beta", path="wide.txt", max_results=10_000)
    assert len(out.encode()) <= MAX_ANSWER_BYTES + 2000
    assert "[output truncated at" in out or "[more matches" in out


def test_a_catastrophic_pattern_times_out_as_a_classified_error(ws: Workspace) -> None:
    (ws.root / "evil.txt").write_text("a" * 64 + "b\n")
    with pytest.raises(TimeoutFailure, match="grep"):
        call(ws, "grep", pattern="(a|aa)+$", path="evil.txt", read_timeout=0.3)


def _until(check: Callable[[], bool], *, bound_s: float = 30.0) -> bool:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_grep_is_cancellable(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel ends the search itself (its process), not only the awaiting task: the
    pattern would otherwise run for the whole 120 s read timeout. The search process is
    the one grep starts (recorded as it is made), not one found by scanning /proc."""
    (ws.root / "evil.txt").write_text("a" * 64 + "b\n")
    tool = workspace_tools(ws, read_timeout=120).get("grep")
    assert tool is not None
    ctx = ToolContext(call_id="c1", session_id="s", turn_id=1, emit=lambda _e: None)
    started: list[subprocess.Popen[bytes]] = []
    real_popen = read_tools.subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = real_popen(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(read_tools.subprocess, "Popen", recording_popen)

    async def scenario() -> None:
        task = asyncio.ensure_future(tool.invoke({"pattern": "(a|aa)+$", "path": "evil.txt"}, ctx))
        end = time.monotonic() + 60
        while not started and not task.done() and time.monotonic() < end:
            await asyncio.sleep(0.02)  # until the search process is made
        assert started, "grep started no search process"
        await asyncio.sleep(0.3)  # it is searching now
        assert not task.done(), (
            f"the search ended by itself: {task.result() if not task.exception() else task.exception()!r}"
        )
        assert started[0].returncode is None  # still running
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The search thread saw the stop flag and killed (and reaped) the process.
        assert await asyncio.to_thread(_until, lambda: started[0].returncode is not None)

    asyncio.run(scenario())


# Run in a process of its own with its own address-space cap, so that a regression fails
# the test (MemoryError there) instead of growing the test process to many GB.
_ATTACK = """
import asyncio, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from seamline.errors import SeamlineError
from seamline.tools import ToolContext, Workspace, workspace_tools
tool = workspace_tools(Workspace(sys.argv[1]), read_timeout=60).get("grep")
ctx = ToolContext(call_id="c1", session_id="s", turn_id=1, emit=lambda _e: None)
try:
    print("ok", asyncio.run(tool.invoke({"pattern": sys.argv[2], "path": sys.argv[3]}, ctx))[:200])
except SeamlineError as exc:
    print(exc.kind, exc.message)
except BaseException as exc:
    print("unclassified", type(exc).__name__, exc)
"""


@pytest.mark.parametrize(
    ("pattern", "line"),
    [("x{100000000}", "x" * 100), ("(a|aa)*$", "a" * 15_000_000 + "b")],
    ids=["huge-repetition", "15MB-line"],
)
def test_grep_memory_is_bounded(ws: Workspace, pattern: str, line: str) -> None:
    (ws.root / "big.txt").write_text(line + "\n")
    done = subprocess.run(
        [sys.executable, "-c", _ATTACK, str(ws.root), pattern, "big.txt"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(seamline.__file__).parents[1])},
    )
    assert done.stdout.startswith("invalid_request grep ran out of its"), (done.stdout, done.stderr[-2000:])


def test_grep_still_finds_on_long_lines(ws: Workspace) -> None:
    (ws.root / "long.txt").write_text("a" * 2_000_000 + "needle\n")
    assert call(ws, "grep", pattern="needle$", path="long.txt").startswith("long.txt:1:")


def test_a_bad_pattern_is_an_invalid_request(ws: Workspace) -> None:
    with pytest.raises(InvalidRequest, match="bad regular expression"):
        call(ws, "grep", pattern="(")


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_the_read_timeout_is_checked(ws: Workspace, bad: float) -> None:
    with pytest.raises(InvalidRequest, match="read_timeout"):
        workspace_tools(ws, read_timeout=bad)
