"""What the permission service reads in a shell command: the recursive-delete hard denial
and the simple commands a ``command=GLOB`` rule is matched against.

Both read the command with :func:`seamline.tools.shell_parse.read_shell`, so a newline,
``;``, ``&&``, a subshell, ``$(...)``, backticks, ``bash -c '...'``, ``eval`` or an
``env``/``sudo``/``xargs`` prefix hide nothing. What cannot be read fails closed.
"""

from __future__ import annotations

import fnmatch
import glob as globbing
import os
import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from seamline.tools.base import Tool
from seamline.tools.shell_parse import SHELLS, SimpleCommand, read_shell, unwrap
from seamline.tools.shell_programs import note_copies, program_name

__all__ = ["CommandPiece", "command_pieces", "recursive_delete_outside_workspace"]

_VIRTUAL_ROOT: Final = "/\x00workspace"  # stands for "the workspace" when none is known
_DELETE_WORDS: Final = frozenset(
    {"rm", "rmdir", "unlink", "shred", "find", "xargs", "rsync", "-delete", "recursive"}
    # the recursive deletes of interpreters: Python, Node, Ruby, Rust, Perl
    | {"rmtree", "removedirs", "rmSync", "rm_rf", "rm_r", "remove_dir_all", "remove_tree", "deltree"}
)
_RECURSIVE_FLAG: Final = re.compile(r"^(-[A-Za-z]*[rR][A-Za-z]*|--r[a-z-]*)$")
_SAFE_SINKS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_FIND_EXEC: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_DELETERS: Final = frozenset({"rm", "unlink", "rmdir", "shred"})

_PREFIX: Final = "recursive delete outside the workspace"


def recursive_delete_outside_workspace(tool: Tool, arguments: dict[str, Any], workspace: Path | None) -> str | None:
    """A hard denial: a recursive delete (``rm -r``, ``find -delete``, ``find -exec rm``,
    ``xargs rm -r``, ``rsync --delete``) of any path outside the workspace, anywhere in
    the command, or a command that cannot be read and could be one."""
    command = arguments.get("command")
    if tool.tool_class != "execute" or not isinstance(command, str):
        return None
    real = workspace is not None
    root = os.path.realpath(workspace) if workspace is not None else _VIRTUAL_ROOT
    reading = read_shell(command, cwd=root)
    redirected: str | None = None  # a link or move made earlier in the command
    for cmd in reading.commands:
        reason = _recursive_delete(cmd, root, real)
        if reason is not None:
            return reason
        if redirected is not None and _recursive_delete(cmd, _NOWHERE, False) is not None:
            return f"{_PREFIX} cannot be ruled out: {redirected} earlier in the command may lead the delete out"
        redirected = redirected or _link_or_move_from_outside(cmd, root, real)
    if reading.opaque and _mentions_deletion(command):
        return f"{_PREFIX} cannot be ruled out: {reading.opaque[0]}"
    return None


def _recursive_delete(cmd: SimpleCommand, root: str, real: bool) -> str | None:
    argv, plain, wrapped = unwrap(cmd.words, cmd.literal)
    if not argv or not plain[0]:
        return None  # reported as opaque by the reader
    cwds = frozenset({None}) if wrapped.cwd_changed else cmd.cwds
    if wrapped.split and _mentions_deletion(" ".join(argv)):
        return f"{_PREFIX} cannot be ruled out: env -S splits its command at run time"
    return _argv_delete(argv, plain, cwds, root, real, via=wrapped.via)


def _argv_delete(
    argv: Sequence[str],
    plain: Sequence[bool],
    cwds: frozenset[str | None],
    root: str,
    real: bool,
    *,
    via: Sequence[str] = (),
    depth: int = 0,
) -> str | None:
    verb = posixpath.basename(argv[0])
    if verb == "rm":
        flags, targets = _rm_arguments(argv[1:], plain[1:])
        if any(not p for p in plain[1 : _options_end(argv)]):
            return (
                f"{_PREFIX} cannot be ruled out: rm with a word built at run time before `--` "
                "(it may hold -r and more paths; put `--` before paths built at run time)"
            )
        if not any(_recursive_flag(f) for f in flags):
            return None
        if "xargs" in via:
            return f"{_PREFIX} cannot be ruled out: xargs feeds rm -r paths read at run time"
        return _first_outside("rm " + " ".join(flags), targets, cwds, root, real)
    if verb == "find":
        return _find(argv, plain, cwds, root, real)
    if verb == "rsync" and any(w.startswith("--delete") or w == "--remove-source-files" for w in argv[1:]):
        operands = [(w, p) for w, p in zip(argv[1:], plain[1:], strict=True) if not w.startswith("-")]
        return _first_outside("rsync --delete", operands[-1:], cwds, root, real) if operands else None
    if verb in _DELETING_PROGRAMS:
        return _DELETING_PROGRAMS[verb](argv, plain, cwds, root, real)
    if verb in _NO_EXEC or depth > 4:
        return None
    # An unknown program in front of a delete (a wrapper seamline does not know): judge
    # the delete as if run directly.
    for j in range(1, len(argv)):
        if plain[j] and posixpath.basename(argv[j]) in ("rm", "find", "rsync", *_DELETING_PROGRAMS):
            reason = _argv_delete(argv[j:], plain[j:], cwds, root, real, via=via, depth=depth + 1)
            if reason is not None:
                return f"{reason} (run through {verb})"
    return None


