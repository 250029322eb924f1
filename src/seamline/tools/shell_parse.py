"""Read a shell command the way a shell would: every simple command it runs.

``bashlex`` parses the text; a walk visits every simple command of every list, pipeline,
subshell, compound command, loop, function body, command and process substitution, and
the text handed to ``sh -c`` / ``bash -c`` / ``eval`` or to a shell's here-document.
Each simple command comes with the working folders it may run in (a ``cd`` adds its
target for what follows; a ``cd`` that fails leaves the folder as it was, so both are
kept), its redirections, and whether each word is plain text or built at run time.

What cannot be read is said, not guessed: :attr:`ShellReading.opaque` lists the parts
that could not be understood (text the parser refuses, a command name built at run time,
``eval`` of a variable, a shell reading commands from a pipe). Callers fail closed on them.

>>> reading = read_shell("cd sub && rm -rf build", cwd="/ws")
>>> [(c.words, sorted(c.cwds)) for c in reading.commands][1]
(('rm', '-rf', 'build'), ['/ws', '/ws/sub'])
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["Redirect", "ShellReading", "SimpleCommand", "read_shell", "unwrap"]

_MAX_DEPTH: Final = 6  # nested `sh -c` / eval / substitutions before giving up (opaque)
_MAX_CWDS: Final = 32
_MAX_TEXT: Final = (
    64 * 1024
)  # longer commands are not parsed (the parser slows down): opaque  # possible working folders tracked before "unknown"
_BRACE_EXPANSION: Final = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_TEXT_OPTIONS: Final[dict[str, frozenset[str]]] = {
    "su": frozenset({"-c", "--command", "--session-command"}),
    "runuser": frozenset({"-c", "--command", "--session-command"}),
    "script": frozenset({"-c", "--command"}),
    "flock": frozenset({"-c", "--command"}),
}
_INTERPRETER: Final = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby|node|nodejs|deno|bun|php|lua[0-9.]*|tclsh|Rscript)$"
)
_INLINE_CODE: Final = frozenset({"-c", "-e", "-E", "-r", "--eval", "--command"})
SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "fish", "yash", "posh"})


_bashlex: ModuleType | None = None


def _parser() -> ModuleType:
    """bashlex, imported when the first command is read (it costs a fifth of a second to
    import, and most runs never judge a shell command), with its one known hang guarded."""
    global _bashlex
    if _bashlex is None:
        import bashlex
        import bashlex.errors
        import bashlex.subst

        expand = bashlex.subst._paramexpand

        def guarded(parserobj: Any, string: str, sindex: int) -> Any:
            # bashlex 0.18 loops forever on `${` without a closing `}` inside a word (for
            # example in `$' ${ $'`): it takes find()'s -1 as the end. Refuse such a word.
            if string[sindex + 1 : sindex + 2] == "{" and string.find("}", sindex + 2) < 0:
                raise bashlex.errors.ParsingError("bad substitution: no closing '}'", string, sindex)
            return expand(parserobj, string, sindex)

        bashlex.subst._paramexpand = guarded
        _bashlex = bashlex
    return _bashlex


@dataclass(frozen=True, slots=True)
class Redirect:
    """One redirection: ``op`` as written; ``target`` the file when it is plain text
    (None for a descriptor copy such as ``2>&1``); ``plain`` False when the target is
    built at run time; ``heredoc`` the here-document or here-string text."""

    op: str
    target: str | None
    plain: bool = True
    heredoc: str | None = None


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command: its words (quotes removed), which of them are plain text,
    the ``NAME=value`` assignments before it, its redirections (its own and those of the
    compound commands around it), the folders it may run in (``None``: unknown), its
    source text, how deep it is nested, and whether its input comes from a pipe."""

    words: tuple[str, ...]
    literal: tuple[bool, ...]
    assignments: tuple[str, ...]
    redirects: tuple[Redirect, ...]
    cwds: frozenset[str | None]
    text: str
    depth: int = 0
    piped_stdin: bool = False
    assignments_plain: bool = True

    @property
    def plain(self) -> bool:
        """Every word and assignment is plain text (nothing expanded at run time)."""
        return all(self.literal) and self.assignments_plain


@dataclass(frozen=True, slots=True)
class ShellReading:
    commands: tuple[SimpleCommand, ...]
    opaque: tuple[str, ...] = ()


@dataclass(slots=True)
class _Walk:
    commands: list[SimpleCommand] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=256)
