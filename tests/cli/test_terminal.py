"""The tour typed into a real terminal (tmux): what a newcomer sees. The session id is
printed at the end of a run, a spinner shows the elapsed time while the model is slow, and
no command prints a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOUR = [
    '.venv/bin/seamline run --workspace docs "What does the store keep?"',
    '.venv/bin/seamline run --json --workspace docs "What does the store keep?"',
    ".venv/bin/seamline providers list --options",
    ".venv/bin/seamline providers check",
    ".venv/bin/seamline sessions list",
]


class Terminal:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30, check=True
        )
        return done.stdout

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "tour", "-l", line)
        self.tmux("send-keys", "-t", "tour", "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-2000", "-t", "tour")

    def wait_for_prompt(self, count: int, *, seen: list[str] | None = None) -> str:
        """Wait until the shell has shown its prompt ``count`` times (each command's end)."""
        for _ in range(1200):
            screen = self.screen()
            if seen is not None:
                seen.append(screen)
            if screen.count("TOUR$ ") >= count:
                return screen
            time.sleep(0.05)
        raise AssertionError(f"the terminal never came back:\n{self.screen()}")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed; run: bash scripts/setup --dev")
    socket = f"seamline-test-{os.getpid()}-{tmp_path.name}"
    term = Terminal(socket)
    env = {"SEAMLINE_STORE": str(tmp_path / "store.db"), "PS1": "TOUR$ ", "TERM": "xterm-256color"}
    env_args = [item for k, v in env.items() for item in ("-e", f"{k}={v}")]
    term.tmux(
        "new-session", "-d", "-s", "tour", "-x", "220", "-y", "60", "-c", str(ROOT), *env_args,
        "bash", "--norc", "--noprofile",
    )  # fmt: skip
    pid = int(term.tmux("display-message", "-p", "-t", "tour", "#{pid}").strip())
    try:
        term.wait_for_prompt(1)
        yield term
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=30, check=False)
        try:
            os.kill(pid, 9)  # the shell, should the server have left it
        except ProcessLookupError:
            pass


def test_the_tour_in_a_real_terminal(terminal: Terminal, tmp_path: Path) -> None:
    for n, line in enumerate(TOUR, start=2):
        terminal.type(line)
        terminal.wait_for_prompt(n)
    screen = terminal.screen()
    assert not _troubles(screen)
    session = re.search(r"\[completed: [^\]]* · session ([0-9a-f]{32})\]", screen)
    assert session, screen  # the text run ends with its session id
    assert session.group(1)[:12] in screen.split(TOUR[4])[-1]  # and `sessions list` shows it

    # A model that takes its time: the spinner shows the elapsed time, then goes. It shows
    # after 0.5 s of quiet, so for the last 1.5 s of the delay, while the screen is read every 50 ms.
    script = tmp_path / "slow.json"
    script.write_text(json.dumps([{"delay": 2, "text": "done at last"}]))
    terminal.type(f".venv/bin/seamline run -p scripted -o script={script} 'take your time'")
    screens: list[str] = []
    final = terminal.wait_for_prompt(len(TOUR) + 2, seen=screens)
    assert any(re.search(r"waiting on the model · \d+\.\ds", s) for s in screens)
    last_run = final.split("take your time'")[-1]
    assert "done at last" in last_run
    # A pipeline shows each role's turn, its tool calls and its tokens as they happen.
    terminal.type('.venv/bin/seamline run --pipeline answer-review --workspace docs "How do I add a provider?"')
    final = terminal.wait_for_prompt(len(TOUR) + 3)
    pipeline = final.split("--pipeline answer-review")[-1]
    assert re.search(r"▸ turn on offline extractive", pipeline)
    assert "→ read_file" in pipeline and re.search(r"\[completed · \d+ in / \d+ out tokens", pipeline)
    assert "→ write -> review" in pipeline
    assert "done at last" in last_run and "waiting on the model" not in last_run  # cleared when the answer came
    assert not _troubles(final)


def _troubles(screen: str) -> list[str]:
    """Lines a broken command prints (the --json lines quote the docs, which name them)."""
    return [
        line
        for line in screen.splitlines()
        if line.startswith(("Traceback (most recent call last)", "seamline: internal error"))
    ]
