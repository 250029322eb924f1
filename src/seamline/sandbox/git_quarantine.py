"""Repositories and git configuration a sandbox leaves in the workspace, found after each
sandboxed turn or command and moved aside before the host's next ``git`` reads them.

The sandbox cannot write the workspace's own ``.git/config`` or ``.git/hooks`` (read-only
mounts), but it can make a repository of its own anywhere below: ``git init sub`` with a
``core.fsmonitor`` in ``sub/.git/config``, added to the outer index as a gitlink, and the
user's next plain ``git status`` recurses into ``sub`` and runs the command on the host. So
after every sandboxed turn of an agent program (:mod:`seamline.providers.programs.journal`) and
every sandboxed ``shell`` call (:mod:`seamline.tools.workspace`), :class:`GitWatch` looks
at what the turn changed and *quarantines* (renames to ``NAME.seamline-quarantine-<id>``,
so git no longer finds it under its name):

- a ``.git`` (folder, file or link) the turn made or changed anywhere below the
  workspace's top folder, and a ``.git`` file or link at the top (a folder there is the
  workspace's own repository, even a new one: its configuration is checked instead);
- a bare repository the turn made (a new ``HEAD`` or ``commondir`` in a folder git would
  take for a repository): its ``HEAD``;
- every file the turn created or changed that git could read as configuration
  (:mod:`seamline.sandbox.git_config_scan`) naming a program: ``core.fsmonitor``,
  ``core.hooksPath``, ``alias.*`` = ``!…``, filters, ``include.path``…, wherever it lies and
  whatever its name (an outer config may include it);
- a hook the turn wrote into a repository's ``hooks`` folder (``*.sample`` aside).

``nested_repositories = true`` in the sandbox policy keeps the first two; configuration
and hooks are quarantined either way (``git_config_writable = true`` leaves the
workspace's own ``.git`` to the sandbox). A user's ``git add`` of the nested folder, a
gitlink already in the outer index, stays there untouched: without ``sub/.git`` git sees an
uninitialised submodule and runs nothing of it.

Cheap: with an edit journal the check reads nothing more than the journal's scans (the
folders they leave out, ``.git``, and the bytes of each file whose stat changed, as the scan
reads them), plus a few ``lstat`` calls per repository folder. Without a journal it walks
the tree (names and stat only) before and after and reads files whose change time falls in
the turn. Every rename and read opens each folder on the way with ``O_NOFOLLOW``; the
entry itself is renamed, never followed (``renameat2(RENAME_NOREPLACE)`` where the kernel
has it). With a journal the quarantine is one more journaled step, so ``seamline revert``
removes the quarantined copies with the rest of the run.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from seamline.errors import SeamlineError
from seamline.events import Error, Event, FileChange, FileChangeKind, Raw
from seamline.sandbox.file_index import ScanNotes, walk_tree
from seamline.sandbox.git_config_scan import config_entries, dangerous_keys, reads_as_config
from seamline.sandbox.private_files import PrivatePathRefused, open_folder

if TYPE_CHECKING:
    from seamline.sandbox.journal import EditJournal
    from seamline.sandbox.policy import SandboxPolicy

__all__ = ["QUARANTINE_MARK", "GitRules", "GitWatch", "QuarantineReport", "Quarantined"]

#: What a quarantined name gets after it, before a random id.
QUARANTINE_MARK: Final = ".seamline-quarantine-"
_GIT_SKIP: Final = frozenset({".git"})
#: Read whole up to this; over it only the head is read (as the journal keeps no content).
_READ_WHOLE: Final = 64 * 1024 * 1024
_HEAD_BYTES: Final = 64 * 1024
_CONFIG_NAMES: Final = ("config", "config.worktree")
_MARKS: Final = frozenset({"HEAD", "commondir"})
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_RENAME_NOREPLACE: Final = 1
_FIRST_BYTE: Final = re.compile(rb"[ \t\r\n\v\f]*(.)", re.DOTALL)
_Fingerprint = tuple[str, int, int, int, int, int]  # kind, size, mtime_ns, ctime_ns, ino, mode


@dataclass(frozen=True, slots=True)
class GitRules:
    """What the sandbox policy lets a turn leave: new repositories (``nested_repositories``)
    and changes to the workspace's own ``.git`` configuration (``git_config_writable``)."""

    nested_repositories: bool = False
    own_repository_writable: bool = False

    @classmethod
    def from_policy(cls, policy: SandboxPolicy) -> GitRules:
        return cls(nested_repositories=policy.nested_repositories, own_repository_writable=policy.git_config_writable)


