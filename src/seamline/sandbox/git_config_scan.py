"""Reading a file as git would read a configuration file, for the keys that make git run a
program.

The host's next ``git`` reads configuration from more places than ``.git/config``: a nested
repository's, a bare repository's, a file named by ``include.path``, a worktree's
``config.worktree``. A sandbox can write all of those, under any name, so seamline reads
every file a sandboxed turn created or changed the way git's parser does
(``config-parse.c``: sections, ``[section "subsection"]``, keys of letters, digits and
``-`` that start with a letter, ``=`` values with quotes, escapes and line continuations,
``#``/``;`` comments) and looks for the keys through which git runs a program, a shell
command or a hook (:func:`dangerous_keys`).

It stops at the first line git would refuse (git refuses the whole file then, and runs
nothing it names), so source code, data and prose end after a line or two: a Python file's
``import os`` is no key, ``{`` no section. What it found before that line still counts.

>>> dangerous_keys(config_entries(b"[core]\\n\\tfsmonitor = touch /tmp/x\\n").entries)
['core.fsmonitor']
>>> dangerous_keys(config_entries(b'[alias]\\n\\tst = status\\n\\tsh = "!sh -c id"\\n').entries)
['alias.sh']
>>> config_entries(b"import os\\n").entries
()
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["ConfigRead", "config_entries", "dangerous_keys", "reads_as_config"]

#: How much of one value is kept: enough to see how it starts (``!`` of a shell alias).
_VALUE_KEPT: Final = 4096
_BOM: Final = b"\xef\xbb\xbf"
# git's own ctype: ASCII only. \v and \f are taken as blanks too (lenient: never fewer keys).
_BLANK: Final = frozenset(b" \t\n\v\f\r")
_HEADER: Final = re.compile(rb'\[([A-Za-z0-9.-]*)(?:[ \t\v\f\r]+"((?:[^"\\\n]|\\[^\n])*)")?\]')
_KEY: Final = re.compile(rb"[A-Za-z][A-Za-z0-9-]*")
_PLAIN_RUN: Final = re.compile(rb'[^"\\\n;#\s]+')
_ESCAPES: Final = {
    ord("t"): ord("\t"),
    ord("b"): ord("\b"),
    ord("n"): ord("\n"),
    ord("\\"): ord("\\"),
    ord('"'): ord('"'),
}
_FALSE: Final = frozenset({"false", "no", "off", "0", ""})
_BOOLEAN: Final = frozenset({"true", "yes", "on", "1", *_FALSE})

# Keys whose value git runs (or that send git to code or configuration elsewhere), by full
# name, lower-cased; a subsection is any text between the first and the last dot.
_RUNS: Final = re.compile(
    r"""^(?:
      core\.(?:fsmonitor|hookspath|sshcommand|pager|editor|askpass|gitproxy|worktree|alternaterefscommand)
    | sequence\.editor | interactive\.difffilter | diff\.external | diff\.guitool | merge\.guitool
    | diff\..+\.(?:command|textconv) | merge\..+\.driver
    | (?:difftool|mergetool|man|browser|guitool)\..+\.(?:cmd|path)
    | filter\..+\.(?:clean|smudge|process)
    | credential\.(?:.+\.)?helper
    | include\.path | includeif\..+\.path
    | uploadpack\.packobjectshook
    | protocol\.(?:.+\.)?allow
    | remote\..+\.(?:uploadpack|receivepack|vcs)
    | gpg\.(?:.+\.)?program
    | sendemail\.(?:.+\.)?(?:smtpserver|tocmd|cccmd|headercmd)
    | trace2\..+ | hook\..+ | instaweb\..+ | lfs\..+\.path
    )$""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class ConfigRead:
    """What git would read from a file: ``(name, value)`` pairs up to the first refused
    byte (``error_at``, None when it read to the end). ``name`` is lower-cased but for the
    subsection of ``[section "Sub"]``; a key without ``=`` has the value None (true)."""

    entries: tuple[tuple[str, str | None], ...]
    error_at: int | None


