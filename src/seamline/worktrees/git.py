"""Running ``git`` for worktree runs: one fixed, safe environment and classified failures.

Every call gets the configuration seamline gives host programs
(:data:`seamline.transport.env.HOST_GIT_CONFIG`: no fsmonitor, no submodule recursion)
plus no hooks, no automatic gc or maintenance and no signing prompts, in the C locale
with no terminal prompt; variables that would point git at another repository
(``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE``…) are removed. Inside a run's worktree
git is told its git directory explicitly (``--git-dir``/``--work-tree``), never found by
reading the worktree's ``.git`` file, which the agent could have rewritten.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from seamline.errors import WorktreeFailure
from seamline.transport.env import compose_env, host_git_environment

__all__ = [
    "GIT_SAFE_CONFIG",
    "SEAMLINE_IDENTITY",
    "GitResult",
    "first_line",
    "git",
    "git_environment",
    "identity_config",
]

#: ``-c`` settings on every git call seamline makes.
GIT_SAFE_CONFIG: Final = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("commit.gpgSign", "false"),
)

#: The author and committer of seamline's commits when the user has no git identity.
SEAMLINE_IDENTITY: Final = ("seamline", "seamline@localhost")

_POINTERS: Final = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
)
_LOCK_RETRIES: Final = 5


@dataclass(frozen=True, slots=True)
class GitResult:
    """What one git call gave."""

    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def git_environment() -> dict[str, str]:
    """The environment of every git call: this process's, made safe."""
    layer: dict[str, str | None] = dict.fromkeys(_POINTERS)
    layer |= {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "GIT_ASKPASS": None}
    return host_git_environment(compose_env(None, layer))


def first_line(text: str) -> str:
    """The first non-empty line of git's message, without git's ``fatal:``/``error:``."""
    for line in text.splitlines():
        line = line.strip()
        for prefix in ("fatal: ", "error: "):
            line = line.removeprefix(prefix)
        if line:
            return line
    return "no message"


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    check: bool = True,
    config: Sequence[tuple[str, str]] = (),
) -> GitResult:
    """Run ``git ARGS`` in ``cwd`` (with an explicit git directory and work tree where
    given). ``check`` turns a non-zero exit into :class:`WorktreeFailure` naming the
    command and git's first line. A lock another git process holds is waited out briefly."""
    argv = ["git"]
    for key, value in (*GIT_SAFE_CONFIG, *config):
        argv += ["-c", f"{key}={value}"]
    if git_dir is not None:
        argv.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        argv.append(f"--work-tree={work_tree}")
    argv += args
    for attempt in range(_LOCK_RETRIES + 1):
        try:
            done = subprocess.run(
                argv, cwd=cwd, env=git_environment(), capture_output=True, text=True, errors="replace", check=False
            )
        except FileNotFoundError:
            if not Path(cwd).is_dir():
                raise WorktreeFailure(f"cannot run git in {cwd}: the folder is gone") from None
            raise WorktreeFailure("git is not installed (worktree runs need git on PATH)") from None
        except OSError as exc:
            raise WorktreeFailure(f"cannot run git: {exc}") from None
        result = GitResult(done.returncode, done.stdout, done.stderr)
        if result.ok or ".lock': File exists" not in result.err or attempt == _LOCK_RETRIES:
            break
        time.sleep(0.05 * 2**attempt)  # another git (a parallel run) holds a lock for a moment
    if check and not result.ok:
        raise WorktreeFailure(f"git {args[0]} failed in {cwd}: {first_line(result.err or result.out)}")
    return result


def identity_config(cwd: Path) -> tuple[tuple[str, str], ...]:
    """``user.name``/``user.email`` for a commit: none when the user's git identity is set
    (configuration or ``GIT_AUTHOR_*``/``GIT_COMMITTER_*``), else seamline's."""
    found = git(["config", "--get-regexp", r"^user\.(name|email)$"], cwd=cwd, check=False).out
    keys = {line.split(" ", 1)[0] for line in found.splitlines()}
    env = os.environ
    name = "user.name" in keys or bool(env.get("GIT_AUTHOR_NAME") and env.get("GIT_COMMITTER_NAME"))
    email = "user.email" in keys or bool(env.get("GIT_AUTHOR_EMAIL") and env.get("GIT_COMMITTER_EMAIL"))
    if name and email:
        return ()
    return (("user.name", SEAMLINE_IDENTITY[0]), ("user.email", SEAMLINE_IDENTITY[1]))
