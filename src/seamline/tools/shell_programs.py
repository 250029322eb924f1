"""Which program a simple command really runs, for the rules that name programs.

A deny rule ``command=rm*`` is matched against the program a command runs, its path cut to
the name (``/bin/rm x`` runs ``rm``). The name as written can hide it:

- a pattern the shell expands: ``/bin/r?m x`` runs ``/bin/rm``;
- a link: ``ln -s /bin/rm r`` (in this command or an earlier one), then ``./r x``;
- a copy made in the same command: ``cp /bin/rm ./r; ./r x``.

So the name is read as the shell and the kernel would: a pattern is expanded against the
folder it runs in, a link to a program is followed to the program, and a name that an
earlier ``cp``/``ln``/``install``/``mv`` of the same command made from a program is that
program. A copy made by an earlier call is not known here: rules read text; the sandbox is
the boundary that holds regardless.

>>> aliases: dict[str, str] = {}
>>> note_copies(["cp", "/bin/rm", "./r"], aliases)
>>> program_name("./r", cwds=frozenset({"/w"}), aliases=aliases)
'rm'
"""

from __future__ import annotations

import glob as globbing
import os
import posixpath
from collections.abc import Sequence
from typing import Final

__all__ = ["note_copies", "program_name"]

_COPIERS: Final = frozenset({"cp", "ln", "install", "mv", "rsync"})
_GLOB: Final = frozenset("*?[")
# Options of cp, ln, install, mv and rsync that take the next word as their value.
_OPTION_WITH_VALUE: Final = frozenset({"-m", "--mode", "-o", "--owner", "-g", "--group", "-S", "--suffix", "-e"})


def program_name(word: str, *, cwds: frozenset[str | None], aliases: dict[str, str]) -> str:
    """The name of the program ``word`` runs (see the module docstring)."""
    candidates = [word]
    if _GLOB & set(word):
        for cwd in sorted(c for c in cwds if c is not None) or ["/"]:
            found = sorted(globbing.glob(posixpath.join(cwd, word)))
            if found:
                candidates = [found[0]]  # the shell runs the first match
                break
    path = candidates[0]
    name = posixpath.basename(path) or path
    if "/" in path:
        for cwd in sorted(c for c in cwds if c is not None) or ["/"]:
            full = posixpath.join(cwd, path)
            if os.path.islink(full):
                name = posixpath.basename(os.path.realpath(full)) or name
                break
    # A name this command made by copying a program runs that program (a bare name too:
    # `PATH=.:$PATH r` finds the copy; for a deny rule, reading more into it is the safe side).
    return aliases.get(posixpath.normpath(path), aliases.get(posixpath.basename(path), name))


def note_copies(argv: Sequence[str], aliases: dict[str, str]) -> None:
    """Remember what a ``cp``/``ln``/``install``/``mv``/``rsync`` of a program makes: its
    destination then runs that program (``cp /bin/rm ./r`` makes ``./r`` an ``rm``)."""
    if not argv or posixpath.basename(argv[0]) not in _COPIERS:
        return
    operands: list[str] = []
    folder: str | None = None
    words = iter(argv[1:])
    for word in words:
        if word in ("-t", "--target-directory"):
            folder = next(words, None)
        elif word.startswith("--target-directory="):
            folder = word.split("=", 1)[1]
        elif word in _OPTION_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-") or word == "-":
            operands.append(word)
    if folder is not None:
        sources, target = operands, folder
    elif len(operands) >= 2:
        *sources, target = operands
    else:
        return
    programs = {posixpath.basename(s.rstrip("/")) for s in sources if s}
    if len(programs) != 1:
        return
    program = programs.pop()
    if not program:
        return
    key = posixpath.normpath(target)
    aliases[key] = program
    aliases[posixpath.basename(key)] = program
    # ``cp /bin/rm bin/`` into a folder: the copy keeps its name.
    aliases[posixpath.normpath(posixpath.join(target, program))] = program