def _options_end(argv: Sequence[str]) -> int:
    return next((i for i, w in enumerate(argv) if w == "--"), len(argv))


def _operands(argv: Sequence[str], plain: Sequence[bool], start: int = 1) -> list[tuple[str, bool]]:
    return [(w, p) for w, p in zip(argv[start:], plain[start:], strict=True) if not (p and w.startswith("-"))]


def _git(argv: Sequence[str], plain: Sequence[bool], cwds: frozenset[str | None], root: str, real: bool) -> str | None:
    """``git clean`` and ``git rm -r`` delete in the repository named by ``-C``,
    ``--work-tree`` or the folder; a ``!`` alias runs a shell."""
    i = 1
    where: list[tuple[str, bool]] = []
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        name, eq, value = word.partition("=")
        if word in ("-C", "--git-dir", "--work-tree") and i + 1 < len(argv):
            where.append((argv[i + 1], plain[i + 1]))
            i += 2
            continue
        if eq and name in ("--git-dir", "--work-tree"):
            where.append((value, plain[i]))
        if word in ("-c", "--config-env") and i + 1 < len(argv):
            setting = argv[i + 1]
            if not plain[i + 1] or (setting.lower().startswith("alias.") and _runs_shell_alias(setting)):
                return f"{_PREFIX} cannot be ruled out: git -c {setting} defines an alias that runs a shell"
            i += 2
            continue
        i += 1
    sub = argv[i] if i < len(argv) else ""
    rest, rest_plain = argv[i + 1 :], plain[i + 1 :]
    if sub == "config" and any(w.lower().startswith("alias.") for w in rest) and _runs_shell_alias(" ".join(rest)):
        return f"{_PREFIX} cannot be ruled out: git config defines an alias that runs a shell"
    deletes = sub == "clean" and not any(w in ("-n", "--dry-run") for w in rest)
    deletes = deletes or (sub == "rm" and any(_recursive_flag(w) for w in rest if w.startswith("-")))
    deletes = deletes and "--cached" not in rest
    if not deletes:
        return None
    if not all(rest_plain):
        return f"{_PREFIX} cannot be ruled out: git {sub} with a word built at run time"
    reason = _first_outside(f"git {sub}", where, cwds, root, real)
    if reason is not None:
        return reason
    inner = cwds
    for folder, _plain in where:
        inner = frozenset(None if c is None else posixpath.normpath(posixpath.join(c, folder)) for c in inner)
    targets = [(w, True) for w in rest if not w.startswith("-")] or [(".", True)]
    return _first_outside(f"git {sub}", targets, inner, root, real)


def _runs_shell_alias(text: str) -> bool:
    return "!" in text and _mentions_deletion(text.replace("!", " "))


def _awk(argv: Sequence[str], plain: Sequence[bool], cwds: frozenset[str | None], root: str, real: bool) -> str | None:
    text = " ".join(argv[1:])
    if re.search(r"system\s*\(|\|\s*\"|\|&|\bgetline\b", text) and _mentions_deletion(text):
        return f"{_PREFIX} cannot be ruled out: {argv[0]} runs commands (system(), pipes) that may delete"
    return None


_SED_EXEC: Final = re.compile(r"(^|[\s;{}0-9$,!])e(\s|$|;|})|/[gpIiMm0-9w]*e[gpIiMm0-9]*($|[\s;}])")


def _sed(argv: Sequence[str], plain: Sequence[bool], cwds: frozenset[str | None], root: str, real: bool) -> str | None:
    text = " ".join(argv[1:])
    if _SED_EXEC.search(text) and _mentions_deletion(text):
        return f"{_PREFIX} cannot be ruled out: sed's e command runs a shell"
    return None


def _tar(argv: Sequence[str], plain: Sequence[bool], cwds: frozenset[str | None], root: str, real: bool) -> str | None:
    if "--remove-files" not in argv[1:]:
        return None
    # Every operand (members, the archive, -C folders) counts as a path it may delete.
    return _first_outside("tar --remove-files", _operands(argv, plain), cwds, root, real)


