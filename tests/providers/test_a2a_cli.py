"""``seamline run -p a2a -o url=…`` as a user runs it, against an A2A agent built with the
official SDK: two runs of one session (the second with ``--session``) reach the same
context of the agent; a dead server is one line and a non-zero exit; ``providers check``
reads the card."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.providers.a2a_agent_support import A2AAgentServer, dead_url

ROOT = Path(__file__).resolve().parents[2]


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, SEAMLINE_STORE=str(tmp_path / "store.db"), HOME=str(tmp_path), NO_COLOR="1")
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def seamline(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "seamline", *args]
    env = cli_env(tmp_path)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, check=False)


def events(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_a_second_run_of_the_session_reaches_the_same_agent_context(a2a_server: A2AAgentServer, tmp_path: Path) -> None:
    first = seamline(tmp_path, "run", "-p", "a2a", "-o", f"url={a2a_server.url}", "--json", "the code is 42")
    assert first.returncode == 0, first.stderr
    got = events(first.stdout)
    sid = str(got[0]["session_id"])
    context = a2a_server.log.turns[0][0]
    assert any(e["type"] == "session" and e.get("provider_session_id") == context for e in got)
    second = seamline(tmp_path, "run", "--session", sid, "--json", "and the code?")
    assert second.returncode == 0, second.stderr
    end = events(second.stdout)[-1]
    assert end["type"] == "complete" and end["text"] == "heard: and the code? | before: the code is 42"
    assert a2a_server.log.turns[1][0] == context


def test_a_dead_server_is_one_classified_line_and_a_failing_exit(tmp_path: Path) -> None:
    url = dead_url()
    done = seamline(tmp_path, "run", "-p", "a2a", "-o", f"url={url}", "hi")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "transport" in lines[0] and f"cannot reach {url}" in lines[0]
    assert "Traceback" not in done.stderr


def test_providers_check_reads_the_agent_card(a2a_server: A2AAgentServer, tmp_path: Path) -> None:
    done = seamline(tmp_path, "providers", "check", "a2a", "-o", f"url={a2a_server.url}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scripted-agent" in done.stdout and "(streams)" in done.stdout
    a2a_server.faults["card"] = (200, b"not a card", {})
    bad = seamline(tmp_path, "providers", "check", "a2a", "-o", f"url={a2a_server.url}")
    assert bad.returncode != 0 and "does not parse" in bad.stdout + bad.stderr


def test_ctrl_c_cancels_the_agents_task(a2a_server: A2AAgentServer, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "seamline", "run", "--json", "-p", "a2a", "-o", f"url={a2a_server.url}", "wait here"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path), cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert a2a_server.log.waiting.wait(timeout=60), "the agent never started the task"
        os.kill(proc.pid, signal.SIGINT)  # one Ctrl-C, to the program alone
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 130, err
    end = events(out)[-1]
    assert end["type"] == "complete" and end["outcome"] == "aborted"
    assert a2a_server.log.cancelled == [a2a_server.log.turns[0][1]]  # CancelTask reached the agent
