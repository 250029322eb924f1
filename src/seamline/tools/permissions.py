"""Permissions: durable allow / deny / ask rules, prompts, and hard denials.

:class:`PermissionService` implements the loop's ``Approval`` protocol. For each tool call
it decides, in this order:

1. **hard denials** (for example a recursive delete outside the workspace) deny, even
   with ``--yes`` and whatever the rules say;
2. a matching **deny** rule denies;
3. among matching **allow** and **ask** rules the newest decides (session grants first);
4. with no rule, tools of class ``read`` are allowed and every other class asks.

``ask`` becomes a ``permission_request`` event and waits for a ``permission_decision``:
``--yes`` (``yes=True``) allows at once; otherwise the prompter (a terminal prompt in the
CLI) answers allow or deny with a scope: ``once``, ``session`` (kept in memory for this
service), or ``always`` (a rule stored in the store). Without a prompter the call is
denied with a message saying how to allow it.

Durable rules come from a :class:`RuleBook`; the session store keeps them
(:mod:`seamline.sessions.rules`). A rule names a tool (a glob over tool names), a tool
class and an argument pattern (``KEY=GLOB`` on one argument, or ``GLOB`` on any string
argument); an empty field matches everything.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TextIO, get_args

import msgspec

from seamline.events import Event, PermissionDecision, PermissionRequest, ToolCall
from seamline.tools.approval import ApprovalDecision
from seamline.tools.base import Tool, tool_article
from seamline.tools.shell_rules import CommandPiece, command_pieces, recursive_delete_outside_workspace
from seamline.tools.terminal_line import TERMINAL_LINE, TerminalLine
from seamline.tools.workspace import resolved_folder

__all__ = [
    "DEFAULT_HARD_DENIALS",
    "Effect",
    "HardDenial",
    "PermissionAnswer",
    "PermissionRule",
    "PermissionService",
    "Prompter",
    "RuleBook",
    "TERMINAL_LINE",
    "Scope",
    "TerminalLine",
    "TerminalPrompter",
    "literal_tool_glob",
    "recursive_delete_outside_workspace",
]

Effect = Literal["allow", "deny", "ask"]
Scope = Literal["once", "session", "always"]
EFFECTS: Final[tuple[Effect, ...]] = get_args(Effect)
TOOL_CLASSES: Final[tuple[str, ...]] = ("read", "write", "execute", "network")


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """One rule. ``None`` fields match everything; ``workspace`` limits it to one folder."""

    id: int
    effect: Effect
    tool: str | None = None
    tool_class: str | None = None
    pattern: str | None = None
    workspace: str | None = None
    created_at: float = 0.0

    def matches(
        self, tool: Tool, arguments: dict[str, Any], workspace: Path | None, *, piece: CommandPiece | None = None
    ) -> bool:
        """Whether the rule covers the call. With ``piece`` (one simple command of a shell
        call), the ``command`` argument is that piece: an allow rule needs a plain piece
        whose words match; deny and ask rules also match its text as written and the
        program it actually runs (``/bin/rm``, ``env rm``, ``x=1 rm`` all run ``rm``)."""
        if self.workspace is not None and (workspace is None or str(workspace) != self.workspace):
            return False
        if self.tool is not None and not fnmatch.fnmatchcase(tool.name, self.tool):
            return False
        if self.tool_class is not None and tool.tool_class != self.tool_class:
            return False
        if self.pattern is None:
            return True
        if piece is None:
            return _pattern_matches(self.pattern, arguments)
        return _piece_matches(self.pattern, arguments, piece, strict=self.effect == "allow")

    def describe(self) -> str:
        parts = [f"#{self.id}", self.effect]
        for label, value in (
            ("tool", self.tool),
            ("class", self.tool_class),
            ("pattern", self.pattern),
            ("workspace", self.workspace),
        ):
            if value is not None:
                parts.append(f"{label}={value}")
        if len(parts) == 2:
            parts.append("(every tool)")
        return " ".join(parts)


def _pattern_matches(pattern: str, arguments: dict[str, Any]) -> bool:
    key, sep, glob = pattern.partition("=")
    if sep and key.isidentifier():
        value = arguments.get(key)
        return isinstance(value, str) and fnmatch.fnmatchcase(value, glob)
    return any(isinstance(v, str) and fnmatch.fnmatchcase(v, pattern) for v in arguments.values())


def _piece_matches(pattern: str, arguments: dict[str, Any], piece: CommandPiece, *, strict: bool) -> bool:
    key, sep, glob = pattern.partition("=")
    keyed = bool(sep) and key.isidentifier()
    if keyed and key != "command":
        return _pattern_matches(pattern, arguments)
    glob = glob if keyed else pattern
    if strict:
        hit = piece.plain and fnmatch.fnmatchcase(piece.normalized, glob)
    else:
        said = (piece.normalized, piece.text, piece.program, arguments.get("command", ""))
        hit = any(fnmatch.fnmatchcase(t, glob) for t in said if t)
    if hit or keyed or strict:
        return hit  # an allow rule never grants a shell call for what another argument says
    others = {k: v for k, v in arguments.items() if k != "command"}
    return any(isinstance(v, str) and fnmatch.fnmatchcase(v, glob) for v in others.values())


class RuleBook(Protocol):
    """Where durable rules live (:class:`seamline.sessions.rules.PermissionRules` keeps them
    in the session store): list them, and add one when a prompt's answer is ``always``."""

    def list(self) -> list[PermissionRule]: ...

    def add(
        self,
        effect: str,
        *,
        tool: str | None = None,
        tool_class: str | None = None,
        pattern: str | None = None,
        workspace: str | os.PathLike[str] | None = None,
    ) -> PermissionRule: ...


