"""The sandboxed shell cannot plant code that the next host ``git`` would run."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from seamline.sandbox import ResourceLimits, Sandbox, SandboxPolicy, open_sandbox

pytestmark = pytest.mark.real

_ATTACKS = (
    "git config core.fsmonitor 'touch /workspace/PWNED'",
    "printf '[core]\\n\\tfsmonitor = touch PWNED\\n' >> .git/config",
    "rm -f .git/config; printf '[core]\\n\\tfsmonitor = touch PWNED\\n' > .git/config",
    "mv .git/config .git/config.old; printf '[core]\\n\\tfsmonitor = touch PWNED\\n' > .git/config",
    "printf '#!/bin/sh\\ntouch PWNED\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    "rm -rf .git/hooks && mkdir .git/hooks",
    "mv .git .git-old && mkdir .git",
)


def _repo(ws: Path) -> None:
    subprocess.run(["git", "init", "-q", str(ws)], check=True, capture_output=True)


def _git_files(ws: Path) -> dict[str, bytes]:
    out = {"config": (ws / ".git" / "config").read_bytes()}
    for hook in sorted((ws / ".git" / "hooks").iterdir()):
        out[f"hooks/{hook.name}"] = hook.read_bytes()
    return out


@pytest.mark.parametrize("attack", _ATTACKS)
def test_git_config_and_hooks_are_read_only_inside(
    make_sandbox: Callable[..., Sandbox], host: dict[str, Path], attack: str
) -> None:
    ws = host["ws"]
    _repo(ws)
    before = _git_files(ws)
    sandbox = make_sandbox()
    asyncio.run(sandbox.execute(attack))
    assert (ws / ".git").is_dir() and not (ws / ".git-old").exists()
    assert _git_files(ws) == before
    # The host's next git in the workspace runs nothing planted.
    subprocess.run(["git", "-C", str(ws), "status"], check=True, capture_output=True)
    assert not (ws / "PWNED").exists()


def test_ordinary_git_work_inside_still_works(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> None:
    ws = host["ws"]
    _repo(ws)
    sandbox = make_sandbox()
    done = asyncio.run(
        sandbox.execute(
            "git add hello.txt && git -c user.name=a -c user.email=a@b commit -qm first && git log --oneline"
        )
    )
    assert done.outcome.returncode == 0, done.outcome.output
    assert b"first" in done.outcome.output


def test_a_policy_can_allow_git_config_writes(bwrap_ready: None, host: dict[str, Path]) -> None:
    ws = host["ws"]
    _repo(ws)
    policy = SandboxPolicy(git_config_writable=True, limits=ResourceLimits(wall_s=20))
    assert SandboxPolicy.from_mapping({"git_config_writable": True}).git_config_writable
    sandbox = open_sandbox("bwrap", workspace=ws, outputs=host["outputs"], policy=policy)
    done = asyncio.run(sandbox.execute("git config seamline.test yes && git config seamline.test"))
    assert done.outcome.returncode == 0, done.outcome.output
    assert b"seamline" in (ws / ".git" / "config").read_bytes()


def test_submodule_repositories_are_guarded_too(make_sandbox: Callable[..., Sandbox], host: dict[str, Path]) -> None:
    ws = host["ws"]
    _repo(ws)
    sub = ws / ".git" / "modules" / "lib"
    (sub / "hooks").mkdir(parents=True)
    (sub / "config").write_text("[core]\n\tbare = false\n")
    (sub / "HEAD").write_text("ref: refs/heads/main\n")
    before = (sub / "config").read_bytes()
    sandbox = make_sandbox()
    asyncio.run(
        sandbox.execute(
            "printf '[core]\\n\\tfsmonitor = touch PWNED\\n' >> .git/modules/lib/config; "
            "printf '#!/bin/sh\\ntouch PWNED\\n' > .git/modules/lib/hooks/post-checkout"
        )
    )
    assert (sub / "config").read_bytes() == before
    assert list((sub / "hooks").iterdir()) == []
