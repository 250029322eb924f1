"""The command guard: path, secret and network policy checked before a command runs.

The guard reads a shell command as text and refuses what plainly aims past the sandbox:
``..`` that leaves ``/workspace``, absolute paths outside the sandbox layout, host paths,
``/proc/<pid>/root`` and its kin, symlinks of the workspace that point out, credential
files, credential variables, writes to ``/inputs`` and, with the network off, network
addresses and tools. A refusal is a classified ``sandbox`` or ``permission`` error raised
before anything starts, so the agent learns why.

The guard is a reading of text and can be fooled by a command built at run time; the
boundary that holds regardless is the sandbox itself (mounts, namespaces, limits). The
guard exists so that refusals are early, explained and classified.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from pathlib import Path
from typing import Final

from seamline.errors import PermissionDenied, SandboxViolation
from seamline.sandbox.policy import SECRET_NAME, SandboxPolicy

__all__ = ["CommandGuard"]

# Absolute prefixes that exist inside the sandbox (system paths are read-only there).
_ALLOWED_PREFIXES: Final = (
    "/workspace",
    "/inputs",
    "/outputs",
    "/tmp",
    "/dev",
    "/proc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
)
_DENIED_PATH: Final = re.compile(
    r"^/proc/[^/]+/(root|cwd|exe|environ|mem|map_files|fd)(/|$)|^/proc/(sys|sysrq-trigger|kcore)|"
    r"^/etc/(shadow|gshadow|sudoers|ssh)|^/dev/(tcp|udp)/"
)
_SENSITIVE_NAME: Final = re.compile(
    r"(^|/)(\.ssh|\.aws|\.gnupg|\.netrc|\.docker|\.kube|\.config/gcloud|id_rsa|id_ed25519|id_ecdsa|id_dsa|"
    r"authorized_keys|known_hosts|\.git-credentials|\.pgpass|\.npmrc|\.pypirc)(/|$)"
)
_ABS_IN_TEXT: Final = re.compile(r"(?<![\w.$:/~-])/[^\s'\"<>|;&()`$]*")
_VAR_REF: Final = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_URL: Final = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://")
_IPV4: Final = re.compile(r"(?<![\d.])(\d{1,3}\.){3}\d{1,3}(?![\d.])")
_IPV6_LOOPBACK: Final = re.compile(r"\[::1?\]|(?<![\w:])::1(?![\w:])")
_NETWORK_TOOLS: Final = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "telnet", "ssh", "scp", "sftp", "ftp", "ping", "socat", "rsync"}
)
_NETWORK_WORDS: Final = re.compile(r"(?<![\w-])(localhost|/dev/tcp/|/dev/udp/)")
# Verbs whose path arguments are written: all of them, or only the last one.
_WRITES_ALL: Final = frozenset({"rm", "rmdir", "touch", "mkdir", "truncate", "chmod", "chown", "tee", "unlink"})
_WRITES_LAST: Final = frozenset({"cp", "mv", "install", "ln", "rsync"})
_SEPARATORS: Final = frozenset({";", "&&", "||", "|", "&", "(", ")", "\n", ";;", "|&"})
_REDIRECTS: Final = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})


class CommandGuard:
    """Checks a shell command against the policy before it runs; see the module docstring."""

    def __init__(
        self,
        *,
        workspace_root: Path,
        policy: SandboxPolicy,
        host_layout: tuple[Path, ...] = (),
    ) -> None:
        """``host_layout``: host folders a backend without mounts (container) uses in place
        of /workspace, /inputs and /outputs; empty for bwrap, whose layout is inside."""
        self.workspace_root = workspace_root
        self.policy = policy
        self.host_layout = tuple(str(p) for p in host_layout)

    def check(self, command: str) -> None:
        """Raise :class:`SandboxViolation` or :class:`PermissionDenied`; return if the command may run."""
        if "\x00" in command:
            raise SandboxViolation("command contains a NUL byte")
        self._check_variables(command)
        # With network.allow the egress proxy is the check (it refuses and reports the rest).
        offline = not self.policy.network and not self.policy.network_allow
        if offline:
            self._check_network_text(command)
        tokens = _tokens(command)
        for match in _ABS_IN_TEXT.finditer(command):
            self._check_absolute(match.group(0))
        for token in tokens:
            self._check_token(token)
        if tokens:
            self._check_writes(tokens)
            if offline:
                self._check_network_tools(tokens)

    def _check_variables(self, command: str) -> None:
        for match in _VAR_REF.finditer(command):
            if SECRET_NAME.search(match.group(1)):
                raise PermissionDenied(
                    f"the command reads ${match.group(1)}: credentials are never visible inside the sandbox"
                )

    def _check_network_text(self, command: str) -> None:
        for pattern, what in ((_URL, "a URL"), (_IPV4, "an IP address"), (_IPV6_LOOPBACK, "an IPv6 address")):
            found = pattern.search(command)
            if found:
                raise SandboxViolation(
                    f"the network is off in this sandbox and the command names {what} ({found.group(0)!r})"
                )
        found = _NETWORK_WORDS.search(command)
        if found:
            raise SandboxViolation(f"the network is off in this sandbox and the command names {found.group(0)!r}")

    def _check_network_tools(self, tokens: list[str]) -> None:
        for verb in _verbs(tokens):
            if posixpath.basename(verb) in _NETWORK_TOOLS:
                raise SandboxViolation(f"the network is off in this sandbox; {verb!r} needs it")

    def _check_absolute(self, path: str) -> None:
        normal = posixpath.normpath(path) if path != "/" else "/"
        if normal.startswith("//"):
            normal = "/" + normal.lstrip("/")
        if _SENSITIVE_NAME.search(normal):
            raise PermissionDenied(f"credential files are never readable from the sandbox: {path!r}")
        if _DENIED_PATH.search(normal):
            raise SandboxViolation(f"path refused by the sandbox policy: {path!r}")
        if normal == "/":
            return
        if any(normal == p or normal.startswith(p.rstrip("/") + "/") for p in self.host_layout):
            return
        if not any(normal == p or normal.startswith(p + "/") for p in _ALLOWED_PREFIXES):
            raise SandboxViolation(
                f"absolute path outside the sandbox: {path!r} (use /workspace, /inputs, /outputs or /tmp)"
            )
        host_root = str(self.workspace_root)
        if normal == host_root or normal.startswith(host_root.rstrip("/") + "/"):
            raise SandboxViolation(f"host path refused: {path!r}; inside the sandbox the workspace is /workspace")
        # The sandbox has a private /tmp; naming an existing host temp path is reaching for the host.
        if not self.host_layout and normal.startswith("/tmp/") and os.path.lexists(normal):
            raise SandboxViolation(f"host path refused: {path!r} (the sandbox has its own empty /tmp)")

    def _check_token(self, token: str) -> None:
        for piece in _path_pieces(token):
            if _SENSITIVE_NAME.search(piece) or piece.startswith("~"):
                raise PermissionDenied(f"the home folder and credential files are never readable: {piece!r}")
            if piece.startswith("/workspace/"):
                self._check_symlink(piece[len("/workspace/") :])
                continue
            if piece.startswith("/"):
                continue
            parts = piece.split("/")
            if ".." in parts:
                inside = posixpath.normpath(posixpath.join("/workspace", piece))
                if inside != "/workspace" and not inside.startswith("/workspace/"):
                    raise SandboxViolation(f"path leaves the workspace: {piece!r}")
            self._check_symlink(piece)

    def _check_symlink(self, relative: str) -> None:
        # realpath follows every link of the part that exists, so a new file under a linked
        # folder is judged by where it would really land.
        first = relative.split("/", 1)[0]
        try:
            # A word whose first part is not in the workspace cannot pass through a link of it.
            if first in ("", ".") or not os.path.lexists(self.workspace_root / first):
                if first != ".":
                    return
            real = Path(os.path.realpath(self.workspace_root / relative))
        except (OSError, ValueError):
            return
        if real != self.workspace_root and self.workspace_root not in real.parents:
            raise SandboxViolation(f"{relative!r} is a link that points outside the workspace")

    def _check_writes(self, tokens: list[str]) -> None:
        for segment in _segments(tokens):
            targets: list[str] = []
            for i, tok in enumerate(segment):
                if tok in _REDIRECTS and i + 1 < len(segment):
                    targets.append(segment[i + 1])
                elif tok.startswith("of="):
                    targets.append(tok[3:])
            words = [t for t in segment if t not in _REDIRECTS]
            verb_index = next((i for i, t in enumerate(words) if not re.match(r"^\w+=", t)), None)
            if verb_index is not None:
                verb = posixpath.basename(words[verb_index])
                args = [t for t in words[verb_index + 1 :] if not t.startswith("-")]
                if verb in _WRITES_ALL:
                    targets.extend(args)
                elif verb in _WRITES_LAST and args:
                    targets.append(args[-1])
                elif verb == "sed" and any(t.startswith("-i") for t in words):
                    targets.extend(args)
            for target in targets:
                normal = posixpath.normpath(posixpath.join("/workspace", target))
                if normal == "/inputs" or normal.startswith("/inputs/"):
                    raise PermissionDenied(f"/inputs is read-only: the command writes {target!r}")
                if target.startswith("/") and not self.host_layout and not _writable(normal):
                    raise SandboxViolation(
                        f"the command writes {target!r}; only /workspace, /outputs and /tmp are writable"
                    )


def _writable(path: str) -> bool:
    if path in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"):
        return True
    return any(path == p or path.startswith(p + "/") for p in ("/workspace", "/outputs", "/tmp"))


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        # Text sh may still accept (here-documents, odd quoting): fall back to words.
        return command.split()


def _segments(tokens: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(tok)
    return [s for s in out if s]


def _verbs(tokens: list[str]) -> list[str]:
    verbs: list[str] = []
    for segment in _segments(tokens):
        words = [t for t in segment if not re.match(r"^\w+=", t)]
        if words:
            verbs.append(words[0])
            if words[0] in {"env", "exec", "nohup", "timeout", "command", "xargs", "sudo"} and len(words) > 1:
                verbs.extend(w for w in words[1:] if not w.startswith("-"))
    return verbs


def _path_pieces(token: str) -> list[str]:
    """The parts of a word that may be paths: the word, and values after ``=`` or ``:``."""
    pieces = [token]
    if "=" in token:
        pieces.append(token.split("=", 1)[1])
    return [p for p in pieces if p and not _URL.match(p)]
