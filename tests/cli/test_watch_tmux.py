"""`seamline watch` in a real terminal: tmux runs it on a 200x50 pane over a store with one
recorded run; the screen shows the table with the run's id and status and the keys in the
footer, and `q` ends it, as Ctrl-C does. The tmux server has its own socket and is killed
by it (and its processes by their ids) before the test returns."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("textual")

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed (scripts/system/25-tmux.sh)", allow_module_level=True)


class Tmux:
    """One private tmux server (``-L`` socket) for one test."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"seamline-watch-{uuid.uuid4().hex[:12]}"
        self.env = env
        self.pids: list[int] = []

    def __call__(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            env=self.env, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, done.stderr
        return done.stdout

    def start(self, command: str) -> None:
        self("new-session", "-d", "-x", "200", "-y", "50", command)
        found = self("display-message", "-p", "#{pid} #{pane_pid}").split()
        self.pids = [int(pid) for pid in found]

    def screen(self) -> str:
        return self("capture-pane", "-p", check=False)

    def wait_for(self, done: object, what: str, *, timeout: float = 60.0) -> str:
        end = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if callable(done) and done(shown):
                return shown
            assert time.monotonic() < end, f"timed out waiting for {what}; the screen:\n{shown}"
            time.sleep(0.1)

    def pane_gone(self, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not _alive(self.pids[1]):
                return True
            time.sleep(0.05)
        return False

    def kill(self) -> None:
        self("kill-server", check=False)
        for pid in self.pids:
            end = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < end:
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child of the tmux server that exited but was not reaped yet is gone for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("key", ["q", "C-c"])
def test_the_table_shows_the_run_in_a_real_terminal_and_q_or_ctrl_c_quits(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path, key: str
) -> None:
    store = tmp_path / "store.db"
    done = subprocess.run(
        [*seamline_cmd, "run", "--json", "--store", str(store), "-w", str(tmp_path), "what is here?"],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = str(json.loads(done.stdout.splitlines()[0])["session_id"])[:12]
    command = shlex.join([sys.executable, "-m", "seamline", "watch", "--interval", "0.5", "--store", str(store)])
    tmux = Tmux({**cli_env, "TERM": "xterm-256color"})
    try:
        tmux.start(command)
        # The footer's keys, drawn after the table: the whole screen is up.
        shown = tmux.wait_for(lambda s: run_id in s and "completed" in s and "q quit" in s, "the run in the table")
        assert "RUN" in shown and "STATUS" in shown and "offline" in shown
        assert "what is here?" in shown
        assert "a approve" in shown and "m merge" in shown and "x discard" in shown
        tmux("send-keys", key)
        assert tmux.pane_gone(), f"{key} did not end seamline watch; the screen:\n{tmux.screen()}"
    finally:
        tmux.kill()
    assert not any(_alive(pid) for pid in tmux.pids)


def test_without_textual_the_install_hint_stays_on_the_plain_table(cli_env: dict[str, str], tmp_path: Path) -> None:
    program = (
        "import sys; sys.modules['textual'] = None\n"  # as if the watch extra were not installed
        "from seamline.cli.main import main\n"
        f"sys.exit(main(['watch', '--interval', '0.2', '--store', {str(tmp_path / 'store.db')!r}]))\n"
    )
    tmux = Tmux({**cli_env, "TERM": "xterm-256color"})
    seen: set[str] = set()

    def refreshed(shown: str) -> bool:
        # The header's clock changed (the screen was cleared and drawn again), and this frame
        # is drawn down to its table.
        seen.update(line for line in shown.splitlines() if line.startswith("seamline watch"))
        return len(seen) >= 2 and "no runs in this store yet" in shown

    try:
        tmux.start(shlex.join([sys.executable, "-c", program]))
        shown = tmux.wait_for(refreshed, "the plain table to refresh")
        assert "needs the watch extra" in shown and "[watch]" in shown, shown
        tmux("send-keys", "C-c")
        assert tmux.pane_gone(), f"Ctrl-C did not end the plain table; the screen:\n{tmux.screen()}"
    finally:
        tmux.kill()
    assert not any(_alive(pid) for pid in tmux.pids)