def _zip(argv: Sequence[str], plain: Sequence[bool], cwds: frozenset[str | None], root: str, real: bool) -> str | None:
    flags = [w for w in argv[1:] if w.startswith("-")]
    if any(w in ("-TT", "--unzip-command") or w.startswith("--unzip-command=") for w in flags):
        if _mentions_deletion(" ".join(argv[1:])):
            return f"{_PREFIX} cannot be ruled out: zip -TT runs a command"
    moves = any(w == "--move" or (not w.startswith("--") and "m" in w[1:]) for w in flags)
    if not moves:
        return None
    return _first_outside("zip -m", _operands(argv, plain), cwds, root, real)


_Check = Callable[[Sequence[str], Sequence[bool], frozenset[str | None], str, bool], str | None]
_DELETING_PROGRAMS: Final[dict[str, _Check]] = {
    "git": _git,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "sed": _sed,
    "gsed": _sed,
    "tar": _tar,
    "gtar": _tar,
    "zip": _zip,
}
# Programs that never run their arguments: a word `rm` after them is text.
_NO_EXEC: Final = frozenset(
    {"echo", "printf", "grep", "egrep", "fgrep", "rg", "ag", "ack", "cat", "ls", "test", "[", "true", "false"}
    | {"man", "which", "type", "whatis", "apropos", "info", "help", "whereis", "hash", "alias", "unalias"}
    | {"export", "declare", "local", "readonly", "set", "unset", "read", "wc", "head", "tail", "less", "more"}
    | {"diff", "cmp", "sort", "uniq", "tr", "cut", "stat", "file", "touch", "mkdir", "cp", "ln", "mv", "chmod"}
    | {"chown", "basename", "dirname", "realpath", "readlink", "history", "complete", "compgen", "logger"}
)
_LINKERS: Final = frozenset({"ln", "link", "mv", "cp", "rename", "install", "mount"})
_NOWHERE: Final = "/\x00nowhere"  # a root nothing is inside: any recursive delete is "outside"


def _link_or_move_from_outside(cmd: SimpleCommand, root: str, real: bool) -> str | None:
    """``ln``/``mv``/``cp`` (links or moves) whose source lies outside: a later delete of
    what it made may reach outside although its path reads as inside."""
    argv, plain, _wrapped = unwrap(cmd.words, cmd.literal)
    if not argv or not plain[0] or posixpath.basename(argv[0]) not in _LINKERS:
        return None
    verb = posixpath.basename(argv[0])
    if verb == "cp" and not any(w.startswith("-") and ("s" in w or "l" in w) for w in argv[1:]):
        return None  # a plain copy brings no link
    operands = _operands(argv, plain)
    sources = operands[:-1] if len(operands) > 1 else operands
    if verb == "mount" or _first_outside(verb, sources, cmd.cwds, root, real) is not None:
        return f"{verb} {' '.join(w for w, _p in sources)}"
    return None


def _rm_arguments(args: Sequence[str], plain: Sequence[bool]) -> tuple[list[str], list[tuple[str, bool]]]:
    flags: list[str] = []
    targets: list[tuple[str, bool]] = []
    options_end = False
    for word, is_plain in zip(args, plain, strict=True):
        if not options_end and word == "--":
            options_end = True
        elif not options_end and word.startswith("-") and word != "-" and is_plain:
            flags.append(word)  # GNU rm takes options anywhere before --
        else:
            targets.append((word, is_plain))
    return flags, targets


def _find(argv: Sequence[str], plain: Sequence[bool], cwds: frozenset[str | None], root: str, real: bool) -> str | None:
    i = 1
    while i < len(argv) and (argv[i] in ("-H", "-L", "-P") or argv[i].startswith(("-D", "-O"))):
        i += 2 if argv[i] == "-D" else 1
    starts: list[tuple[str, bool]] = []
    while i < len(argv) and not argv[i].startswith(("-", "(", "!", ",")):
        starts.append((argv[i], plain[i]))
        i += 1
    follows = any(w == "-L" for w in argv[1:i]) or "-follow" in argv[i:]
    expression = list(argv[i:])
    deletes = "-delete" in expression
    for j, word in enumerate(expression[:-1]):
        if word in _FIND_EXEC:
            run = posixpath.basename(expression[j + 1])
            rest = " ".join(expression[j + 1 :])
            if run in _FIND_DELETERS or (run in SHELLS and _mentions_deletion(rest)):
                deletes = True
    if not deletes:
        return None
    if follows:
        # -L (or -follow) descends through links: a link anywhere below a start, one already
        # in the workspace included, takes the delete out of it.
        return f"{_PREFIX} cannot be ruled out: find -L follows links out of the folders it starts in"
    return _first_outside("find -delete", starts or [(".", True)], cwds, root, real)