def config_entries(data: bytes) -> ConfigRead:
    """Parse ``data`` as git's configuration parser does; see the module docstring."""
    if b"\r\n" in data:
        data = data.replace(b"\r\n", b"\n")
    n = len(data)
    i = len(_BOM) if data.startswith(_BOM) else 0
    base = ""  # "section." or "section.subsection.", as git builds it
    entries: list[tuple[str, str | None]] = []
    while i < n:
        c = data[i]
        if c in _BLANK:
            i += 1
            continue
        if c in (0x23, 0x3B):  # '#', ';': a comment to the end of the line
            end = data.find(b"\n", i)
            i = n if end < 0 else end + 1
            continue
        if c == 0x5B:  # '['
            header = _HEADER.match(data, i)
            if header is None or (not header.group(1) and header.group(2) is None):
                return ConfigRead(tuple(entries), i)
            base = header.group(1).decode("ascii").lower()
            if header.group(2) is not None:
                base += "." + re.sub(rb"\\(.)", rb"\1", header.group(2)).decode("utf-8", "replace")
            base += "."
            i = header.end()
            continue
        key = _KEY.match(data, i)
        if key is None:
            return ConfigRead(tuple(entries), i)
        name = base + key.group(0).decode("ascii").lower()
        j = key.end()
        while j < n and data[j] in (0x20, 0x09):
            j += 1
        if j >= n or data[j] == 0x0A:
            entries.append((name, None))
            i = j + 1
            continue
        if data[j] != 0x3D:  # '='
            return ConfigRead(tuple(entries), i)
        value, i = _value(data, j + 1)
        if value is None:
            return ConfigRead(tuple(entries), j)
        entries.append((name, value))
    return ConfigRead(tuple(entries), None)


def _value(data: bytes, i: int) -> tuple[str | None, int]:
    """git's ``parse_value`` from ``i``: the value (None when git refuses it) and where the
    next line starts."""
    n = len(data)
    kept = bytearray()
    quote = False
    spaces = 0
    while i < n:
        c = data[i]
        i += 1
        if c == 0x0A:
            return (None, i) if quote else (kept.decode("utf-8", "replace"), i)
        if not quote and c in (0x23, 0x3B):  # a comment ends the value (not its line)
            end = data.find(b"\n", i)
            return kept.decode("utf-8", "replace"), (n if end < 0 else end + 1)
        if c in _BLANK and not quote:
            if kept:
                spaces += 1
            continue
        if spaces and len(kept) < _VALUE_KEPT:
            kept += b" " * spaces
        spaces = 0
        if c == 0x5C:  # backslash
            if i >= n:
                continue  # at the end git reads a newline: a continuation into nothing
            escaped = data[i]
            i += 1
            if escaped == 0x0A:
                continue
            if escaped not in _ESCAPES:
                return None, i
            if len(kept) < _VALUE_KEPT:
                kept.append(_ESCAPES[escaped])
            continue
        if c == 0x22:  # '"'
            quote = not quote
            continue
        run = _PLAIN_RUN.match(data, i - 1)
        if run is not None and not quote:
            if len(kept) < _VALUE_KEPT:
                kept += run.group(0)[: _VALUE_KEPT - len(kept)]
            i = run.end()
        elif len(kept) < _VALUE_KEPT:
            kept.append(c)
    return (None, i) if quote else (kept.decode("utf-8", "replace"), i)


def dangerous_keys(entries: tuple[tuple[str, str | None], ...] | list[tuple[str, str | None]]) -> list[str]:
    """The names among ``entries`` through which git would run a program (a hook path, a
    shell alias, a filter, an fsmonitor, a pager...), or read configuration or code from
    elsewhere (``include.path``, ``core.worktree``, ``protocol.*.allow``); in order, once each."""
    found: list[str] = []
    for name, value in entries:
        if _is_dangerous(name.lower(), value) and name not in found:
            found.append(name)
    return found


def _is_dangerous(name: str, value: str | None) -> bool:
    text = (value or "").strip()
    if name == "core.fsmonitor":
        return value is None or text.lower() not in _FALSE
    if _RUNS.match(name):
        return True
    section, _, rest = name.partition(".")
    if section == "alias":
        return text.startswith(("!", "-"))  # a shell command, or git options such as -c
    if section == "pager":
        return value is not None and text.lower() not in _BOOLEAN
    if section == "submodule" and rest.endswith(".update"):
        return text.startswith("!")
    return False


def reads_as_config(head: bytes) -> bool:
    """Whether the first bytes of a file (not the whole of it) read as git configuration:
    every complete line is one git accepts, and the cut last line could be one (a header
    or a value cut short)."""
    read = config_entries(head)
    if read.error_at is None:
        return True
    last_line = head.rfind(b"\n")
    if read.error_at <= last_line:
        return False
    # Refused in the cut line: only a cut header ("[") or value ("=") may be the cut's doing.
    return head[read.error_at : read.error_at + 1] in (b"[", b"=")
