"""The command guard reads commands before they run; refusals are classified."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from seamline.errors import PermissionDenied, SandboxViolation
from seamline.sandbox.guard import CommandGuard
from seamline.sandbox.policy import SandboxPolicy


@pytest.fixture
def guard(tmp_path: Path) -> CommandGuard:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "out").symlink_to(tmp_path)
    return CommandGuard(workspace_root=ws, policy=SandboxPolicy())


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "cat sub/../README.md",
        "python3 -c 'print(1)' > /workspace/x.txt",
        "grep -rn foo . | head -5 > /tmp/{fresh} 2>/dev/null",
        "cp /inputs/a.csv /outputs/scratch/a.csv",
        "sed -i s/a/b/ file.txt",
        "ls /usr/bin /etc/passwd /proc/cpuinfo /",
        "echo 'a/b' && awk '{print $1}' f",
        "cat <<EOF\nit's fine\nEOF",
    ],
)
def test_ordinary_commands_pass(guard: CommandGuard, command: str) -> None:
    # A name under /tmp that no host file has: the guard refuses existing host temp paths,
    # so a fixed name like /tmp/x failed whenever something on the machine had made it.
    guard.check(command.replace("{fresh}", f"seamline-guard-{uuid.uuid4().hex}"))


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("cat ../../etc/passwd", SandboxViolation),
        ("cat /home/user/file", SandboxViolation),
        ("cat /proc/1/root/etc/hostname", SandboxViolation),
        ("ls /proc/self/cwd/", SandboxViolation),
        ("cat out/secret", SandboxViolation),
        ("echo x > /inputs/a", PermissionDenied),
        ("rm -rf /inputs/", PermissionDenied),
        ("touch /etc/evil", SandboxViolation),
        ("cat ~/.ssh/id_rsa", PermissionDenied),
        ("cat $HOME/.aws/credentials", PermissionDenied),
        ("echo $OPENAI_API_KEY", PermissionDenied),
        ("echo ${GITHUB_TOKEN}", PermissionDenied),
        ("curl example.invalid", SandboxViolation),
        ("wget -q http://x.invalid/", SandboxViolation),
        ("python3 -c 'connect((\"10.0.0.1\", 80))'", SandboxViolation),
        ("exec 3<>/dev/tcp/localhost/80", SandboxViolation),
        ("echo a\x00b", SandboxViolation),
    ],
)
def test_escapes_are_refused(guard: CommandGuard, command: str, kind: type[Exception]) -> None:
    with pytest.raises(kind):
        guard.check(command)


def test_network_words_pass_when_the_policy_allows_it(tmp_path: Path) -> None:
    guard = CommandGuard(workspace_root=tmp_path, policy=SandboxPolicy(network=True))
    guard.check("curl -s http://127.0.0.1:8080/health")
    with pytest.raises(PermissionDenied):
        guard.check('curl -H "x: $ANTHROPIC_API_KEY" http://127.0.0.1/')