def _first_outside(
    what: str, targets: Sequence[tuple[str, bool]], cwds: frozenset[str | None], root: str, real: bool
) -> str | None:
    for target, is_plain in targets:
        if not is_plain:
            return f"{_PREFIX}: {what} {target} (a path built at run time may be anywhere)"
        if _outside(target, cwds, root, real):
            return f"{_PREFIX}: {what} {target}"
    return None


def _outside(target: str, cwds: frozenset[str | None], root: str, real: bool) -> bool:
    parts = target.split("/")
    # A pattern that can match `..` (`.*`, `.?`, `.[.]`) reaches the parent.
    parts = [".." if any(c in p for c in "*?[") and _glob_matches_dotdot(p) else p for p in parts]
    target = "/".join(parts)
    for cwd in cwds:
        if cwd is None and not target.startswith("/"):
            return True
        joined = posixpath.join(cwd or "/", target)
        candidates = [joined]
        if real and any(c in target for c in "*?["):
            candidates += globbing.glob(joined)
        for path in candidates:
            resolved = _as_rm_sees(path) if real else posixpath.normpath(path)
            if resolved == posixpath.dirname(resolved):  # the file system root
                return True
            if resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
                return True
    return False


def _as_rm_sees(path: str) -> str:
    """Where a delete of ``path`` lands: links in the folders are followed, a link as the
    last part is removed itself (unless a trailing ``/`` says its target)."""
    head, tail = posixpath.split(path)
    if tail in ("", ".", ".."):
        return os.path.realpath(path)
    return posixpath.join(os.path.realpath(head), tail)


def _glob_matches_dotdot(part: str) -> bool:
    # A shell pattern matches a leading dot only when it starts with one.
    return part.startswith(".") and fnmatch.fnmatchcase("..", part)


def _recursive_flag(flag: str) -> bool:
    if flag.startswith("--"):
        return len(flag) > 2 and "recursive".startswith(flag[2:])  # GNU takes any unique prefix
    return "r" in flag or "R" in flag


def _mentions_deletion(text: str) -> bool:
    """Whether text that could not be read may still delete recursively."""
    bare = re.sub(r"[\"'\\]", "", text)
    for word in re.findall(r"[A-Za-z0-9_+-]+", bare):
        if word in _DELETE_WORDS or _RECURSIVE_FLAG.match(word):
            return True
    return False


# -- command rules -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandPiece:
    """One simple command of a shell call, as a ``command=GLOB`` rule sees it.

    ``normalized`` is the command's words (assignments first) joined as a shell would
    quote them; ``plain`` is True only when the words are plain text and every
    redirection stays in the workspace, which an allow rule requires. ``program`` is the
    command actually run: wrappers (``env``, ``nice``, ``timeout 5``, ``command``, ``sudo``
    ...) and assignments dropped, the program's path cut to its name (``/bin/rm`` is
    ``rm``); deny and ask rules match it too."""

    text: str
    normalized: str
    plain: bool
    program: str = ""


def command_pieces(command: str, workspace: Path | None) -> list[CommandPiece]:
    """The simple commands of ``command`` that rules judge one by one. A part that cannot
    be read comes as one piece that no allow pattern matches."""
    root = os.path.realpath(workspace) if workspace is not None else _VIRTUAL_ROOT
    reading = read_shell(command, cwd=root)
    pieces: list[CommandPiece] = []
    made: dict[str, str] = {}  # names this command made by copying or linking a program
    for cmd in reading.commands:
        words = [*cmd.assignments, *cmd.words]
        normalized = " ".join(shlex.quote(w) if w != shlex.quote(w) else w for w in words)
        plain = cmd.plain and bool(cmd.words) and _redirects_inside(cmd, root, workspace is not None)
        argv, _literal, _wrapped = unwrap(cmd.words, cmd.literal)
        if argv:
            cwds = cmd.cwds if workspace is not None else frozenset({None})
            argv = [program_name(argv[0], cwds=cwds, aliases=made), *argv[1:]]
            note_copies(argv, made)
        program = " ".join(shlex.quote(w) if w != shlex.quote(w) else w for w in argv)
        pieces.append(CommandPiece(cmd.text, normalized, plain, program))
    if reading.opaque or not pieces:
        pieces.append(CommandPiece(command, command, False))
    return pieces


def _redirects_inside(cmd: SimpleCommand, root: str, real: bool) -> bool:
    for r in cmd.redirects:
        if not r.plain:
            return False
        if r.target is None or r.target in _SAFE_SINKS:
            continue
        if _outside(r.target, cmd.cwds, root, real):
            return False
    return True