@dataclass(frozen=True, slots=True)
class Quarantined:
    """One path moved aside (``moved_to``), or that could not be (``error``)."""

    path: str
    reason: str
    moved_to: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class QuarantineReport:
    """What one turn's check quarantined, workspace-relative paths."""

    workspace: Path
    items: tuple[Quarantined, ...] = ()
    journaled: bool = False

    def __bool__(self) -> bool:
        return bool(self.items)

    def payload(self) -> dict[str, object]:
        return {
            "git_quarantine": [_item_payload(i) for i in self.items],
            "workspace": str(self.workspace),
            "journaled": self.journaled,
        }

    def events(self, *, absolute: bool, call_id: str | None = None) -> list[Event]:
        """The report as events: one ``raw`` from ``seamline`` (``{"git_quarantine": [...]}``),
        a ``file_change`` for each name that went and came, and one ``error`` of kind
        ``sandbox`` that says it in a line."""
        if not self.items:
            return []

        def shown(rel: str) -> str:
            return str(self.workspace / rel) if absolute else rel

        out: list[Event] = [Raw(source="seamline", payload=self.payload())]
        for item in self.items:
            if item.moved_to is not None:
                out.append(FileChange(path=shown(item.path), kind="deleted", call_id=call_id))
                out.append(FileChange(path=shown(item.moved_to), kind="created", call_id=call_id))
        out.append(Error(kind="sandbox", message=self.line()))
        return out

    def line(self) -> str:
        moved = [f"{i.path} -> {i.moved_to} ({i.reason})" for i in self.items if i.moved_to is not None]
        stuck = [f"{i.path} ({i.reason}): {i.error}" for i in self.items if i.moved_to is None]
        parts = []
        if moved:
            parts.append(
                "the sandbox left git repositories or configuration that the host's next git would run; "
                "quarantined: " + "; ".join(moved)
            )
        if stuck:
            parts.append(
                f"could not quarantine: {'; '.join(stuck)}; run no git in {self.workspace} before removing them"
            )
        if any(i.reason.startswith(("a git repository", "a bare", "a .git")) for i in self.items):
            parts.append("nested_repositories = true in the sandbox policy allows new repositories")
        return ". ".join(parts)


def _item_payload(item: Quarantined) -> dict[str, str]:
    named = {"path": item.path, "moved_to": item.moved_to, "reason": item.reason, "error": item.error}
    return {k: v for k, v in named.items() if v is not None}


@dataclass
class _Survey:
    """A walk's view, for a check without a journal: ``.git`` entries, ``HEAD``/``commondir``
    files, the ``.git`` folders, and files whose change time is at or after ``since``."""

    git_entries: dict[str, str] = field(default_factory=dict)
    marks: set[str] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)


