"""Temporary git repositories for the worktree tests: a private HOME and global git
configuration, so the user's own git settings never reach a test (and a test may have no
git identity at all)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = ("Tess Ter", "tess@example.com")
_VARIABLES = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_DIR")


def git_home(home: Path, *, identity: bool = True) -> dict[str, str]:
    """The variables that give git ``home`` and its own global configuration."""
    home.mkdir(parents=True, exist_ok=True)
    config = "[init]\n\tdefaultBranch = main\n"
    if identity:
        config += f"[user]\n\tname = {IDENTITY[0]}\n\temail = {IDENTITY[1]}\n"
    (home / ".gitconfig").write_text(config)
    return {"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"), "GIT_CONFIG_NOSYSTEM": "1"}


def environ_with(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _VARIABLES}
    env.update(extra)
    return env


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``git ARGS`` in ``repo`` with the test's identity; its output, stripped."""
    who = ["-c", f"user.name={IDENTITY[0]}", "-c", f"user.email={IDENTITY[1]}"]
    done = subprocess.run(
        ["git", *who, *args], cwd=repo, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def make_repo(path: Path, env: dict[str, str] | None = None) -> Path:
    """A repository at ``path`` on branch main with one commit (README)."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main", env=env)
    (path / "README").write_text("hello\n")
    git(path, "add", "README", env=env)
    git(path, "commit", "--quiet", "-m", "init", env=env)
    return path


def snapshot(repo: Path) -> tuple[str, str, list[str]]:
    """HEAD, ``git status --porcelain`` and the branches: what "nothing changed" compares."""
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        git(repo, "branch", "--list", "--format=%(refname:short)").splitlines(),
    )


def worktree_run(repo: Path, store: Path, path: str, content: str) -> str:
    """One finished worktree run of ``repo`` (scripted) that wrote ``path``; its session id."""
    import asyncio

    import seamline
    from seamline.testing import scripted

    script = [{"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}, {"text": "ok"}]
    agent = seamline.Agent(provider=scripted(script), workspace=repo, worktree=True, store=store, yes=True)

    async def turn() -> str:
        async with agent.session() as session:
            await session.run("write")
            return session.session_id

    return asyncio.run(turn())
