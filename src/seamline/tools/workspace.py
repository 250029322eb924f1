"""The built-in workspace tools and the path rule they share.

Every path a tool receives is relative to the workspace and must stay inside it: ``..``
that leaves it, absolute paths and symlinks that point out are refused with a classified
``sandbox`` error before anything is touched.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from seamline.errors import InvalidRequest, SandboxViolation
from seamline.events import FileChange, FileChangeKind
from seamline.store_files import is_store_file
from seamline.tools.base import ToolContext, Toolset, tool
from seamline.tools.beneath import open_dir_beneath, parts_beneath, regular_file, writable_file
from seamline.tools.read_tools import GrepQuery, grep_tree, read_lines, run_bounded_read
from seamline.tools.shell_output import run_unsandboxed

if TYPE_CHECKING:
    from seamline.sandbox.git_quarantine import GitWatch
    from seamline.sandbox.journal import EditJournal
    from seamline.sandbox.runtime import Sandbox

__all__ = ["Workspace", "workspace_tools", "WORKSPACE_TOOL_NAMES"]

WORKSPACE_TOOL_NAMES: Final = ("read_file", "list_dir", "grep", "write_file", "edit_file", "shell")
_SKIP_DIRS: Final = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
_MAX_READ_LINES: Final = 2000
_MAX_OUTPUT: Final = 64_000
_MAX_EDIT_BYTES: Final = 16 * 1024 * 1024
_MAX_LIST_ENTRIES: Final = 20_000
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Workspace:
    """A folder the tools may use, and the rule that keeps them inside it.

    A workspace is also a path (``os.fspath`` gives its resolved root): where a path is
    taken, one can be given, and it is not resolved again (an agent resolves its folder
    once, not at every run)."""

    __slots__ = ("root",)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        if isinstance(root, Workspace):
            self.root: Path = root.root
            return
        path = Path(root)
        if not path.is_dir():
            raise InvalidRequest(f"workspace {root} is not a folder")
        self.root = path.resolve()

    def __fspath__(self) -> str:
        return str(self.root)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

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


def resolved_folder(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved, or a :class:`Workspace`'s root as it is (resolved already)."""
    return path.root if isinstance(path, Workspace) else Path(path).resolve()


