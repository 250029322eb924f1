"""The sandboxed shell cannot plant code that the next host ``git`` would run."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from seamline.sandbox import ResourceLimits, Sandbox, SandboxPolicy, open_sandbox
from seamline.sandbox.bwrap import host_git_environment

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


# Issue 28: the class beyond config and hooks. Each plants, from inside the sandbox, a way
# for the host's next `git status` to run a program, then runs that git on the host.
_CLASS_ATTACKS = {
    # .git/commondir pointed at a writable copy whose config names core.fsmonitor
    "commondir": "cp -r .git .evil && git --git-dir=.evil config core.fsmonitor 'touch PWNED; false' "
    "&& echo ../.evil > .git/commondir",
    # a new .git/modules entry with its own core.fsmonitor, reached through a gitlink
    "modules": "mkdir -p sub && cd sub && git init -q && git commit -q --allow-empty -m s "
    "&& git config core.fsmonitor 'touch ../PWNED; false' && cd .. && mkdir -p .git/modules "
    "&& mv sub/.git .git/modules/sub && echo 'gitdir: ../.git/modules/sub' > sub/.git "
    "&& git --git-dir=.git/modules/sub config core.worktree ../../../sub && git add sub",
    # a nested repository in the worktree, added as a gitlink
    "nested": "mkdir -p sub && cd sub && git init -q && git commit -q --allow-empty -m s "
    "&& git config core.fsmonitor 'touch ../PWNED; false' && cd .. && git add sub",
}


@pytest.mark.parametrize("name", sorted(_CLASS_ATTACKS))
def test_the_hosts_git_runs_nothing_planted_through_the_repository(
    make_sandbox: Callable[..., Sandbox], host: dict[str, Path], name: str
) -> None:
    ws = host["ws"]
    _repo(ws)
    sandbox = make_sandbox()
    env = "GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b"
    asyncio.run(sandbox.execute(f"export {env}; {_CLASS_ATTACKS[name]}"))
    assert not (ws / "PWNED").exists()  # nothing ran inside either (no host git yet)
    if name != "nested":  # the mounts alone stop these: the user's own plain git is safe too
        subprocess.run(["git", "-C", str(ws), "status"], capture_output=True)
        assert not (ws / "PWNED").exists(), name
    # The host's git, with the environment seamline gives it (host_git_environment).
    subprocess.run(["git", "-C", str(ws), "status"], env=host_git_environment(), capture_output=True)
    assert not (ws / "PWNED").exists(), name


def test_the_attacks_work_without_the_guard(bwrap_ready: None, host: dict[str, Path]) -> None:
    """The attack scripts are real: with the guard lifted, the host's plain git runs them."""
    ws = host["ws"]
    _repo(ws)
    policy = SandboxPolicy(git_config_writable=True, limits=ResourceLimits(wall_s=20))
    sandbox = open_sandbox("bwrap", workspace=ws, outputs=host["outputs"], policy=policy)
    env = "GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b"
    asyncio.run(sandbox.execute(f"export {env}; {_CLASS_ATTACKS['commondir']}"))
    subprocess.run(["git", "-C", str(ws), "status"], capture_output=True)
    assert (ws / "PWNED").exists()


def test_commits_still_work_inside_with_the_class_guard(
    make_sandbox: Callable[..., Sandbox], host: dict[str, Path]
) -> None:
    ws = host["ws"]
    _repo(ws)
    done = asyncio.run(
        make_sandbox().execute(
            "git add hello.txt && git -c user.name=a -c user.email=a@b commit -qm first "
            "&& git checkout -qb side && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m two "
            "&& git log --oneline"
        )
    )
    assert done.outcome.returncode == 0, done.outcome.output
    log = subprocess.run(["git", "-C", str(ws), "log", "--oneline"], env=host_git_environment(), capture_output=True)
    assert b"two" in log.stdout and b"first" in log.stdout
