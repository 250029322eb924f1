"""The shell tool without a sandbox streams its output and keeps only a capped head and tail."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.tools import ToolContext, Workspace, workspace_tools
from seamline.tools.shell_output import HeadTail


def shell(ws: Workspace, command: str, timeout: float = 60.0) -> str:
    tool = workspace_tools(ws).get("shell")
    assert tool is not None
    ctx = ToolContext(call_id="c1", session_id="s", turn_id=1, emit=lambda _e: None)
    return asyncio.run(tool.invoke({"command": command, "timeout": timeout}, ctx))


def test_a_flood_of_output_is_capped_with_head_and_tail(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    # 200 MB of output; before, all of it was held in memory (and decoded) at once.
    out = shell(ws, "echo FIRST; head -c 200000000 /dev/zero | tr '\\0' x; echo; echo LAST; exit 4")
    assert out.startswith("exit code 4\nFIRST\n")
    assert out.rstrip().endswith("LAST")
    assert "[output truncated: " in out and "of 200000" in out
    assert len(out) < 70_000


def test_small_output_is_whole(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    assert shell(ws, "printf 'a\\nb\\n'") == "exit code 0\na\nb\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(min_value=2, max_value=500))
def test_head_tail_holds_at_most_the_cap_and_keeps_both_ends(chunks: list[bytes], cap: int) -> None:
    kept = HeadTail(cap)
    for chunk in chunks:
        kept.feed(chunk)
        assert kept.held <= cap
    data = b"".join(chunks)
    assert kept.total == len(data)
    if len(data) <= cap:
        assert bytes(kept.head + kept.tail) == data
    else:
        assert bytes(kept.head) == data[: cap // 2]
        assert bytes(kept.tail) == data[len(data) - (cap - cap // 2) :]


def test_a_flood_does_not_grow_memory(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import asyncio, sys\n"
        "from seamline.tools import ToolContext, Workspace, workspace_tools\n"
        "tool = workspace_tools(Workspace(sys.argv[1])).get('shell')\n"
        "ctx = ToolContext(call_id='c', session_id='s', turn_id=1, emit=lambda e: None)\n"
        "out = asyncio.run(tool.invoke({'command': \"head -c 300000000 /dev/zero | tr '\\\\0' x\"}, ctx))\n"
        "assert 'output truncated' in out\n"
        # VmHWM is this program's own peak: ru_maxrss would carry the forking test
        # process's peak across exec, so it failed whenever pytest had grown big.
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    peak_kib = int(done.stdout.strip())
    assert peak_kib < 150 * 1024, f"peak {peak_kib} KiB for 300 MB of output"