def _truncate(text: str, limit: int = _MAX_OUTPUT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[output truncated: {len(text) - limit} more characters]"


def workspace_tools(
    workspace: Workspace,
    *,
    sandbox: Sandbox | None = None,
    journal: EditJournal | None = None,
    read_timeout: float = 30.0,
) -> Toolset:
    """The six built-in tools bound to ``workspace``: read_file, list_dir, grep,
    write_file, edit_file (class write) and shell (class execute).

    With ``sandbox``, shell commands run inside it (see :mod:`seamline.sandbox`); with
    ``journal``, every change write_file, edit_file and shell make is journaled so the
    run can be reverted. ``read_file`` and ``grep`` stop after ``read_timeout`` seconds.
    """
    if not math.isfinite(read_timeout) or read_timeout <= 0:
        raise InvalidRequest(f"read_timeout must be a positive number of seconds; got {read_timeout!r}")

    def journaled(
        ctx: ToolContext, tool_name: str, paths: list[Path] | None, watch: GitWatch | None = None
    ) -> contextlib.AbstractContextManager[None]:
        if journal is None:
            return contextlib.nullcontext()

        def heard(rel: str, kind: FileChangeKind) -> None:
            ctx.emit(FileChange(path=rel, kind=kind, call_id=ctx.call_id))
            if watch is not None:
                watch.on_change(rel, kind)

        return journal.track(
            run_id=ctx.session_id,
            workspace=workspace.root,
            tool=tool_name,
            call_id=ctx.call_id,
            paths=paths,
            on_change=None if paths is not None else heard,
            on_ignored_change=watch.on_change if watch is not None else None,
            before_notes=watch.before_notes if watch is not None else None,
            after_notes=watch.after_notes if watch is not None else None,
        )

    @tool(tool_class="read")
    async def read_file(path: str, ctx: ToolContext, offset: int = 1, limit: int = _MAX_READ_LINES) -> str:
        """Read a text file of the workspace; lines come numbered as `N<TAB>text`."""
        real = workspace.resolve(path)
        rel = workspace.relative(real)
        parts = parts_beneath(workspace.root, real)
        body = await run_bounded_read(
            lambda stop, _deadline: read_lines(workspace.root, parts, rel, offset=offset, limit=limit, stop=stop),
            timeout=read_timeout,
            what="read_file",
        )
        ctx.emit(FileChange(path=rel, kind="read", call_id=ctx.call_id))
        return body

    @tool(tool_class="read")
    def list_dir(path: str = ".", depth: int = 1) -> str:
        """List a folder of the workspace; folders end in `/`. `depth` > 1 descends."""
        real = workspace.resolve(path)
        if not real.is_dir():
            raise InvalidRequest(f"not a folder: {path}")
        parts = parts_beneath(workspace.root, real)
        out: list[str] = []
        with open_dir_beneath(workspace.root, parts) as fd:
            _walk(fd, "/".join(parts) + "/" if parts else "", max(1, min(depth, 8)), out)
        return _truncate("\n".join(out))

    @tool(tool_class="read")
    async def grep(pattern: str, path: str = ".", glob: str | None = None, max_results: int = 200) -> str:
        """Search files for a regular expression; answers `path:line:text`."""
        query = GrepQuery(pattern, glob=glob, max_results=max_results)
        real = workspace.resolve(path)
        parts = parts_beneath(workspace.root, real)
        is_file = not real.is_dir()  # FIFOs and devices are refused as files, not walked
        return await run_bounded_read(
            lambda stop, deadline: grep_tree(
                workspace.root, parts, query, is_file=is_file, stop=stop, deadline=deadline
            ),
            timeout=read_timeout,
            what="grep",
        )

    @tool(tool_class="write")
    def write_file(path: str, content: str, ctx: ToolContext) -> str:
        """Write a text file of the workspace, creating folders as needed."""
        real = workspace.resolve(path)
        parts = parts_beneath(workspace.root, real)
        data = content.encode("utf-8")
        with journaled(ctx, "write_file", [real]):
            existed = _write_beneath(workspace.root, parts, data)
        rel = workspace.relative(real)
        ctx.emit(FileChange(path=rel, kind="edited" if existed else "created", call_id=ctx.call_id))
        return f"wrote {len(data)} bytes to {rel}"

    @tool(tool_class="write")
    def edit_file(path: str, old: str, new: str, ctx: ToolContext, replace_all: bool = False) -> str:
        """Replace the exact text `old` with `new` in a file; `old` must occur once unless replace_all."""
        real = workspace.resolve(path)
        parts = parts_beneath(workspace.root, real)
        fd, st = regular_file(workspace.root, parts)
        with os.fdopen(fd, "rb") as fh:
            if st.st_size > _MAX_EDIT_BYTES:
                raise InvalidRequest(f"{path} is {st.st_size} bytes; edit_file edits files up to {_MAX_EDIT_BYTES}")
            raw = fh.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"{path} is a binary file (not UTF-8 text); edit_file edits text") from None
        count = text.count(old) if old else 0
        if count == 0:
            raise InvalidRequest(f"text to replace not found in {path}")
        if count > 1 and not replace_all:
            raise InvalidRequest(f"text to replace occurs {count} times in {path}; give more context or replace_all")
        changed = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        with journaled(ctx, "edit_file", [real]):
            _write_beneath(workspace.root, parts, changed.encode("utf-8"))
        rel = workspace.relative(real)
        ctx.emit(FileChange(path=rel, kind="edited", call_id=ctx.call_id))
        return f"replaced {count if replace_all else 1} occurrence(s) in {rel}"

    @tool(tool_class="execute")
    async def shell(command: str, ctx: ToolContext, timeout: float = 60.0) -> str:
        """Run a shell command in the workspace; answers exit code and output."""
        if sandbox is not None:
            sandbox.guard.check(command)  # refused before the workspace is scanned or anything starts
            from seamline.sandbox.git_quarantine import GitRules, GitWatch

            # The command may leave a repository or git configuration for the host's next git.
            watch = GitWatch(workspace.root, GitRules.from_policy(sandbox.policy), journaled=journal is not None)
            sandbox.prepare_workspace()  # before the scan: seamline's mounts are not the command's changes
            try:
                with journaled(ctx, "shell", None, watch):
                    watch.begin()
                    output = _truncate(await sandbox.run_shell(command, timeout=timeout))
            finally:
                report = watch.settle(journal=journal, run_id=ctx.session_id, call_id=ctx.call_id)
                for event in report.events(absolute=False, call_id=ctx.call_id):
                    ctx.emit(event)
            return f"{output}\n[seamline: {report.line()}]" if report else output
        code, text = await run_unsandboxed(command, cwd=workspace.root, timeout=timeout, cap=_MAX_OUTPUT)
        return f"exit code {code}\n{text}"

    return Toolset([read_file, list_dir, grep, write_file, edit_file, shell], workspace=workspace)


def _walk(dir_fd: int, prefix: str, depth: int, out: list[str]) -> None:
    """List a folder by descriptor; links are listed, never entered."""
    try:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in _SKIP_DIRS:
            continue
        if len(out) > _MAX_LIST_ENTRIES:
            return  # the answer is truncated far below this anyway
        if entry.is_dir(follow_symlinks=False):
            out.append(f"{prefix}{entry.name}/")
            if depth > 1:
                try:
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    _walk(sub, f"{prefix}{entry.name}/", depth - 1, out)
                finally:
                    os.close(sub)
        else:
            out.append(f"{prefix}{entry.name}")


def _write_beneath(root: Path, parts: list[str], data: bytes) -> bool:
    """Write ``data`` to ``root/parts`` through descriptors (no link followed, no file with
    another hard link); whether the file existed."""
    fd, existed = writable_file(root, parts)
    with os.fdopen(fd, "wb") as fh:
        fh.truncate(0)
        fh.write(data)
    return existed