class GitWatch:
    """One sandboxed turn's (or command's) check; see the module docstring.

    With a journal: pass :attr:`before_notes`, :attr:`after_notes` and :meth:`on_change` to
    :meth:`EditJournal.track`, call :meth:`begin` once the scan before has run, then
    :meth:`settle` after the step is recorded. Without (``journaled=False``): :meth:`begin`
    before the turn, :meth:`settle` after it.
    """

    def __init__(
        self, root: Path, rules: GitRules, *, journaled: bool, skip_dirs: frozenset[str] = frozenset()
    ) -> None:
        self.root = root.resolve()
        self.rules = rules
        self.journaled = journaled
        self.skip_dirs = skip_dirs if journaled else _GIT_SKIP
        self.before_notes = ScanNotes()
        self.after_notes = ScanNotes(on_read=self._heard)
        self._changes: dict[str, FileChangeKind] = {}
        self._read: dict[str, list[str]] = {}  # rel -> its dangerous keys, for each file the scan read
        self._probes: dict[str, dict[str, _Fingerprint]] = {}
        self._survey: _Survey | None = None
        self._since = 0

    # -- what the journal hears ----------------------------------------------------------

    def on_change(self, rel: str, kind: FileChangeKind) -> None:
        self._changes[rel] = kind

    def _heard(self, rel: str, data: bytes) -> None:
        # A file git would refuse at its first byte (most binaries) costs one test.
        start = _FIRST_BYTE.match(data)
        first = start.group(1) if start is not None else b""
        if first and not (first.isalpha() or first in b"#;[\xef"):
            self._read[rel] = []
            return
        self._read[rel] = dangerous_keys(config_entries(data).entries)

    def begin(self) -> None:
        """Before the turn: what the repositories' folders hold (config, hooks), and, with
        no journal, a survey of the tree."""
        if not self.journaled:
            self._since = time.time_ns() - 1_000_000_000  # the kernel's coarse clock may lag
            self._survey = _survey(self.root, None)
            self.before_notes.skipped = list(self._survey.skipped)
        self._probes = {g: _probe(self.root, g) for g in self.before_notes.skipped}

    # -- after the turn --------------------------------------------------------------------

    def settle(self, *, journal: EditJournal | None = None, run_id: str = "", call_id: str = "") -> QuarantineReport:
        """Find what the turn left and quarantine it; journaled as one step (tool
        ``git_quarantine``) when ``journal`` is given. Never raises for a path it cannot
        move: the report says so."""
        if not self.journaled:
            self._survey_after()
        findings = self.findings()
        if not findings:
            return QuarantineReport(self.root)
        plan = [(rel, f"{rel}{QUARANTINE_MARK}{secrets.token_hex(4)}", why) for rel, why in findings.items()]
        done: list[Quarantined] = []
        journaled = False
        if journal is not None:
            try:
                with journal.track(
                    run_id=run_id,
                    workspace=self.root,
                    tool="git_quarantine",
                    call_id=f"{call_id}:git-quarantine",
                    paths=[self.root / p for p in self._journal_paths(plan)],
                    number_at_end=True,
                ):
                    done = [_quarantine(self.root, *item) for item in plan]
                journaled = True
            except (sqlite3.Error, SeamlineError):
                journaled = False  # the moves below (or already made) still hold
        if not done:
            done = [_quarantine(self.root, *item) for item in plan]
        return QuarantineReport(self.root, tuple(done), journaled and any(d.moved_to for d in done))

    def findings(self) -> dict[str, str]:
        """What to quarantine: relative path -> why, shallowest first."""
        found: dict[str, str] = {}
        roots: list[str] = []  # quarantined whole: nothing below needs a look
        after_dirs = set(self.after_notes.skipped)
        new_dirs = after_dirs - set(self.before_notes.skipped)
        git_entries = {r for r, k in self._changes.items() if _name(r) == ".git" and k != "deleted"} | new_dirs
        gitdir_targets: list[str] = []
        for rel in sorted(git_entries, key=_depth):
            if _below(rel, roots) or ".git" in _parts(rel)[:-1]:
                continue
            kind = _kind_beneath(self.root, rel)
            if kind is None or (rel == ".git" and kind == "dir"):
                continue  # gone, or the workspace's own repository (its config is checked below)
            if self.rules.nested_repositories:
                if kind != "dir":
                    gitdir_targets.extend(t for t in [_gitdir_target(self.root, rel, kind)] if t is not None)
                continue
            found[rel] = {
                "dir": "a git repository the sandbox created inside the workspace",
                "file": "a .git file the sandbox wrote (git would open the repository it names)",
            }.get(kind, "a .git link the sandbox made (git would open the repository it points to)")
            roots.append(rel)
        changed = sorted((r for r, k in self._changes.items() if k != "deleted" and not _below(r, roots)), key=_depth)
        shapes: dict[str, bool] = {}
        for rel in changed:
            if self._changes[rel] == "created" and _name(rel) in _MARKS and ".git" not in _parts(rel):
                folder = _parent(rel)
                if self._is_gitdir(folder, shapes) and not self.rules.nested_repositories:
                    head = f"{folder}/HEAD" if folder else "HEAD"
                    if not _below(head, roots):
                        found[head] = f"a bare git repository the sandbox created ({folder or 'the workspace itself'})"
                        roots.append(head)
        for rel in changed:
            if _below(rel, roots) or (self.rules.own_repository_writable and _parts(rel)[0] == ".git"):
                continue
            if self._is_hook(rel, shapes):
                found[rel] = "a git hook the sandbox wrote (the host's git would run it)"
                continue
            keys = self._read[rel] if rel in self._read else self._examine_unread(rel)
            if keys:
                found[rel] = f"git configuration the sandbox wrote that runs a program ({', '.join(keys)})"
        for gitdir in sorted(after_dirs | set(gitdir_targets), key=_depth):
            if _below(gitdir, roots) or (gitdir == ".git" and self.rules.own_repository_writable):
                continue
            self._probe_findings(gitdir, found, whole=gitdir in gitdir_targets)
        return dict(sorted(found.items(), key=lambda kv: _depth(kv[0])))

    def _probe_findings(self, gitdir: str, found: dict[str, str], *, whole: bool) -> None:
        """A repository folder the scan left out: its config and hooks, if they changed
        (all of them for a ``.git`` file's or link's target)."""
        before = {} if whole else self._probes.get(gitdir, {})
        for name, print_ in _probe(self.root, gitdir).items():
            if before.get(name) == print_:
                continue
            rel = f"{gitdir}/{name}"
            if name in _CONFIG_NAMES:
                if print_[0] != "file":
                    found[rel] = "git configuration the sandbox replaced by a link or folder"
                    continue
                keys = self._examine(rel)
                if keys:
                    found[rel] = f"git configuration the sandbox wrote that runs a program ({', '.join(keys)})"
            elif whole or (name == "hooks" and print_[0] == "dir") or name.endswith(".sample"):
                continue
            else:
                found[rel] = "a git hook the sandbox wrote (the host's git would run it)"

    def _is_hook(self, rel: str, shapes: dict[str, bool]) -> bool:
        parts = _parts(rel)
        if len(parts) < 2 or parts[-1].endswith(".sample"):
            return False
        if parts[-1] == "hooks":  # the folder itself: only when it is not one any more
            holder = "/".join(parts[:-1])
            if _kind_beneath(self.root, rel) == "dir":
                return False
            return parts[-2] == ".git" or self._is_gitdir(holder, shapes)
        if parts[-2] != "hooks":
            return False
        holder = "/".join(parts[:-2])
        return (len(parts) >= 3 and parts[-3] == ".git") or self._is_gitdir(holder, shapes)

    def _is_gitdir(self, folder: str, shapes: dict[str, bool]) -> bool:
        if folder not in shapes:
            shapes[folder] = _gitdir_shaped(self.root, folder)
        return shapes[folder]

    def _examine_unread(self, rel: str) -> list[str]:
        """A changed path the journal's scan did not read: a folder, a link, a special file
        (nothing to read), or a file over the journal's cap. Without a journal, any."""
        if self.journaled:
            try:
                if not stat.S_ISREG(os.lstat(self.root / rel).st_mode):
                    return []
            except OSError:
                return []
        return self._examine(rel)

    def _examine(self, rel: str) -> list[str]:
        """The dangerous keys of a file the scan did not read (too large, left out, or no
        journal), read without following a link: its head first, the rest only when the
        head reads as git configuration."""
        try:
            head, size = _read_beneath(self.root, rel, _HEAD_BYTES)
        except (OSError, PrivatePathRefused):
            return []
        if size <= len(head):
            return dangerous_keys(config_entries(head).entries)
        if not reads_as_config(head):
            return []
        if size > _READ_WHOLE:
            return [f"over {_READ_WHOLE // (1024 * 1024)} MiB of what reads as git configuration, not examined"]
        try:
            data, _ = _read_beneath(self.root, rel, _READ_WHOLE)
        except (OSError, PrivatePathRefused):
            return []
        return dangerous_keys(config_entries(data).entries)

    def _journal_paths(self, plan: list[tuple[str, str, str]]) -> list[str]:
        """The paths the quarantine step journals: old and new name; for a folder the scans
        cover, everything below both; for one they leave out (an envelope turn's ``.git``),
        only the new name, so a revert removes the quarantined copy instead of making an
        empty ``.git``."""
        paths: list[str] = []
        for old, new, _ in plan:
            if _kind_beneath(self.root, old) != "dir":
                paths += [old, new]
            elif self._covered(old):
                below = [r for r in self._changes if r.startswith(old + "/")]
                paths += [old, *below, new, *(new + r[len(old) :] for r in below)]
            else:
                paths.append(new)
        return list(dict.fromkeys(paths))

    def _covered(self, rel: str) -> bool:
        return not any(part in self.skip_dirs for part in _parts(rel))

    def _survey_after(self) -> None:
        before = self._survey or _Survey()
        after = _survey(self.root, self._since)
        self.after_notes.skipped = list(after.skipped)
        recent = set(after.recent)
        for rel, kind in after.git_entries.items():
            old = before.git_entries.get(rel)
            if old is None or old != kind or rel in recent:
                self._changes[rel] = "created" if old is None else "edited"
        for rel in after.marks - before.marks:
            self._changes[rel] = "created"
        for rel in after.recent:
            self._changes.setdefault(rel, "edited")