def read_shell(command: str, *, cwd: str | None) -> ShellReading:
    """Every simple command ``command`` runs, starting in ``cwd`` (an absolute POSIX path,
    or None when unknown); never raises on any input. (Cached: the hard denial and the
    rules read the same command.)"""
    if len(command) > _MAX_TEXT:
        return ShellReading((), (f"a command over {_MAX_TEXT} characters is not read",))
    walk = _Walk()
    _read(command, frozenset({cwd}), walk, depth=0, redirects=())
    return ShellReading(tuple(walk.commands), tuple(walk.opaque))


def _read(
    source: str, cwds: frozenset[str | None], walk: _Walk, *, depth: int, redirects: tuple[Redirect, ...]
) -> frozenset[str | None]:
    if depth > _MAX_DEPTH:
        walk.opaque.append("shell text nested too deeply to read")
        return cwds
    if not source.strip():
        return cwds
    try:
        trees = _parser().parse(source)
    except RecursionError:
        walk.opaque.append("shell text nested too deeply to read")
        return cwds
    except Exception as exc:  # noqa: BLE001 - bashlex raises many kinds; any of them means "cannot read"
        walk.opaque.append(f"the shell text cannot be parsed ({type(exc).__name__}: {str(exc)[:80]})")
        return cwds
    walker = _Walker(source, walk, depth)
    try:
        for tree in trees:
            cwds = walker.node(tree, cwds, redirects=redirects)
    except RecursionError:
        walk.opaque.append("shell text nested too deeply to read")
    return cwds


