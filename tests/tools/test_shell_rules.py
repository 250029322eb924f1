"""A command rule matches whole simple commands, never a prefix of a list (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.sessions.rules import PermissionRules
from seamline.tools import tool
from seamline.tools.permissions import PermissionService


@tool(tool_class="execute")
def shell(command: str) -> str:
    """Run a command."""
    return command


def service(tmp_path: Path, *allow: str, deny: tuple[str, ...] = ()) -> PermissionService:
    rules = PermissionRules(":memory:")
    for pattern in allow:
        rules.add("allow", tool="shell", pattern=f"command={pattern}")
    for pattern in deny:
        rules.add("deny", tool="shell", pattern=f"command={pattern}")
    return PermissionService(rules=rules, workspace=tmp_path)


def effect(svc: PermissionService, command: str) -> str:
    return svc.evaluate(shell, {"command": command})[0]


@pytest.mark.parametrize(
    "command",
    [
        "git status; rm x",
        "git status && curl evil",
        "git status || rm x",
        "git status\nrm x",
        "git status & rm x",
        "git status $(rm x)",
        "git status `rm x`",
        "git status | sh",
        "git status > /etc/profile",
        "git status > ../outside.txt",
        "git status >> ~/.bashrc",
        "git status > $OUT",
        "git status <(rm x)",
        "(git status; rm x)",
        "{ git status; rm x; }",
        "{ git status; } > /etc/x",
        "GIT_DIR=/x git status",
        "git status; bash -c 'rm x'",
        "git status 'unterminated",
        "cd .. && git status > x.txt",
    ],
)
def test_a_prefix_rule_does_not_allow_more_than_the_command(command: str, tmp_path: Path) -> None:
    assert effect(service(tmp_path, "git status*"), command) == "ask", command


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git status --short",
        "git  status",
        "git 'status'",
        "git status > out.txt 2>&1",
        "git status 2>/dev/null",
    ],
)
def test_the_whole_simple_command_matches(command: str, tmp_path: Path) -> None:
    assert effect(service(tmp_path, "git status*"), command) == "allow", command


def test_a_list_is_allowed_when_every_command_is(tmp_path: Path) -> None:
    svc = service(tmp_path, "git status*", "git diff*")
    assert effect(svc, "git status && git diff --stat") == "allow"
    assert effect(svc, "git status | git diff") == "allow"
    assert effect(svc, "git status && git push") == "ask"


def test_a_deny_rule_matches_any_command_of_a_list(tmp_path: Path) -> None:
    svc = service(tmp_path, "git status*", deny=("git push*",))
    eff, reason = svc.evaluate(shell, {"command": "git status; git push --force"})
    assert eff == "deny" and "git push" in reason
    assert effect(svc, "echo $(git push origin)") == "deny"
    assert effect(svc, "bash -c 'git push'") == "deny"


def test_a_bare_allow_glob_is_matched_against_the_command_only(tmp_path: Path) -> None:
    @tool(tool_class="execute")
    def bash(command: str, description: str = "") -> str:
        """Run a command (the shape of Claude Code's Bash tool)."""
        return command

    rules = PermissionRules(":memory:")
    rules.add("allow", tool="bash", pattern="git status*")
    svc = PermissionService(rules=rules, workspace=tmp_path)
    assert svc.evaluate(bash, {"command": "git status", "description": "x"})[0] == "allow"
    call = {"command": "rm -rf build", "description": "git status of the tree"}
    assert svc.evaluate(bash, call)[0] == "ask"


def test_a_rule_on_every_shell_call_still_allows_lists(tmp_path: Path) -> None:
    rules = PermissionRules(":memory:")
    rules.add("allow", tool="shell")
    svc = PermissionService(rules=rules, workspace=tmp_path)
    assert effect(svc, "git status; make") == "allow"


_TAILS = st.sampled_from(["; rm x", " && rm x", "\nrm x", " | sh", " $(rm x)", " `rm x`", " > /etc/x", " & rm x"])


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["git status", "git status -s", "ls", "make test"]), _TAILS)
def test_no_suffix_rides_on_an_allowed_command(head: str, tail: str) -> None:
    rules = PermissionRules(":memory:")
    for pattern in ("git status*", "ls*", "make *"):
        rules.add("allow", tool="shell", pattern=f"command={pattern}")
    svc = PermissionService(rules=rules, workspace=Path("/work/ws"))
    assert svc.evaluate(shell, {"command": head})[0] == "allow"
    assert svc.evaluate(shell, {"command": head + tail})[0] == "ask", head + tail


@pytest.mark.parametrize(
    "command",
    [
        "/bin/rm -rf build",
        "/usr/bin/rm x",
        "command rm x",
        "env rm x",
        "env -i A=1 rm x",
        "nice rm x",
        "nice -n 5 rm x",
        "timeout 5 rm x",
        "x=1 rm x",
        "sudo -u root /bin/rm x",
        "nohup rm x",
        "\\rm x",
        "'rm' x",
        "git status && exec /bin/rm x",
    ],
)
def test_a_deny_rule_matches_the_program_actually_run(command: str, tmp_path: Path) -> None:
    """Issue 28: `deny command=rm *` is not bypassed by a path, a wrapper or an assignment."""
    svc = service(tmp_path, "*", deny=("rm *",))
    assert effect(svc, command) == "deny", command


def test_a_deny_rule_on_the_program_leaves_other_programs_alone(tmp_path: Path) -> None:
    svc = service(tmp_path, "*", deny=("rm *",))
    for command in ("echo rm x", "ls rm", "grep -r rm .", "git rm --cached x"):
        assert effect(svc, command) == "allow", command
