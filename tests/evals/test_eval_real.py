"""``seamline eval`` on the real Claude Code and Codex (the npm packages in .tools) against
the local fake model servers, under ``--sandbox bwrap``: two tasks whose check needs the
file the agent wrote, each trial in a worktree of its own, each check inside the trial's
sandbox, and nothing left behind (no process, worktree or branch).

Two trials run at once (``--concurrency 2``), in worktrees of the same repository. Claude
Code always writes ``hello``, Codex always ``42`` (the fakes answer each request by what it
holds, whatever order the trials run in): ``greet`` passes only for Claude Code, ``answer``
only for Codex.

The check proves where it runs: inside bubblewrap the trial's worktree is ``/workspace``
and the host's temporary folders are out of sight, so a secret file beside the test is
invisible there (its check exits 9 when it sees it) and a marker it tries to leave there
is never made. Run unsandboxed, every check exits 9 and the verdicts are all wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from seamline.transport.subprocess import group_members
from tests.evals.lab import git_in
from tests.fakes._http import RecordedRequest
from tests.providers.agent_cli_support import ROOT, AgentAnthropic, AgentOpenAI, CliWorld, cli_path, make_world

pytestmark = pytest.mark.real

CLAUDE_WRITES = "hello"
CODEX_WRITES = "42"
CLAUDE, CODEX = "claude-code/claude-sonnet-4-5", "codex/gpt-5.5"  # the variants' labels


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


@pytest.fixture(scope="session")
def bwrap_ready() -> None:
    """Fails (never skips) when real bubblewrap cannot run: the set-up installs it."""
    from seamline.sandbox import probe

    report = probe("bwrap")
    if not report.ok:
        pytest.fail(
            "bubblewrap is missing or cannot isolate here: run `bash scripts/system/20-bubblewrap.sh`\n"
            + report.render()
        )


def _dataset(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repository, two tasks and the host-side secret and marker their checks look at."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git_in(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("a repository for two tasks\n")
    git_in(repo, "add", ".")
    git_in(repo, "commit", "-qm", "init")
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("only the host sees this\n")
    marker = outside / "check-ran-here"

    def check(expected: str) -> str:
        return f'pwd; touch {marker} 2>/dev/null; test ! -e {secret} || exit 9; test "$(cat answer.txt)" = {expected}'

    tasks: list[dict[str, Any]] = [
        {"id": "greet", "repository": "repo", "prompt": "Write hello to answer.txt.", "check": check(CLAUDE_WRITES)},
        {"id": "answer", "repository": "repo", "prompt": "Write 42 to answer.txt.", "check": check(CODEX_WRITES)},
    ]
    for task in tasks:
        task["timeout_s"] = 300
    dataset = tmp_path / "tasks.yaml"
    dataset.write_text(yaml.safe_dump(tasks, sort_keys=False))
    return dataset, secret, marker


def _body(request: RecordedRequest) -> dict[str, Any]:
    raw: object = request.body
    return cast("dict[str, Any]", raw) if isinstance(raw, dict) else {}


class _ClaudeWrites(AgentAnthropic):
    """Claude Code's fake, answering each request by what it holds, not by its order (the
    trials may run at once): a turn's first call writes the file with Bash in the turn's
    own folder (the worktree's path is not known before the trial starts), the call after
    the tool's result ends the turn."""

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        body = _body(request)
        if not body.get("tools") or "output_config" in body:
            return self.fallback  # a title or other side request
        if "'type': 'tool_result'" in str(body["messages"][-1]):
            return {"text": "Done."}
        command = f"printf '{CLAUDE_WRITES}\\n' > answer.txt"
        return {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


class _CodexWrites(AgentOpenAI):
    """Codex's fake, the same way: an ``apply_patch`` that adds the file, then the answer."""

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        if "call_output'" in str(_body(request).get("input")):
            return {"text": "Done."}
        patch = f"*** Begin Patch\n*** Add File: answer.txt\n+{CODEX_WRITES}\n*** End Patch\n"
        return {"custom_tool_calls": [{"name": "apply_patch", "input": patch}]}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def _left_running(tmp_path: Path) -> list[str]:
    """Processes whose command line or environment names a path of this test: a CLI, its
    children (they inherit the test's HOME), bwrap, a check."""
    mine = str(tmp_path).encode()
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if mine in cmdline or mine in environ:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {shown[:200]}")
    return found


def test_claude_code_and_codex_trials_each_run_in_a_worktree_with_the_check_in_bwrap(
    world: CliWorld, tmp_path: Path
) -> None:
    dataset, secret, marker = _dataset(tmp_path)
    store = tmp_path / "store" / "s.db"
    claude, codex = _ClaudeWrites([], fallback={"text": "side"}), _CodexWrites([])
    with claude, codex:
        argv = [
            sys.executable, "-m", "seamline", "eval", str(dataset),
            "-p", "claude-code", "-m", "claude-sonnet-4-5", "-o", f"executable={cli_path('claude')}", "-o", f"base_url={claude.root_url}",
            "-o", "max_retries=0",
            "-p", "codex", "-m", "gpt-5.5", "-o", f"executable={cli_path('codex')}", "-o", f"base_url={codex.base_url}",
            "-o", "max_retries=0", "-o", "turn_timeout=240",
            "--concurrency", "2", "--sandbox", "bwrap", "--yes", "--store", str(store), "--json",
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            out, err = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
        claude_turns, codex_asked = len(claude.turn_requests()), len(codex.model_requests())
    assert proc.returncode == 0, err
    # Nothing the evaluation started is still running.
    assert group_members(proc.pid) == []
    assert _left_running(tmp_path) == []
    data = json.loads(out)
    assert data["status"] == "completed" and data["trials"] == {"planned": 4, "finished": 4}
    repo = tmp_path / "repo"
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md"]  # no agent wrote here
    assert (claude_turns, codex_asked) == (4, 4)  # two model calls a trial, both backends

    records = list((tmp_path / "store" / "evals").glob("*/trials.jsonl"))
    assert len(records) == 1
    trials = {(t["task"], t["variant"]): t for t in map(json.loads, records[0].read_text().splitlines())}
    verdicts = {key: (t["passed"], t["outcome"], t["exit_code"]) for key, t in trials.items()}
    assert verdicts == {
        ("greet", CLAUDE): (True, "completed", 0),
        ("greet", CODEX): (False, "completed", 1),
        ("answer", CLAUDE): (False, "completed", 1),
        ("answer", CODEX): (True, "completed", 0),
    }, {key: (t["outcome"], t["error"], t["check_tail"]) for key, t in trials.items()}
    # Each check ran in the trial's sandbox: its worktree was /workspace, the host's secret
    # beside the test was out of its sight (exit 1, never 9), and its marker never landed.
    assert {t["check_tail"].splitlines()[0] for t in trials.values()} == {"/workspace"}
    assert secret.exists() and not marker.exists()
    # Each trial was a worktree run of its own: its own branch, session and commit, with the
    # file its backend wrote, and none of it in the repository's own checkout.
    assert len({t["branch"] for t in trials.values()}) == 4
    assert all(t["branch"].startswith("seamline/eval-") for t in trials.values())
    assert len({t["session_id"] for t in trials.values()}) == 4
    for (_task, variant), trial in trials.items():
        wrote = CLAUDE_WRITES if variant == CLAUDE else CODEX_WRITES
        assert f"+{wrote}" in trial["diff"] and "answer.txt" in trial["diff"], trial["diff"]
        assert trial["files"] == 1 and trial["ref"]
    # Every worktree and branch is gone; only the refs rescore reads are kept.
    assert _git(repo, "branch", "--list").split() == ["*", "main"]
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    folders = tmp_path / "store" / "worktrees"
    assert not folders.exists() or list(folders.iterdir()) == []
    assert len(_git(repo, "for-each-ref", "--format=%(refname)", "refs/seamline/evals").split()) == 4
