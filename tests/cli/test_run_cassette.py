"""``seamline run --record FILE`` and ``--replay FILE`` as a user runs them (a real
subprocess, the real Claude Code, the fake Anthropic API on 127.0.0.1, with ``--sandbox
bwrap`` and without): the replay, with the API stopped and no key, prints the same events
and leaves the same files; a changed prompt exits 1 with the first differing field named;
bad cassettes and flags are one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from seamline.sandbox import probe
from tests.providers.agent_cli_support import AgentAnthropic, cli_path

MODEL = "claude-sonnet-4-5"
CANARY = "sk-ant-canary-R3c0rD"
ONE = {"input_tokens": 900, "output_tokens": 40, "cache_read_tokens": 0, "cache_write_tokens": 0}
SCRIPT = [
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo taped > taped.txt"}}], "usage": ONE},
    {"text": "Taped.", "usage": ONE},
]
_SCRUB = (
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "CLAUDECODE",
)


def env_in(folder: Path, *, key: bool) -> tuple[dict[str, str], Path]:
    """A home and a workspace of their own under ``folder``, and the environment for them."""
    home, workspace = folder / "home", folder / "ws"
    home.mkdir(parents=True)
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and k != "SEAMLINE_BLOCK_REAL_PROVIDERS"}
    env |= {"HOME": str(home), "DISABLE_AUTOUPDATER": "1", "NO_COLOR": "1"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    if key:
        env["ANTHROPIC_API_KEY"] = CANARY
    return env, workspace


def seamline(
    seamline_cmd: list[str], env: dict[str, str], workspace: Path, base_url: str, prompt: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    options = [f"executable={cli_path('claude')}", f"base_url={base_url}", "max_retries=0", "warm=false"]
    args = ["run", "--json", "--no-store", "--yes", "-p", "claude-code", "-m", MODEL, "-w", str(workspace)]
    for option in options:
        args += ["-o", option]
    return subprocess.run([*seamline_cmd, *args, *flags, prompt], env=env, capture_output=True, text=True, timeout=240)


def shape(stdout: str) -> list[tuple[Any, ...]]:
    """The events without ids, times, usage order (side requests answer when they do) or
    the envelope's notes."""
    seen: list[tuple[Any, ...]] = []
    usage: list[tuple[Any, ...]] = []
    for event in map(json.loads, stdout.splitlines()):
        kind = event["type"]
        if kind == "usage":
            usage.append((event["input_tokens"], event["output_tokens"]))
        elif kind in ("text_delta", "text"):
            seen.append((kind, event["text"]))
        elif kind == "tool_call":
            seen.append((kind, event["name"], event["arguments"]))
        elif kind == "tool_result":
            seen.append((kind, event["output"]))
        elif kind == "complete":
            seen.append((kind, event["outcome"], event["text"]))
        elif kind != "raw":
            seen.append((kind,))
    return [*seen, *sorted(usage)]


@pytest.mark.real
@pytest.mark.parametrize("sandbox", [(), ("--sandbox", "bwrap")], ids=["no-sandbox", "in-the-envelope"])
def test_run_record_then_replay_with_the_api_stopped(
    seamline_cmd: list[str], tmp_path: Path, sandbox: tuple[str, ...]
) -> None:
    if sandbox and not (report := probe("bwrap")).ok:
        pytest.fail(f"bubblewrap cannot isolate here (bash scripts/system/20-bubblewrap.sh)\n{report.render()}")
    tape = tmp_path / "taped.jsonl"
    env, workspace = env_in(tmp_path / "recorded", key=True)
    with AgentAnthropic(SCRIPT, fallback={"text": "side", "usage": ONE}) as fake:
        recorded = seamline(seamline_cmd, env, workspace, fake.root_url, "Tape it.", *sandbox, "--record", str(tape))
        gone = fake.root_url
    assert recorded.returncode == 0, recorded.stderr
    assert (workspace / "taped.txt").read_text() == "taped\n"
    assert CANARY not in tape.read_text()

    env, again = env_in(tmp_path / "replayed", key=False)
    replayed = seamline(seamline_cmd, env, again, gone, "Tape it.", *sandbox, "--replay", str(tape))
    assert replayed.returncode == 0, replayed.stderr
    assert shape(replayed.stdout) == shape(recorded.stdout)
    assert (again / "taped.txt").read_text() == "taped\n"

    changed = seamline(seamline_cmd, env, again, gone, "Tape it twice.", *sandbox, "--replay", str(tape))
    assert changed.returncode == 1, changed.stderr
    events = [json.loads(line) for line in changed.stdout.splitlines()]
    said = [e["message"] for e in events if e["type"] == "error" and e["message"].startswith("cassette: request ")]
    assert len(said) == 1 and " differs at messages[0].content[" in said[0] and str(tape) in said[0], said
    assert events[-1]["outcome"] == "failed" and events[-1]["stop_reason"] == "invalid_request"


def test_bad_cassettes_and_flags_are_one_line_and_exit_2(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text('{"seamline_cassette": 1}\n{"request": \n')
    old = tmp_path / "old.jsonl"
    old.write_text('{"seamline_cassette": 0}\n')
    claude = ["-p", "claude-code", "-o", "executable=/bin/true"]
    env = {**cli_env, "ANTHROPIC_API_KEY": "sk-ant-unused"}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    cases = [
        ([*claude, "--replay", str(tmp_path / "none.jsonl")], f"cassette {tmp_path / 'none.jsonl'}: no such file"),
        ([*claude, "--replay", str(corrupt)], f"cassette {corrupt}, line 2: not JSON"),
        ([*claude, "--replay", str(old)], f"cassette {old}, line 1: not a seamline cassette of version 1"),
        (["--record", str(tmp_path / "t.jsonl")], "offline's model requests do not pass seamline's gateway"),
        ([*claude, "--record", "a", "--replay", "b"], "give --record or --replay, not both"),
        ([*claude, "--replay", str(old), "--session", "abc"], "--replay does not go with --session"),
    ]
    for args, message in cases:
        done = subprocess.run([*seamline_cmd, "run", *args, "x"], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("seamline: ") and message in lines[0], (args, done.stderr)