# -- hard denials ----------------------------------------------------------------------------

HardDenial = Callable[[Tool, dict[str, Any], Path | None], str | None]
"""Looks at a call; returns why it must never run, or None."""

DEFAULT_HARD_DENIALS: Final[tuple[HardDenial, ...]] = (recursive_delete_outside_workspace,)


# -- prompts -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PermissionAnswer:
    """A prompt's answer; ``by``: who gave it (a server's user), recorded on the decision."""

    decision: Literal["allow", "deny"]
    scope: Scope = "once"
    by: str | None = None


class Prompter(Protocol):
    """Answers a ``permission_request``: a terminal prompt, a UI, a test."""

    def __call__(self, request: PermissionRequest) -> Awaitable[PermissionAnswer]: ...


_ANSWERS: Final[dict[str, PermissionAnswer]] = {
    "y": PermissionAnswer("allow", "once"),
    "yes": PermissionAnswer("allow", "once"),
    "s": PermissionAnswer("allow", "session"),
    "a": PermissionAnswer("allow", "always"),
    "n": PermissionAnswer("deny", "once"),
    "no": PermissionAnswer("deny", "once"),
    "": PermissionAnswer("deny", "once"),
    "d": PermissionAnswer("deny", "always"),
}


class TerminalPrompter:
    """Asks on a terminal: ``y`` once, ``s`` for this session, ``a`` always, ``n`` (or
    Enter) no, ``d`` never (a stored deny rule)."""

    def __init__(
        self, *, stdin: TextIO | None = None, stderr: TextIO | None = None, line: TerminalLine = TERMINAL_LINE
    ) -> None:
        self.stdin = stdin or sys.stdin
        self.stderr = stderr or sys.stderr
        self.line = line

    async def __call__(self, request: PermissionRequest) -> PermissionAnswer:
        return await asyncio.to_thread(self._ask, request)

    def _ask(self, request: PermissionRequest) -> PermissionAnswer:
        arguments = msgspec.json.encode(request.arguments).decode()
        if len(arguments) > 300:
            arguments = arguments[:300] + "…"
        question = f"seamline: allow {request.tool} {arguments}? ({request.reason})\n  [y]es once, [s]ession, [a]lways, [n]o, [d]eny always: "
        try:
            for _ in range(3):
                with self.line.lock:
                    self.line.asking = True
                    # A spinner frame may be on the line: clear it before asking.
                    self.stderr.write(("\r\033[K" if self.stderr.isatty() else "") + question)
                    self.stderr.flush()
                line = self.stdin.readline()
                if not line:
                    return PermissionAnswer("deny", "once")  # end of input: no
                answer = _ANSWERS.get(line.strip().lower())
                if answer is not None:
                    return answer
            return PermissionAnswer("deny", "once")
        finally:
            with self.line.lock:
                self.line.asking = False


# -- the service ---------------------------------------------------------------------------------


