"""Permissions: allow, deny, ask with each scope, --yes, hard denials under --yes, durable rules."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seamline.errors import InvalidRequest, StorageFailure
from seamline.events import Error, PermissionDecision, PermissionRequest, ToolResult
from seamline.runner import RunResult, run
from seamline.sessions.rules import PermissionRules
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from seamline.tools import Toolset, tool
from seamline.tools.permissions import (
    PermissionAnswer,
    PermissionService,
    TerminalPrompter,
    recursive_delete_outside_workspace,
)

RAN: list[str] = []


@tool(tool_class="write")
def save(path: str) -> str:
    """Save a file."""
    RAN.append(path)
    return f"saved {path}"


@tool
def look(path: str) -> str:
    """Look at a file."""
    RAN.append(path)
    return f"looked at {path}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


class Answers:
    """A prompter that answers from a list and counts the questions."""

    def __init__(self, *answers: PermissionAnswer) -> None:
        self.answers = list(answers)
        self.asked: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest) -> PermissionAnswer:
        self.asked.append(request)
        return self.answers.pop(0)


def _turn(service: PermissionService, tmp_path: Path, *calls: tuple[str, str]) -> RunResult:
    script = [
        {"tool_calls": [{"name": name, "arguments": {"path": path}} for name, path in calls]},
        {"text": "done"},
    ]
    return asyncio.run(
        run("go", provider=scripted(script), workspace=tmp_path, tools=Toolset([save, look]), approval=service)
    )


def _results(result: RunResult) -> list[tuple[bool, str]]:
    return [(e.is_error, e.output) for e in result.events if isinstance(e, ToolResult)]


def test_no_rule_reads_run_and_writes_ask(tmp_path: Path) -> None:
    result = _turn(PermissionService(workspace=tmp_path), tmp_path, ("look", "a"), ("save", "b"))
    assert RAN == ["a"]
    (look_err, look_out), (err, denied) = _results(result)
    assert not look_err and look_out == "looked at a"
    assert err and "save is a write tool and needs approval: pass --yes" in denied
    request = next(e for e in result.events if isinstance(e, PermissionRequest))
    decision = next(e for e in result.events if isinstance(e, PermissionDecision))
    assert request.tool == "save" and request.arguments == {"path": "b"}
    assert decision.request_id == request.request_id and decision.decision == "deny"


def test_allow_rule(tmp_path: Path) -> None:
    rules = PermissionRules(tmp_path / "store.db")
    rules.add("allow", tool="save")
    result = _turn(PermissionService(rules=rules, workspace=tmp_path), tmp_path, ("save", "a"))
    assert RAN == ["a"] and _results(result) == [(False, "saved a")]
    assert not any(isinstance(e, PermissionRequest | PermissionDecision) for e in result.events)


def test_deny_rule_holds_even_with_yes(tmp_path: Path) -> None:
    rules = PermissionRules(tmp_path / "store.db")
    rule = rules.add("deny", tool_class="read", pattern="path=secret*")
    result = _turn(
        PermissionService(rules=rules, workspace=tmp_path, yes=True),
        tmp_path,
        ("look", "secrets.txt"),
        ("look", "notes.txt"),
    )
    assert RAN == ["notes.txt"]
    denied = _results(result)[0]
    assert denied[0] and f"denied by rule #{rule.id} deny class=read pattern=path=secret*" in denied[1]
    assert any(isinstance(e, Error) and e.kind == "permission" for e in result.events)


def test_yes_allows_what_would_ask_and_says_so(tmp_path: Path) -> None:
    result = _turn(PermissionService(workspace=tmp_path, yes=True), tmp_path, ("save", "a"))
    assert RAN == ["a"]
    kinds = [e.type for e in result.events if e.type in ("permission_request", "permission_decision", "tool_result")]
    assert kinds == ["permission_request", "permission_decision", "tool_result"]
    decision = next(e for e in result.events if isinstance(e, PermissionDecision))
    assert decision.decision == "allow" and decision.reason == "allowed by --yes"


def test_ask_rule_on_a_read_tool(tmp_path: Path) -> None:
    rules = PermissionRules(":memory:")
    rules.add("ask", tool="look")
    prompter = Answers(PermissionAnswer("deny", "once"))
    result = _turn(PermissionService(rules=rules, workspace=tmp_path, prompter=prompter), tmp_path, ("look", "a"))
    assert RAN == [] and len(prompter.asked) == 1
    assert _results(result)[0][0]


def test_ask_once_asks_every_time(tmp_path: Path) -> None:
    prompter = Answers(PermissionAnswer("allow", "once"), PermissionAnswer("allow", "once"))
    service = PermissionService(workspace=tmp_path, prompter=prompter)
    result = _turn(service, tmp_path, ("save", "a"), ("save", "b"))
    assert RAN == ["a", "b"] and len(prompter.asked) == 2
    decisions = [e for e in result.events if isinstance(e, PermissionDecision)]
    assert [(d.decision, d.scope) for d in decisions] == [("allow", "once"), ("allow", "once")]


def test_ask_session_asks_once_per_session(tmp_path: Path) -> None:
    rules = PermissionRules(tmp_path / "store.db")
    prompter = Answers(PermissionAnswer("allow", "session"), PermissionAnswer("deny", "once"))
    service = PermissionService(rules=rules, workspace=tmp_path, prompter=prompter)
    _turn(service, tmp_path, ("save", "a"), ("save", "b"))
    assert RAN == ["a", "b"] and len(prompter.asked) == 1
    assert rules.list() == []  # nothing durable
    # A new session (a new service) asks again.
    _turn(PermissionService(rules=rules, workspace=tmp_path, prompter=prompter), tmp_path, ("save", "c"))
    assert RAN == ["a", "b"] and len(prompter.asked) == 2


def test_ask_always_stores_a_rule_for_later_runs(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    prompter = Answers(PermissionAnswer("allow", "always"))
    _turn(
        PermissionService(rules=PermissionRules(store), workspace=tmp_path, prompter=prompter), tmp_path, ("save", "a")
    )
    later = Answers()
    _turn(PermissionService(rules=PermissionRules(store), workspace=tmp_path, prompter=later), tmp_path, ("save", "b"))
    assert RAN == ["a", "b"] and later.asked == []
    (rule,) = PermissionRules(store).list()
    assert (rule.effect, rule.tool, rule.workspace) == ("allow", "save", str(tmp_path.resolve()))
    # The rule belongs to that workspace: elsewhere it asks again.
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = PermissionService(rules=PermissionRules(store), workspace=other)
    assert elsewhere.evaluate(save, {"path": "x"})[0] == "ask"


def test_deny_always_stores_a_deny_rule(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    _turn(
        PermissionService(
            rules=PermissionRules(store), workspace=tmp_path, prompter=Answers(PermissionAnswer("deny", "always"))
        ),
        tmp_path,
        ("save", "a"),
    )
    result = _turn(
        PermissionService(rules=PermissionRules(store), workspace=tmp_path, yes=True), tmp_path, ("save", "b")
    )
    assert RAN == [] and "denied by rule" in _results(result)[0][1]


def test_deny_wins_and_the_newest_of_allow_and_ask_decides(tmp_path: Path) -> None:
    rules = PermissionRules(":memory:")
    service = PermissionService(rules=rules, workspace=tmp_path)
    rules.add("allow", tool="s*")
    assert service.evaluate(save, {"path": "x"})[0] == "allow"
    rules.add("ask", tool="save", pattern="*.env")
    assert service.evaluate(save, {"path": "prod.env"})[0] == "ask"
    assert service.evaluate(save, {"path": "x.txt"})[0] == "allow"
    rules.add("allow", tool="save", pattern="path=prod.*")
    assert service.evaluate(save, {"path": "prod.env"})[0] == "allow"
    rules.add("deny", tool_class="write")
    assert service.evaluate(save, {"path": "x.txt"})[0] == "deny"
    assert service.evaluate(look, {"path": "x.txt"})[0] == "allow"


@tool(tool_class="execute")
def shell(command: str) -> str:
    """Run a command."""
    RAN.append(command)
    return "ran"


@pytest.mark.parametrize(
    ("command", "denied"),
    [
        ("rm -rf /", True),
        ("rm -rf ../sibling", True),
        ("rm -r -f /etc", True),
        ("cd build && rm -fr ~/projects", True),
        ("sudo rm --recursive /var/lib/x", True),
        ("rm -Rf $HOME/x", True),
        ("ls; rm -rf /tmp/elsewhere", True),
        ("rm -rf build dist", False),
        ("rm -rf ./node_modules/.cache", False),
        ("rm /etc/passwd-copy", False),  # not recursive: the rules decide, not a hard denial
        ("echo rm -rf /", False),
        ("git status", False),
    ],
)
def test_recursive_delete_outside_the_workspace_is_found(command: str, denied: bool, tmp_path: Path) -> None:
    reason = recursive_delete_outside_workspace(shell, {"command": command}, tmp_path)
    assert (reason is not None) is denied, reason


def test_hard_denial_holds_under_yes_and_allow_rules(tmp_path: Path) -> None:
    rules = PermissionRules(":memory:")
    rules.add("allow")  # allow everything
    service = PermissionService(rules=rules, workspace=tmp_path, yes=True)
    script = [{"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf /"}}]}, {"text": "done"}]
    result = asyncio.run(
        run("go", provider=scripted(script), workspace=tmp_path, tools=Toolset([shell]), approval=service)
    )
    assert RAN == []
    ((is_error, output),) = _results(result)
    assert is_error and "hard denial: recursive delete outside the workspace" in output


def test_hard_denial_under_yes_from_the_cli(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    victim = tmp_path / "outside"
    victim.mkdir()
    (victim / "keep.txt").write_text("still here")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [{"tool_calls": [{"name": "shell", "arguments": {"command": f"rm -rf {victim}"}}]}, {"text": "tried"}]
        )
    )
    cli_env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    proc = subprocess.run(
        [
            *seamline_cmd,
            "run",
            "--provider",
            "scripted",
            "-o",
            f"script={script}",
            "--yes",
            "--json",
            "-w",
            str(workspace),
            "clean up",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert (victim / "keep.txt").read_text() == "still here"
    decision = next(e for e in events if e["type"] == "permission_decision")
    assert decision["decision"] == "deny" and decision["reason"].startswith("hard denial: recursive delete outside")
    assert next(e for e in events if e["type"] == "tool_result")["is_error"] is True


def test_terminal_prompter_reads_the_answer() -> None:
    request = PermissionRequest(request_id="r", call_id="c", tool="save", arguments={"path": "a"}, reason="why")
    err = io.StringIO()
    answer = asyncio.run(TerminalPrompter(stdin=io.StringIO("maybe\ns\n"), stderr=err)(request))
    assert answer == PermissionAnswer("allow", "session")
    assert err.getvalue().count('allow save {"path":"a"}?') == 2
    for typed, expected in (
        ("a\n", ("allow", "always")),
        ("d\n", ("deny", "always")),
        ("\n", ("deny", "once")),
        ("", ("deny", "once")),
    ):
        got = asyncio.run(TerminalPrompter(stdin=io.StringIO(typed), stderr=io.StringIO())(request))
        assert (got.decision, got.scope) == expected


def test_rules_share_the_store_file_and_refuse_a_foreign_one(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    store.create_session("s1", provider="offline", model=None)
    rules = PermissionRules(path)
    rules.add("allow", tool="save")
    store.close()
    again = SQLiteStore(path)
    assert again.get("s1") is not None
    again.close()
    assert [r.tool for r in PermissionRules(path).list()] == ["save"]
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StorageFailure, match="another program"):
        PermissionRules(foreign)


def test_bad_rules_are_refused(tmp_path: Path) -> None:
    rules = PermissionRules(":memory:")
    with pytest.raises(InvalidRequest, match="effect is one of allow, deny, ask"):
        rules.add("maybe")
    with pytest.raises(InvalidRequest, match="tool class is one of"):
        rules.add("allow", tool_class="admin")


def test_permissions_cli_add_list_rm(tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*seamline_cmd, "permissions", *args], capture_output=True, text=True, env=cli_env, timeout=30
        )

    assert cli("list").stdout.strip() == "no permission rules"
    added = cli("add", "allow", "--tool", "shell", "--pattern", "command=git status*")
    assert added.returncode == 0 and added.stdout.strip() == "added #1 allow tool=shell pattern=command=git status*"
    assert cli("add", "deny", "--class", "network").returncode == 0
    listed = cli("list", "--json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["id"], r["effect"], r["tool"], r["tool_class"]) for r in rows] == [
        (1, "allow", "shell", None),
        (2, "deny", None, "network"),
    ]
    assert cli("rm", "1").stdout.strip() == "removed rule #1"
    missing = cli("rm", "1")
    assert missing.returncode == 2 and "no permission rule #1" in missing.stderr
    assert cli("list").stdout.strip() == "#2 deny class=network"
    bad = cli("add", "sometimes")
    assert bad.returncode == 2


@given(st.text(max_size=120))
def test_the_hard_denial_check_never_crashes(command: str) -> None:
    reason = recursive_delete_outside_workspace(shell, {"command": command}, Path("/work/ws"))
    assert reason is None or reason.startswith("recursive delete outside the workspace")


def test_cli_prompts_on_a_terminal_and_always_stores_a_rule(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    import os
    import pty
    import select
    import time

    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "script.json"
    call = {"name": "write_file", "arguments": {"path": "note.txt", "content": "hi"}}
    script.write_text(json.dumps([{"tool_calls": [call]}, {"tool_calls": [call]}, {"text": "written"}]))
    cli_env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            *seamline_cmd,
            "run",
            "--provider",
            "scripted",
            "-o",
            f"script={script}",
            "--json",
            "-w",
            str(workspace),
            "write it",
        ],
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
        env=cli_env,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"[a]lways" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                seen += os.read(master, 4096)
        assert b"allow write_file" in seen, seen
        os.write(master, b"a\n")
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.close(master)
    assert proc.returncode == 0
    events = [json.loads(line) for line in out.decode().splitlines()]
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [(d["decision"], d["scope"]) for d in decisions] == [("allow", "always")]  # asked once: the rule held after
    assert (workspace / "note.txt").read_text() == "hi"
    listed = subprocess.run(
        [*seamline_cmd, "permissions", "list"], capture_output=True, text=True, env=cli_env, timeout=30
    )
    assert listed.stdout.strip() == f"#1 allow tool=write_file workspace={workspace.resolve()}"


def test_a_shell_call_is_an_execute_tool_in_the_reason() -> None:
    from seamline.tools.base import tool_article

    assert tool_article("execute") == "an execute" and tool_article("write") == "a write"

    @tool(tool_class="execute")
    def shell(command: str) -> str:
        """Run a command."""
        return command

    effect, reason = PermissionService().evaluate(shell, {"command": "ls"})
    assert effect == "ask" and "shell is an execute tool" in reason
