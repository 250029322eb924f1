"""Roles: passive workers bound to phases.

A role declares a stable name, version, capabilities and input/output schemas. It takes
a typed :class:`RoleContext` and returns a :class:`RoleOutput` or a :class:`RoleFailure`;
it holds no reference to the controller, the trace or the bus, so it cannot advance the
lifecycle, finalize the run or overwrite another role's evidence (the context it gets is
frozen, and the controller files its output under its own name only).

Agent roles (``uses_agent = True``) work in two passive steps around one provider turn,
which the controller drives and records: :meth:`Role.prompt` builds the prompt and
:meth:`Role.interpret` reads the recorded response. Other roles implement
:meth:`Role.decide` and are pure functions of their context, which is what makes a
re-drive from the trace alone possible.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import msgspec

from seamline.definitions import RoleBinding
from seamline.errors import InvalidRequest
from seamline.events import ErrorKind

__all__ = [
    "AgentResponse",
    "AgentRole",
    "CitationReviewer",
    "ROLE_KINDS",
    "Role",
    "RoleContext",
    "RoleFailure",
    "RoleOutput",
    "build_role",
    "register_role_kind",
]


class RoleOutput(msgspec.Struct, frozen=True, kw_only=True):
    """What a role gives back: text, an optional verdict and confidence, and data.

    ``feedback`` goes to the next revision; ``skip`` asks the controller to skip the
    next phase for that reason (honoured only when the definition declares it)."""

    text: str = ""
    verdict: str | None = None
    confidence: float | None = None
    feedback: str | None = None
    skip: str | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


class RoleFailure(msgspec.Struct, frozen=True, kw_only=True):
    """A structured failure: classified kind, message, whether a retry may help."""

    kind: ErrorKind
    message: str
    retryable: bool = False


class RoleContext(msgspec.Struct, frozen=True, kw_only=True):
    """The typed, read-only context a role acts on."""

    task: str
    phase: str
    role: str
    round: int
    attempt: int
    feedback: str | None = None
    subject: RoleOutput | None = None  # the latest output of another role, to judge or revise
    evidence: dict[str, RoleOutput] = msgspec.field(default_factory=dict)  # latest output per role


class AgentResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A provider turn as the controller recorded it: final text, outcome, what was read."""

    text: str
    outcome: str
    stop_reason: str
    reads: dict[str, str] = msgspec.field(default_factory=dict)
    error_kind: str | None = None
    error_message: str | None = None


class Role:
    """Base of every role. Subclasses set the class attributes and one of the hooks."""

    kind: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    capabilities: ClassVar[tuple[str, ...]] = ()
    uses_agent: ClassVar[bool] = False

    def __init__(self, name: str, binding: RoleBinding) -> None:
        self.name = name
        self.binding = binding

    @classmethod
    def input_schema(cls) -> dict[str, Any]:
        schema: dict[str, Any] = msgspec.json.schema(RoleContext)
        return schema

    @classmethod
    def output_schema(cls) -> dict[str, Any]:
        schema: dict[str, Any] = msgspec.json.schema(RoleOutput | RoleFailure)
        return schema

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "version": self.version, "capabilities": list(self.capabilities)}

    def prompt(self, ctx: RoleContext) -> str:
        raise NotImplementedError(f"role kind {self.kind} does not call an agent")

    def interpret(self, ctx: RoleContext, response: AgentResponse) -> RoleOutput | RoleFailure:
        raise NotImplementedError(f"role kind {self.kind} does not call an agent")

    def decide(self, ctx: RoleContext) -> RoleOutput | RoleFailure:
        raise NotImplementedError(f"role kind {self.kind} calls an agent")


_DEFAULT_REVISION: Final = "{task}\n\nRevise your previous answer. Reviewer feedback: {feedback}"


class AgentRole(Role):
    """One provider turn per attempt. The prompt template may use ``{task}`` and
    ``{feedback}``; a revision without a template of its own appends the feedback."""

    kind: ClassVar[str] = "agent"
    capabilities: ClassVar[tuple[str, ...]] = ("answer", "revise")
    uses_agent: ClassVar[bool] = True

    def prompt(self, ctx: RoleContext) -> str:
        template = self.binding.prompt or "{task}"
        if ctx.feedback and "{feedback}" not in template:
            template = _DEFAULT_REVISION.replace("{task}", template)
        return template.replace("{task}", ctx.task).replace("{feedback}", ctx.feedback or "")

    def interpret(self, ctx: RoleContext, response: AgentResponse) -> RoleOutput | RoleFailure:
        if response.outcome != "completed":
            kind = response.error_kind or ("budget" if response.outcome == "budget" else "provider")
            message = response.error_message or f"turn ended {response.outcome} ({response.stop_reason})"
            retryable = kind in ("timeout", "transport", "quota")
            return RoleFailure(kind=kind if kind in _KINDS else "provider", message=message, retryable=retryable)  # type: ignore[arg-type]
        return RoleOutput(text=response.text, data={"reads": dict(response.reads)})