class PermissionService:
    """The rules, the prompt and the hard denials behind every tool call (an ``Approval``)."""

    def __init__(
        self,
        *,
        rules: RuleBook | None = None,
        workspace: str | os.PathLike[str] | None = None,
        yes: bool = False,
        prompter: Prompter | None = None,
        hard_denials: Sequence[HardDenial] = DEFAULT_HARD_DENIALS,
        default_allow: Iterable[str] = ("read",),
    ) -> None:
        self.rules = rules
        self.workspace = resolved_folder(workspace) if workspace is not None else None
        self.yes = yes
        self.prompter = prompter
        self.hard_denials = tuple(hard_denials)
        self.default_allow = frozenset(default_allow)
        self.session_rules: list[PermissionRule] = []
        self._asked = 0

    def evaluate(self, tool: Tool, arguments: dict[str, Any]) -> tuple[Effect, str]:
        """What the rules say about a call, before any prompt: the effect and why."""
        for denial in self.hard_denials:
            reason = denial(tool, arguments, self.workspace)
            if reason is not None:
                return "deny", f"hard denial: {reason}"
        durable = self.rules.list() if self.rules is not None else ()
        ordered = [*reversed(self.session_rules), *reversed(durable)] if durable or self.session_rules else []
        command = arguments.get("command")
        if tool.tool_class != "execute" or not isinstance(command, str):
            return self._decide_by_rules(tool, arguments, ordered, None)
        # A shell call is judged one simple command at a time: every piece must be allowed.
        verdicts = [self._decide_by_rules(tool, arguments, ordered, p) for p in command_pieces(command, self.workspace)]
        for wanted in ("deny", "ask"):
            for effect, reason in verdicts:
                if effect == wanted:
                    return effect, reason
        return verdicts[0]

    def _decide_by_rules(
        self, tool: Tool, arguments: dict[str, Any], ordered: list[PermissionRule], piece: CommandPiece | None
    ) -> tuple[Effect, str]:
        where = f" (for `{piece.text}`)" if piece is not None and piece.text != arguments.get("command") else ""
        if ordered:
            candidates = [r for r in ordered if r.matches(tool, arguments, self.workspace, piece=piece)]
            for rule in candidates:
                if rule.effect == "deny":
                    return "deny", f"denied by rule {rule.describe()}{where}"
            if candidates:
                rule = candidates[0]  # session grants first, then the newest durable rule
                return rule.effect, f"{rule.effect} by rule {rule.describe()}{where}"
        if tool.tool_class in self.default_allow:
            return "allow", f"{tool.tool_class} tools are allowed"
        return "ask", f"{tool.name} is {tool_article(tool.tool_class)} tool{where}"

    async def decide(self, tool: Tool, call: ToolCall) -> ApprovalDecision:
        effect, reason = self.evaluate(tool, call.arguments)
        if effect == "allow":
            return _allowed(reason)
        request_id = f"perm-{call.call_id}"
        if effect == "deny":
            denied = PermissionDecision(request_id=request_id, decision="deny", reason=reason, by="rule")
            return ApprovalDecision(False, reason, events=(denied,))
        request = PermissionRequest(
            request_id=request_id, call_id=call.call_id, tool=tool.name, arguments=call.arguments, reason=reason
        )
        if self.yes:
            return _decided(request, PermissionAnswer("allow", "once", by="yes"), "allowed by --yes")
        if self.prompter is None:
            why = f"{reason} and needs approval: pass --yes, answer on a terminal, or add a rule (seamline permissions add allow --tool {tool.name})"
            return _decided(request, PermissionAnswer("deny", "once", by="rule"), why)
        answer = await self.prompter(request)
        self._remember(tool, answer)
        who = answer.by or "user"
        reason = f"{answer.decision} ({answer.scope}) by " + (answer.by or "the user")
        return _decided(request, PermissionAnswer(answer.decision, answer.scope, by=who), reason)

    def _remember(self, tool: Tool, answer: PermissionAnswer) -> None:
        # The tool's name comes from whoever asked (an agent's hook request, an ACP
        # agent's permission request): it is kept literal, so an answer for a tool named
        # ``*`` or ``Bash*`` covers that name only, never every tool a glob would match.
        literal = literal_tool_glob(tool.name)
        if answer.scope == "session":
            self._asked += 1
            self.session_rules.append(PermissionRule(-self._asked, answer.decision, tool=literal))
        elif answer.scope == "always":
            if self.rules is not None:
                self.rules.add(answer.decision, tool=literal, workspace=self.workspace)
            else:  # no store: the best we can keep is the session
                self._asked += 1
                self.session_rules.append(PermissionRule(-self._asked, answer.decision, tool=literal))


def literal_tool_glob(name: str) -> str:
    """A rule's tool glob that matches exactly ``name``: ``*``, ``?`` and ``[`` are
    bracketed (``mcp__*`` becomes ``mcp__[*]``).

    >>> literal_tool_glob("Bash"), literal_tool_glob("*"), literal_tool_glob("a[1]?")
    ('Bash', '[*]', 'a[[]1][?]')
    """
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


@functools.lru_cache(maxsize=256)
def _allowed(reason: str) -> ApprovalDecision:
    """An allowing decision: frozen, so one per reason serves every call it allows."""
    return ApprovalDecision(True, reason)


def _decided(request: PermissionRequest, answer: PermissionAnswer, reason: str) -> ApprovalDecision:
    events: tuple[Event, ...] = (
        request,
        PermissionDecision(
            request_id=request.request_id, decision=answer.decision, scope=answer.scope, reason=reason, by=answer.by
        ),
    )
    return ApprovalDecision(answer.decision == "allow", reason, scope=answer.scope, events=events)
