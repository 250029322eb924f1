"""read_file and grep are bounded: size, kind of file, time, text only (issue 13)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest, TimeoutFailure
from seamline.tools import ToolContext, Workspace, workspace_tools
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


def test_grep_is_cancellable(ws: Workspace) -> None:
    (ws.root / "evil.txt").write_text("a" * 64 + "b\n")
    tool = workspace_tools(ws, read_timeout=60).get("grep")
    assert tool is not None
    ctx = ToolContext(call_id="c1", session_id="s", turn_id=1, emit=lambda _e: None)

    async def scenario() -> None:
        task = asyncio.ensure_future(tool.invoke({"pattern": "(a|aa)+$", "path": "evil.txt"}, ctx))
        await asyncio.sleep(0)  # let it start
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_a_bad_pattern_is_an_invalid_request(ws: Workspace) -> None:
    with pytest.raises(InvalidRequest, match="bad regular expression"):
        call(ws, "grep", pattern="(")


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_the_read_timeout_is_checked(ws: Workspace, bad: float) -> None:
    with pytest.raises(InvalidRequest, match="read_timeout"):
        workspace_tools(ws, read_timeout=bad)