# -- the file system, never through a link ---------------------------------------------------


def _survey(root: Path, since_ns: int | None) -> _Survey:
    found = _Survey()
    for rel, st in walk_tree(str(root), "\0", _GIT_SKIP, found.skipped):
        name = _name(rel)
        if name == ".git":
            found.git_entries[rel] = _kind_of(st.st_mode)
        elif name in _MARKS:
            found.marks.add(rel)
        if since_ns is not None and st.st_ctime_ns >= since_ns and not stat.S_ISDIR(st.st_mode):
            found.recent.append(rel)
    for rel in found.skipped:
        found.git_entries[rel] = "dir"
    return found


def _probe(root: Path, gitdir: str) -> dict[str, _Fingerprint]:
    """``config``, ``config.worktree``, ``hooks`` and each entry of ``hooks`` (as
    ``hooks/NAME``) of a repository folder, by their ``lstat``; {} when it is not reachable
    without following a link."""
    out: dict[str, _Fingerprint] = {}
    try:
        with open_folder(root, _parts(gitdir)) as fd:
            for name in (*_CONFIG_NAMES, "hooks"):
                with contextlib.suppress(FileNotFoundError):
                    out[name] = _fingerprint(os.stat(name, dir_fd=fd, follow_symlinks=False))
            if out.get("hooks", ("",))[0] == "dir":
                hooks = os.open("hooks", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    with os.scandir(hooks) as entries:
                        for entry in entries:
                            with contextlib.suppress(FileNotFoundError):
                                out[f"hooks/{entry.name}"] = _fingerprint(entry.stat(follow_symlinks=False))
                finally:
                    os.close(hooks)
    except (OSError, PrivatePathRefused):
        return out
    return out


def _fingerprint(st: os.stat_result) -> _Fingerprint:
    return (_kind_of(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


def _kind_of(mode: int) -> str:
    return "dir" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "file"


def _kind_beneath(root: Path, rel: str) -> str | None:
    *folders, name = _parts(rel)
    try:
        with open_folder(root, folders) as fd:
            return _kind_of(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except (OSError, PrivatePathRefused):
        return None


def _gitdir_shaped(root: Path, folder: str) -> bool:
    """Whether git would take ``folder`` for a repository: a ``HEAD``, and ``commondir`` or
    ``objects`` and ``refs``."""
    try:
        with open_folder(root, _parts(folder)) as fd:
            present = set()
            for name in ("HEAD", "commondir", "objects", "refs"):
                with contextlib.suppress(FileNotFoundError):
                    os.stat(name, dir_fd=fd, follow_symlinks=False)
                    present.add(name)
    except (OSError, PrivatePathRefused):
        return False
    return "HEAD" in present and ("commondir" in present or {"objects", "refs"} <= present)


def _gitdir_target(root: Path, rel: str, kind: str) -> str | None:
    """The workspace folder a ``.git`` file (``gitdir: PATH``) or link names, relative;
    None when it lies outside or cannot be read without following a link."""
    *folders, name = _parts(rel)
    try:
        with open_folder(root, folders) as fd:
            if kind == "link":
                target = os.readlink(name, dir_fd=fd)
            else:
                data, _ = _read_at(fd, name, 4096)
                line = data.decode("utf-8", "replace").strip()
                if not line.startswith("gitdir:"):
                    return None
                target = line.removeprefix("gitdir:").strip()
    except (OSError, PrivatePathRefused):
        return None
    full = os.path.normpath(os.path.join(root, *folders, target))
    inside = os.path.relpath(full, root)
    return None if inside == "." or inside.startswith("..") else inside


def _read_beneath(root: Path, rel: str, limit: int) -> tuple[bytes, int]:
    """At most ``limit`` bytes of the regular file ``rel`` and its size, no link followed."""
    *folders, name = _parts(rel)
    with open_folder(root, folders) as fd:
        return _read_at(fd, name, limit)


def _read_at(folder: int, name: str, limit: int) -> tuple[bytes, int]:
    fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", 0
        chunks: list[bytes] = []
        got = 0
        while got < limit and (chunk := os.read(fd, min(1 << 20, limit - got))):
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks), st.st_size
    finally:
        os.close(fd)


def _quarantine(root: Path, rel: str, new: str, reason: str) -> Quarantined:
    *folders, name = _parts(rel)
    try:
        with open_folder(root, folders) as fd:
            _rename_noreplace(fd, name, _name(new))
    except PrivatePathRefused as exc:
        return Quarantined(path=rel, reason=reason, error=str(exc))
    except OSError as exc:
        return Quarantined(path=rel, reason=reason, error=exc.strerror or str(exc))
    return Quarantined(path=rel, reason=reason, moved_to=new)


@functools.cache
def _libc_renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    renameat2: Callable[[int, bytes, int, bytes, int], int] = fn
    return renameat2


def _rename_noreplace(folder: int, old: str, new: str) -> None:
    """Rename the entry ``old`` (never what a link points to) to ``new`` in ``folder``,
    refusing to replace anything already at ``new``."""
    import ctypes

    renameat2 = _libc_renameat2()
    if renameat2 is not None:
        if renameat2(folder, os.fsencode(old), folder, os.fsencode(new), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), old)
    try:
        os.stat(new, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(old, new, src_dir_fd=folder, dst_dir_fd=folder)
        return
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), new)


# -- relative paths -----------------------------------------------------------------------------


def _parts(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p]


def _name(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _depth(rel: str) -> tuple[int, str]:
    return (rel.count("/"), rel)


def _below(rel: str, roots: Iterable[str]) -> bool:
    return any(rel == r or rel.startswith(r + "/") for r in roots)