class _Walker:
    def __init__(self, source: str, walk: _Walk, depth: int) -> None:
        self.source = source
        self.walk = walk
        self.depth = depth
        self.in_loop = 0

    def node(
        self,
        node: Any,
        cwds: frozenset[str | None],
        *,
        redirects: tuple[Redirect, ...],
        piped: bool = False,
    ) -> frozenset[str | None]:
        kind = getattr(node, "kind", None)
        if kind == "command":
            return self.command(node, cwds, redirects=redirects, piped=piped)
        if kind == "list":
            for part in node.parts:
                cwds = self.node(part, cwds, redirects=redirects)
            return cwds
        if kind == "pipeline":
            commands = [p for p in node.parts if getattr(p, "kind", None) not in ("pipe", "reservedword")]
            if len(commands) == 1:
                return self.node(commands[0], cwds, redirects=redirects, piped=piped)
            for i, part in enumerate(commands):  # each part of a pipeline runs in a subshell
                self.node(part, cwds, redirects=redirects, piped=piped or i > 0)
            return cwds
        if kind == "compound":
            own = redirects + self.redirects(getattr(node, "redirects", []) or [], cwds)
            parts = list(node.list)
            subshell = bool(parts) and getattr(parts[0], "kind", None) == "reservedword" and parts[0].word == "("
            after = cwds
            for part in parts:
                after = self.node(part, after, redirects=own, piped=piped)
            return cwds if subshell else after
        if kind in ("if", "for", "while", "until"):
            loop = kind != "if"
            self.in_loop += loop
            try:
                for part in node.parts:
                    if getattr(part, "kind", None) == "word":
                        self.word_substitutions(part, cwds)
                    else:
                        cwds = self.node(part, cwds, redirects=redirects)
            finally:
                self.in_loop -= loop
            return cwds
        if kind == "function":
            # The body runs when called; read it in place (its `cd` counts from here on).
            for part in node.parts:
                if getattr(part, "kind", None) not in ("word", "reservedword"):
                    cwds = self.node(part, cwds, redirects=redirects)
            return cwds
        if kind in ("reservedword", "operator", "pipe", None):
            return cwds
        self.walk.opaque.append(f"unsupported shell construct: {kind}")
        return cwds

    # -- simple commands ---------------------------------------------------------------

    def command(
        self, node: Any, cwds: frozenset[str | None], *, redirects: tuple[Redirect, ...], piped: bool
    ) -> frozenset[str | None]:
        words: list[str] = []
        literal: list[bool] = []
        assignments: list[str] = []
        assignments_plain = True
        own: list[Any] = []
        for part in node.parts:
            kind = getattr(part, "kind", None)
            if kind == "word":
                self.word_substitutions(part, cwds)
                words.append(part.word)
                literal.append(_plain_word(part))
            elif kind == "assignment":
                self.word_substitutions(part, cwds)
                assignments.append(part.word)
                assignments_plain = assignments_plain and _plain_word(part)
            elif kind == "redirect":
                own.append(part)
        all_redirects = redirects + self.redirects(own, cwds)
        start, end = node.pos
        cmd = SimpleCommand(
            words=tuple(words),
            literal=tuple(literal),
            assignments=tuple(assignments),
            redirects=all_redirects,
            cwds=cwds,
            text=self.source[start:end],
            depth=self.depth,
            piped_stdin=piped,
            assignments_plain=assignments_plain,
        )
        self.walk.commands.append(cmd)
        return self.effects(cmd)

    def redirects(self, nodes: Iterable[Any], cwds: frozenset[str | None]) -> tuple[Redirect, ...]:
        out: list[Redirect] = []
        for r in nodes:
            target: Any = getattr(r, "output", None)
            heredoc = getattr(r, "heredoc", None)
            op = str(getattr(r, "type", ""))
            if heredoc is not None:
                text = _heredoc_body(heredoc.value)
                quoted = target is not None and getattr(target, "kind", None) == "word" and _quoted(self.source, target)
                if not quoted and ("$(" in text or "`" in text):
                    _read(text, cwds, self.walk, depth=self.depth + 1, redirects=())
                out.append(Redirect(op, None, True, text))
            elif getattr(target, "kind", None) == "word":
                self.word_substitutions(target, cwds)
                plain = _plain_word(target)
                if op == "<<<":
                    out.append(Redirect(op, None, plain, target.word))
                else:
                    out.append(Redirect(op, target.word, plain))
            else:
                out.append(Redirect(op, None))  # a descriptor copy: 2>&1, >&2
        return tuple(out)

    def word_substitutions(self, word: Any, cwds: frozenset[str | None]) -> None:
        for part in getattr(word, "parts", None) or []:
            kind = getattr(part, "kind", None)
            if kind in ("commandsubstitution", "processsubstitution"):
                self.depth += 1
                try:
                    self.node(part.command, cwds, redirects=())  # runs in a subshell: cwd does not leak
                finally:
                    self.depth -= 1
            elif kind in ("word", "parameter"):
                self.word_substitutions(part, cwds)

    def effects(self, cmd: SimpleCommand) -> frozenset[str | None]:
        """Follow what a command does to the reading: cd, and text run as commands."""
        argv, plain, wrapped = unwrap(cmd.words, cmd.literal)
        if wrapped.split and not argv:
            self.walk.opaque.append("env -S splits text built at run time")
        if not argv:
            return cmd.cwds
        if not plain[0]:
            self.walk.opaque.append(f"the command name is built at run time: {cmd.words[0]!r}")
            return cmd.cwds
        verb = posixpath.basename(argv[0])
        if verb in ("cd", "pushd", "popd", "chdir"):
            return self.change_dir(verb, argv[1:], plain[1:], cmd)
        if verb == "eval":
            if all(plain[1:]):
                return _read(" ".join(argv[1:]), cmd.cwds, self.walk, depth=self.depth + 1, redirects=())
            self.walk.opaque.append("eval of text built at run time")
            return cmd.cwds
        if verb in SHELLS:
            if "xargs" in wrapped.via:
                self.walk.opaque.append(f"xargs runs {verb} on input read at run time")
            self.shell(argv, plain, cmd)
        elif verb in _TEXT_OPTIONS:
            self.text_option(verb, argv, plain, cmd)
        elif verb == "watch":
            self.watch(argv, plain, cmd)
        elif verb == "find":
            self.find_exec(argv, plain, cmd)
        elif _INTERPRETER.match(verb) and any(w in _INLINE_CODE for w in argv[1:]):
            self.walk.opaque.append(f"inline {verb} code")
        return cmd.cwds

    def nested(self, text: str, cwds: frozenset[str | None], plain: bool, what: str) -> None:
        if plain:
            _read(text, cwds, self.walk, depth=self.depth + 1, redirects=())
        else:
            self.walk.opaque.append(f"{what} runs text built at run time")

    def text_option(self, verb: str, argv: Sequence[str], plain: Sequence[bool], cmd: SimpleCommand) -> None:
        """``su -c TEXT``, ``runuser -c``, ``script -c``, ``flock -c``: TEXT is run by a shell."""
        for i, word in enumerate(argv[1:], 1):
            name, eq, value = word.partition("=")
            if word in _TEXT_OPTIONS[verb] and i + 1 < len(argv):
                self.nested(argv[i + 1], cmd.cwds, plain[i + 1], verb)
            elif eq and name in _TEXT_OPTIONS[verb]:
                self.nested(value, cmd.cwds, plain[i], verb)

    def watch(self, argv: Sequence[str], plain: Sequence[bool], cmd: SimpleCommand) -> None:
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            i += 2 if argv[i] in ("-n", "--interval", "-q", "--equexit") else 1
        if i < len(argv):
            self.nested(" ".join(argv[i:]), cmd.cwds, all(plain[i:]), "watch")

    def find_exec(self, argv: Sequence[str], plain: Sequence[bool], cmd: SimpleCommand) -> None:
        """The command of ``-exec``/``-execdir``/``-ok``/``-okdir`` is a command too."""
        i = 0
        while i < len(argv):
            if argv[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next((j for j in range(i + 1, len(argv)) if argv[j] in (";", "+")), len(argv))
                words, lit = argv[i + 1 : end], plain[i + 1 : end]
                if words:
                    # -execdir runs in each found file's folder: anywhere below the start points.
                    cwds = cmd.cwds if argv[i] in ("-exec", "-ok") else frozenset({None})
                    self.nested(" ".join(shlex.quote(w) for w in words), cwds, all(lit), "find -exec")
                i = end
            i += 1

    def change_dir(
        self, verb: str, args: Sequence[str], plain: Sequence[bool], cmd: SimpleCommand
    ) -> frozenset[str | None]:
        operands = [(a, p) for a, p in zip(args, plain, strict=True) if not (a.startswith("-") and len(a) > 1)]
        if verb == "popd" or not operands or not operands[0][1] or operands[0][0] in ("-", "~"):
            new: set[str | None] = {None}  # home, the previous folder, or built at run time: unknown
        else:
            target = operands[0][0]
            via_cdpath = "CDPATH" in os.environ or any(a.startswith("CDPATH=") for a in cmd.assignments)
            if via_cdpath and not target.startswith(("/", "./", "../")) and target not in (".", ".."):
                new = {None}
            else:
                new = {
                    None
                    if c is None and not target.startswith("/")
                    else posixpath.normpath(posixpath.join(c or "/", target))
                    for c in cmd.cwds
                }
        if self.in_loop:
            new.add(None)  # a cd repeated by a loop lands anywhere
        together: set[str | None] = set(cmd.cwds) | new  # a cd that fails leaves the folder as it was
        if len(together) > _MAX_CWDS:
            together = {None}
        return frozenset(together)

    def shell(self, argv: Sequence[str], plain: Sequence[bool], cmd: SimpleCommand) -> None:
        i, has_c = 1, False
        while i < len(argv) and argv[i].startswith(("-", "+")) and argv[i] not in ("-", "--"):
            word = argv[i]
            if word in ("-o", "+o", "--rcfile", "--init-file", "-O", "+O"):
                i += 2
                continue
            if not word.startswith("--") and "c" in word[1:]:
                has_c = True
            i += 1
        if i < len(argv) and argv[i] == "--":
            i += 1
        if has_c:
            if i >= len(argv):
                return
            if not plain[i]:
                self.walk.opaque.append(f"{argv[0]} -c runs text built at run time")
                return
            _read(argv[i], cmd.cwds, self.walk, depth=self.depth + 1, redirects=())
            return
        if i < len(argv):
            return  # a script file: its text is not part of the command
        fed = [r for r in cmd.redirects if r.op in ("<<", "<<-", "<<<") and r.heredoc is not None]
        if fed:
            if all(r.plain for r in fed):
                for r in fed:
                    _read(r.heredoc or "", cmd.cwds, self.walk, depth=self.depth + 1, redirects=())
            else:
                self.walk.opaque.append(f"{argv[0]} reads commands built at run time")
        elif cmd.piped_stdin:
            self.walk.opaque.append(f"{argv[0]} reads commands from a pipe")


# -- wrappers: sudo, env, nice, xargs, ... -------------------------------------------------

# The options of each wrapper that take a separate argument, and how many operands come
# before the command it runs.
_WRAPPERS: Final[dict[str, tuple[frozenset[str], int]]] = {
    "sudo": (frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "--user", "--group"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "unbuffer": (frozenset(), 0),
    "nocache": (frozenset(), 0),
    "busybox": (frozenset(), 0),
    # Issue 28: more programs that run the command after them.
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "flock": (frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "prlimit": (frozenset({"-p", "--pid", "-o", "--output"}), 0),
    "unshare": (frozenset({"-S", "--setuid", "-G", "--setgid", "-R", "--root", "-w", "--wd"}), 0),
    "setpriv": (
        frozenset(
            {"--reuid", "--regid", "--ruid", "--rgid", "--euid", "--egid", "--groups", "--inh-caps"}
            | {"--ambient-caps", "--bounding-set", "--securebits", "--pdeathsig", "--selinux-label"}
            | {"--apparmor-profile", "--landlock-access", "--landlock-rule"}
        ),
        0,
    ),
    "strace": (frozenset({"-o", "-e", "-p", "-u", "-E", "-s", "-a", "-b", "-I", "-O", "-P", "-S", "-X"}), 0),
    "ltrace": (frozenset({"-o", "-e", "-p", "-u", "-s", "-a", "-n", "-l", "-L", "-x", "-A", "-D"}), 0),
    "fakeroot": (frozenset({"-l", "--lib", "--faked", "-s", "-i", "-b"}), 0),
    "faketime": (frozenset({"-m", "-f", "-p"}), 1),
    "catchsegv": (frozenset(), 0),
    # GNU parallel runs its command once per argument, as xargs does.
    "parallel": (
        frozenset({"-j", "--jobs", "-S", "--sshlogin", "-a", "--arg-file", "-d", "--delimiter", "-n", "-N", "-L"}),
        0,
    ),
    "xargs": (
        frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-args"}),
        0,
    ),
}


_ROOT_MOVES: Final = frozenset({"-R", "--root", "-w", "--wd"})


@dataclass(frozen=True, slots=True)
class Wrapped:
    """What the wrappers around a command change: its input comes from ``xargs``, its
    folder was changed (``env -C``), or its arguments were split from a string (``env -S``)."""

    via: tuple[str, ...] = ()
    cwd_changed: bool = False
    split: bool = False


def unwrap(words: Sequence[str], literal: Sequence[bool]) -> tuple[list[str], list[bool], Wrapped]:
    """The command a chain of wrappers (``sudo env A=1 nice -n 5 rm ...``) really runs."""
    argv, plain = list(words), list(literal)
    via: list[str] = []
    cwd_changed = split = False
    for _ in range(16):
        if not argv or not plain[0]:
            break
        name = posixpath.basename(argv[0])
        if name not in _WRAPPERS or (name == "command" and any(w in ("-v", "-V") for w in argv[1:2])):
            break
        if name == "flock" and any(w in ("-c", "--command") or w.startswith("--command=") for w in argv[1:]):
            break  # flock FILE -c TEXT: the text is read as shell text
        if name == "chroot" or (name == "unshare" and any(w.split("=", 1)[0] in _ROOT_MOVES for w in argv[1:])):
            cwd_changed = True  # paths are read against another root
        with_arg, operands = _WRAPPERS[name]
        via.append(name)
        i = 1
        while i < len(argv):
            word = argv[i]
            if word == "--":
                i += 1
                break
            if name == "env" and "=" in word and not word.startswith("-"):
                i += 1
                continue
            if not word.startswith("-") or word == "-":
                break
            if name == "env" and word.split("=", 1)[0] in ("-C", "--chdir"):
                cwd_changed = True
            if name == "env" and (word.startswith("-S") or word.split("=", 1)[0] == "--split-string"):
                text, text_plain = _split_operand(word, argv, plain, i)
                try:
                    pieces = shlex.split(text) if text_plain else None
                except ValueError:
                    pieces = None
                if pieces is None:
                    split = True
                    argv, plain = [], []
                    break
                step = 2 if word in ("-S", "--split-string") else 1
                argv = argv[:i] + pieces + argv[i + step :]
                plain = plain[:i] + [True] * len(pieces) + plain[i + step :]
                continue
            i += 2 if word in with_arg else 1
        i += operands
        argv, plain = argv[i:], plain[i:]
    return argv, plain, Wrapped(tuple(via), cwd_changed, split)


def _split_operand(word: str, argv: Sequence[str], plain: Sequence[bool], i: int) -> tuple[str, bool]:
    """The string of ``env -S STRING``, ``-SSTRING`` or ``--split-string=STRING``."""
    if word in ("-S", "--split-string"):
        return (argv[i + 1], plain[i + 1]) if i + 1 < len(argv) else ("", True)
    return (word.split("=", 1)[1] if word.startswith("--") else word[2:]), plain[i]


# -- words -------------------------------------------------------------------------------------


def _plain_word(word: Any) -> bool:
    """A word is plain when nothing in it is expanded at run time."""
    if getattr(word, "parts", None):
        return False  # parameter, command or process substitution, tilde
    return not _BRACE_EXPANSION.search(word.word)


def _heredoc_body(value: str) -> str:
    lines = value.split("\n")
    return "\n".join(lines[:-1]) if len(lines) > 1 else value


def _quoted(source: str, word: Any) -> bool:
    start, end = word.pos
    return any(q in source[start:end] for q in ("'", '"', "\\"))
