"""Forms that slipped past a deny rule naming a program, or past the recursive-delete hard
denial, under `--yes` on the host: a program reached through a pattern, a link or a copy,
GNU parallel, and `find -L` deleting through a link already in the workspace."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from seamline.providers.agent_clis.approvals import agent_tool
from seamline.sessions.rules import PermissionRules
from seamline.tools.permissions import PermissionService


@pytest.fixture
def service(tmp_path: Path) -> PermissionService:
    rules = PermissionRules(tmp_path / "rules.db")
    rules.add("deny", pattern="command=rm*")
    (tmp_path / "ws").mkdir()
    return PermissionService(rules=rules, workspace=tmp_path / "ws", yes=True)


@pytest.mark.parametrize(
    "command",
    [
        "cp /bin/rm ./r; ./r -f notes.txt",
        "cp /usr/bin/rm tool && PATH=.:$PATH tool notes.txt",
        "ln -s /bin/rm r && ./r notes.txt",
        "install -m 755 /usr/bin/rm bin/x; bin/x notes.txt",
        "/usr/bin/[r]m notes.txt",
        "cp -t bin /usr/bin/rm && mv bin/rm bin/q && bin/q notes.txt",
        "parallel rm ::: notes.txt",
        "parallel -j 2 rm ::: notes.txt",
    ],
)
def test_a_deny_rule_for_rm_holds_through_patterns_links_copies_and_parallel(
    service: PermissionService, command: str
) -> None:
    effect, reason = service.evaluate(agent_tool("Bash"), {"command": command})
    assert effect == "deny" and "denied by rule" in reason, (command, effect, reason)


def test_a_link_made_by_an_earlier_call_is_followed_to_its_program(service: PermissionService) -> None:
    assert service.workspace is not None
    (service.workspace / "r").symlink_to("/usr/bin/rm")
    effect, _ = service.evaluate(agent_tool("Bash"), {"command": "./r notes.txt"})
    assert effect == "deny"


def test_commands_that_only_look_alike_are_not_denied(service: PermissionService) -> None:
    for command in ("cp notes.txt r.txt && ./r.txt", "ls /usr/bin/r*", "parallel echo ::: a b", "/usr/bin/[e]cho rm"):
        assert service.evaluate(agent_tool("Bash"), {"command": command})[0] != "deny", command


def test_find_following_links_to_delete_is_a_hard_denial_and_deletes_nothing_outside(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    """The attack: a link in the workspace points out, and `find -L` deletes through it.
    The model's shell call, run by seamline's `shell` tool on the host with `--yes`."""
    outside, ws = tmp_path / "outside", tmp_path / "work"
    outside.mkdir()
    ws.mkdir()
    (outside / "precious.txt").write_text("keep me\n")
    (ws / "link").symlink_to(outside)
    command = "find -L . -path './link/*' -delete"
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}, {"text": "ok"}])
    )
    done = subprocess.run(
        [*seamline_cmd, "run", "--json", "--yes", "--no-store", "-p", "scripted", "-o", f"script={script}",
         "-w", str(ws), "go"],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [d["decision"] for d in decisions] == ["deny"] and "find -L" in decisions[0]["reason"], decisions
    assert (outside / "precious.txt").read_text() == "keep me\n"
    assert os.path.islink(ws / "link")
