"""The built-in workspace tools and the path rule they share.

Every path a tool receives is relative to the workspace and must stay inside it: ``..``
that leaves it, absolute paths and symlinks that point out are refused with a classified
``sandbox`` error before anything is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Final

from seamline.errors import InvalidRequest, SandboxViolation, TimeoutFailure
from seamline.events import FileChange
from seamline.sessions.sqlite_file import is_store_file
from seamline.tools.base import ToolContext, Toolset, tool

if TYPE_CHECKING:
    from seamline.sandbox.journal import EditJournal
    from seamline.sandbox.runtime import Sandbox

__all__ = ["Workspace", "workspace_tools", "WORKSPACE_TOOL_NAMES"]

WORKSPACE_TOOL_NAMES: Final = ("read_file", "list_dir", "grep", "write_file", "edit_file", "shell")
_SKIP_DIRS: Final = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
_MAX_READ_LINES: Final = 2000
_MAX_OUTPUT: Final = 64_000


class Workspace:
    """A folder the tools may use, and the rule that keeps them inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root)
        if not path.is_dir():
            raise InvalidRequest(f"workspace {root} is not a folder")
        self.root = path.resolve()

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` inside the workspace, or :class:`SandboxViolation`."""
        if "\x00" in path:
            raise SandboxViolation("path contains a NUL byte")
        if os.path.isabs(path) or path.startswith("~"):
            raise SandboxViolation(f"absolute path refused: {path!r} (paths are relative to the workspace)")
        candidate = self.root / path
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            if ".." in Path(path).parts and not candidate.is_symlink():
                raise SandboxViolation(f"path leaves the workspace: {path!r}")
            raise SandboxViolation(f"path resolves outside the workspace: {path!r}")
        if is_store_file(real):
            # Opening it here would drop the store's locks in this process.
            raise SandboxViolation(f"{path!r} is the open session store; tools never open it")
        return real

    def relative(self, real: Path) -> str:
        return real.relative_to(self.root).as_posix() or "."


def _truncate(text: str, limit: int = _MAX_OUTPUT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[output truncated: {len(text) - limit} more characters]"


def workspace_tools(
    workspace: Workspace, *, sandbox: Sandbox | None = None, journal: EditJournal | None = None
) -> Toolset:
    """The six built-in tools bound to ``workspace``: read_file, list_dir, grep,
    write_file, edit_file (class write) and shell (class execute).

    With ``sandbox``, shell commands run inside it (see :mod:`seamline.sandbox`); with
    ``journal``, every change write_file, edit_file and shell make is journaled so the
    run can be reverted.
    """

    def journaled(
        ctx: ToolContext, tool_name: str, paths: list[Path] | None
    ) -> contextlib.AbstractContextManager[None]:
        if journal is None:
            return contextlib.nullcontext()
        return journal.track(
            run_id=ctx.session_id,
            workspace=workspace.root,
            tool=tool_name,
            call_id=ctx.call_id,
            paths=paths,
            on_change=None
            if paths is not None
            else (lambda rel, kind: ctx.emit(FileChange(path=rel, kind=kind, call_id=ctx.call_id))),
        )

    @tool(tool_class="read")
    def read_file(path: str, ctx: ToolContext, offset: int = 1, limit: int = _MAX_READ_LINES) -> str:
        """Read a text file of the workspace; lines come numbered as `N<TAB>text`."""
        real = workspace.resolve(path)
        if not real.is_file():
            raise InvalidRequest(f"not a file: {path}")
        with real.open("r", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
        start = max(offset, 1)
        chosen = lines[start - 1 : start - 1 + max(limit, 0)]
        ctx.emit(FileChange(path=workspace.relative(real), kind="read", call_id=ctx.call_id))
        body = "\n".join(f"{n}\t{line}" for n, line in enumerate(chosen, start))
        if start - 1 + len(chosen) < len(lines):
            body += f"\n[{len(lines) - (start - 1 + len(chosen))} more lines; use offset]"
        return body

    @tool(tool_class="read")
    def list_dir(path: str = ".", depth: int = 1) -> str:
        """List a folder of the workspace; folders end in `/`. `depth` > 1 descends."""
        real = workspace.resolve(path)
        if not real.is_dir():
            raise InvalidRequest(f"not a folder: {path}")
        out: list[str] = []
        _walk(real, workspace, max(1, min(depth, 8)), out)
        return _truncate("\n".join(out))

    @tool(tool_class="read")
    def grep(pattern: str, path: str = ".", glob: str | None = None, max_results: int = 200) -> str:
        """Search files for a regular expression; answers `path:line:text`."""
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidRequest(f"bad regular expression: {exc}") from None
        real = workspace.resolve(path)
        hits: list[str] = []
        files = [real] if real.is_file() else _files(real)
        for file in files:
            rel = workspace.relative(file)
            if glob and not fnmatch.fnmatch(rel, glob) and not fnmatch.fnmatch(file.name, glob):
                continue
            try:
                text = file.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{rel}:{n}:{line}")
                    if len(hits) >= max_results:
                        return "\n".join(hits) + "\n[more matches; narrow the search]"
        return "\n".join(hits) if hits else "no matches"

    @tool(tool_class="write")
    def write_file(path: str, content: str, ctx: ToolContext) -> str:
        """Write a text file of the workspace, creating folders as needed."""
        real = workspace.resolve(path)
        existed = real.exists()
        with journaled(ctx, "write_file", [real]):
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_text(content, encoding="utf-8")
        rel = workspace.relative(real)
        ctx.emit(FileChange(path=rel, kind="edited" if existed else "created", call_id=ctx.call_id))
        return f"wrote {len(content.encode())} bytes to {rel}"

    @tool(tool_class="write")
    def edit_file(path: str, old: str, new: str, ctx: ToolContext, replace_all: bool = False) -> str:
        """Replace the exact text `old` with `new` in a file; `old` must occur once unless replace_all."""
        real = workspace.resolve(path)
        if not real.is_file():
            raise InvalidRequest(f"not a file: {path}")
        text = real.read_text(encoding="utf-8")
        count = text.count(old) if old else 0
        if count == 0:
            raise InvalidRequest(f"text to replace not found in {path}")
        if count > 1 and not replace_all:
            raise InvalidRequest(f"text to replace occurs {count} times in {path}; give more context or replace_all")
        with journaled(ctx, "edit_file", [real]):
            real.write_text(text.replace(old, new) if replace_all else text.replace(old, new, 1), encoding="utf-8")
        rel = workspace.relative(real)
        ctx.emit(FileChange(path=rel, kind="edited", call_id=ctx.call_id))
        return f"replaced {count if replace_all else 1} occurrence(s) in {rel}"

    @tool(tool_class="execute")
    async def shell(command: str, ctx: ToolContext, timeout: float = 60.0) -> str:
        """Run a shell command in the workspace; answers exit code and output."""
        if sandbox is not None:
            sandbox.guard.check(command)  # refused before the workspace is scanned or anything starts
            with journaled(ctx, "shell", None):
                return _truncate(await sandbox.run_shell(command, timeout=timeout))
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            cwd=workspace.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=max(timeout, 0.1))
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(proc.pid)
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise TimeoutFailure(f"shell command ran past {timeout:g}s and was killed") from None
        text = _truncate(out.decode("utf-8", errors="replace"))
        return f"exit code {proc.returncode}\n{text}"

    return Toolset([read_file, list_dir, grep, write_file, edit_file, shell], workspace=workspace)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _walk(folder: Path, workspace: Workspace, depth: int, out: list[str]) -> None:
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in _SKIP_DIRS:
            continue
        rel = entry.relative_to(workspace.root).as_posix()
        if entry.is_dir() and not entry.is_symlink():
            out.append(rel + "/")
            if depth > 1:
                _walk(entry, workspace, depth - 1, out)
        else:
            out.append(rel)


def _files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        found.extend(Path(dirpath) / f for f in filenames if not is_store_file(os.path.join(dirpath, f)))
    return sorted(found)