_KINDS: Final = frozenset(
    {
        "timeout",
        "auth",
        "quota",
        "transport",
        "provider",
        "invalid_request",
        "sandbox",
        "permission",
        "budget",
        "storage",
    }
)
_CITATION: Final = re.compile(r"([\w./-]+):(\d+)-(\d+)")


class CitationReviewer(Role):
    """Deterministic reviewer: approves an answer whose sources check out.

    It reads the subject's ``Sources:`` line (``path:start-end, …``, the format the
    offline provider writes) and checks each citation against the files the writer
    actually read in its turn (recorded in the trace, so a re-drive needs no workspace):

    - no citation at all -> verdict ``revise`` with feedback asking for sources;
    - a citation of a file never read, lines outside it, or a quoted line (``> …``)
      that is not in the file -> verdict ``veto`` (a fabricated source);
    - fewer distinct sources than the ``min_sources`` option -> ``revise``;
    - otherwise ``approve``, confidence = share of quoted lines found verbatim.
    """

    kind: ClassVar[str] = "citation-reviewer"
    capabilities: ClassVar[tuple[str, ...]] = ("review", "verdict:approve|revise|veto")

    def decide(self, ctx: RoleContext) -> RoleOutput | RoleFailure:
        subject = ctx.subject
        if subject is None:
            return RoleFailure(kind="invalid_request", message="nothing to review: no answer before this phase")
        reads = subject.data.get("reads", {})
        if not isinstance(reads, dict):
            reads = {}
        sources_line = ""
        for line in subject.text.splitlines():
            if line.startswith("Sources:"):
                sources_line = line
        citations = _CITATION.findall(sources_line)
        if not citations:
            return RoleOutput(
                verdict="revise",
                confidence=0.0,
                feedback="The answer cites no sources. End it with a line 'Sources: path:start-end, ...'.",
                text="no sources cited",
            )
        problems: list[str] = []
        files: dict[str, list[str]] = {path: _numbered(str(content)) for path, content in reads.items()}
        for path, start, end in citations:
            lines = files.get(path)
            if lines is None:
                problems.append(f"cites {path}, which the answer never read")
            elif not (1 <= int(start) <= int(end) <= len(lines)):
                problems.append(f"cites {path}:{start}-{end}, outside the {len(lines)} lines read")
        quotes = [line[len("   > ") :] for line in subject.text.splitlines() if line.startswith("   > ")]
        known = {text for lines in files.values() for text in lines}
        missing = [q for q in quotes if q not in known]
        if problems or missing:
            detail = "; ".join(problems + [f"quote not in any file read: {q[:60]!r}" for q in missing[:3]])
            return RoleOutput(verdict="veto", confidence=1.0, feedback=detail, text=f"fabricated source: {detail}")
        minimum = int(self.binding.options.get("min_sources", "1"))
        distinct = {path for path, _, _ in citations}
        if len(distinct) < minimum:
            return RoleOutput(
                verdict="revise",
                confidence=len(distinct) / minimum,
                feedback=f"Cite at least {minimum} different files; the answer cites {len(distinct)}.",
                text="too few sources",
            )
        confidence = 1.0 if not quotes else (len(quotes) - len(missing)) / len(quotes)
        return RoleOutput(
            verdict="approve", confidence=confidence, text=f"approved: {len(citations)} citation(s) check out"
        )


def _numbered(content: str) -> list[str]:
    """The text of each line of a ``read_file`` result (``N<TAB>text`` rows)."""
    out: list[str] = []
    for row in content.splitlines():
        head, tab, text = row.partition("\t")
        if tab and head.strip().isdigit():
            out.append(text)
    return out


ROLE_KINDS: dict[str, Callable[[str, RoleBinding], Role]] = {
    AgentRole.kind: AgentRole,
    CitationReviewer.kind: CitationReviewer,
}


def register_role_kind(kind: str, factory: Callable[[str, RoleBinding], Role]) -> None:
    """Make a role kind nameable in definitions (a plug-in's or a test's own role)."""
    ROLE_KINDS[kind] = factory


def build_role(
    name: str, binding: RoleBinding, *, kinds: Mapping[str, Callable[[str, RoleBinding], Role]] | None = None
) -> Role:
    table = ROLE_KINDS if kinds is None else kinds
    factory = table.get(binding.kind)
    if factory is None:
        raise InvalidRequest(f"role {name!r}: unknown role kind {binding.kind!r}; known: {', '.join(sorted(table))}")
    return factory(name, binding)
