"""`seamline run` with an ACP agent in a terminal shows the edit journal's long scan of the
workspace before the first turn (issue 42 item 5 said nothing showed; issue 44 asks for the
line for ACP agents as for agent CLIs). A scripted ACP agent; the threshold is 0 in the CLI's
process so that a small workspace's scan counts as long."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

from tests.cli.test_journal_scan_line import SEAMLINE_WITH_NO_THRESHOLD, _read_to_end
from tests.providers.agent_cli_support import ROOT
from tests.providers.test_acp_failures import AGENT


def test_a_long_journal_scan_before_an_acp_agents_first_turn_is_a_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for k in range(600):  # more than one look at the clock's worth of paths (256)
        (ws / f"f{k}.txt").write_text(f"{k}\n")
    script = tmp_path / "fake_acp_agent.py"
    script.write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if k != "SEAMLINE_BLOCK_REAL_PROVIDERS"}
    env |= {"PYTHONPATH": str(ROOT / "src"), "SEAMLINE_STORE": str(tmp_path / "store.db")}
    argv = [
        sys.executable, "-c", SEAMLINE_WITH_NO_THRESHOLD, "run", "--provider", "acp",
        "-o", f"command={sys.executable} {script}", "--workspace", str(ws), "Say something",
    ]  # fmt: skip
    main, child = pty.openpty()
    proc = subprocess.Popen(
        argv, stdin=child, stdout=child, stderr=child, env=env, cwd=tmp_path, start_new_session=True
    )
    os.close(child)
    try:
        seen = _read_to_end(main, proc).decode(errors="replace")
        assert proc.wait(timeout=60) == 0, seen
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        os.close(main)
    drawn = [part for part in seen.split("\r") if "scanning the workspace" in part]
    assert drawn and all("scanning the workspace for the edit journal… " in part for part in drawn), seen
    first_scan = seen.index("scanning the workspace")
    assert first_scan < seen.index("partial"), seen  # before the agent's first words
