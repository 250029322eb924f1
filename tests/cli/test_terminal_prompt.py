"""The approval question in a real terminal (tmux): its choices line stays on the screen
while it waits, the key typed is seen, and the spinner neither overwrites it nor claims
the tool runs meanwhile. The spinner used to redraw the line every 0.1 s after half a
second of quiet (`⠸ running shell · 3.1s`), so the user answered blind."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.cli.test_terminal import Terminal, terminal

__all__ = ["terminal"]

CHOICES = "[y]es once, [s]ession, [a]lways, [n]o, [d]eny always: "


def _wait_for(term: Terminal, text: str) -> str:
    for _ in range(600):
        screen = term.screen()
        if text in screen:
            return screen
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never showed:\n{term.screen()}")


def test_the_question_stays_readable_and_the_typed_key_shows(terminal: Terminal, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    script = tmp_path / "script.json"
    call = {"name": "shell", "arguments": {"command": "echo ran > made.txt"}}
    script.write_text(json.dumps([{"tool_calls": [call]}, {"text": "all done"}]))
    terminal.type(f".venv/bin/seamline run -p scripted -o script={script} -w {tmp_path / 'ws'} 'go'")
    _wait_for(terminal, CHOICES)
    # Long past the spinner's half second of quiet, read the screen many times over.
    screens = []
    for _ in range(30):
        time.sleep(0.05)
        screens.append(terminal.screen())
    for screen in screens:
        assert CHOICES.rstrip() in screen, screen
        assert "running shell" not in screen, screen
    terminal.tmux("send-keys", "-t", "tour", "-l", "y")
    time.sleep(1.0)  # a spinner frame would have come ten times by now
    assert CHOICES + "y" in terminal.screen(), terminal.screen()
    terminal.tmux("send-keys", "-t", "tour", "Enter")
    final = terminal.wait_for_prompt(2)
    assert "all done" in final.split("'go'")[-1]
    assert (tmp_path / "ws" / "made.txt").read_text() == "ran\n"
