"""Pipeline definitions: phases, terminals, transitions, skip reasons, roles, policies.

A definition is data. It is written in Python (:class:`PipelineDefinition`) or in YAML /
JSON (:func:`load_definition`), and hashes to a stable definition hash that does not
depend on key order or whitespace. The trace keeps the whole definition beside its hash,
so an old trace is read against the definition it recorded, not today's.

Example (YAML)::

    name: answer-review
    phases:
      - {name: write, role: writer, next: review}
      - {name: review, role: reviewer, judge: true, on_continue: write, next: done}
    terminal_phases: [done, aborted]
    transitions: {write: [review], review: [write, done]}
    roles:
      writer: {kind: agent}
      reviewer: {kind: citation-reviewer}
    convergence: {strategy: reviewer-approval, max_rounds: 3}
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from seamline.errors import InvalidRequest

__all__ = [
    "ABORT_PHASE",
    "ConvergenceSpec",
    "PhaseSpec",
    "PipelineDefinition",
    "RetryPolicy",
    "RoleBinding",
    "definition_from_data",
    "load_definition",
]

# The diversion every definition has: reachable from every phase, always terminal.
ABORT_PHASE: Final = "aborted"

StrategyName = Literal["single-pass", "fixed-rounds", "verdict-stability", "reviewer-approval"]


class PhaseSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One phase: the roles that act in it and where the controller goes next.

    ``roles`` run together (as tasks on the team bus) when there are several. ``judge``
    phases end with a convergence decision: ``next`` when converged, ``on_continue``
    for a feedback revision.
    """

    name: str
    roles: tuple[str, ...] = ()
    role: str | None = None
    next: str | None = None
    judge: bool = False
    on_continue: str | None = None

    def bound_roles(self) -> tuple[str, ...]:
        return self.roles if self.roles else ((self.role,) if self.role else ())


class RoleBinding(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a role name is realised: its kind (see ``seamline.pipeline.roles``), and for
    agent roles the prompt template, provider and model (None: the run's own)."""

    kind: str = "agent"
    prompt: str | None = None
    provider: str | None = None
    model: str | None = None
    options: dict[str, str] = msgspec.field(default_factory=dict)


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Bounded retries of a failed role attempt, only for retryable failure kinds."""

    max_attempts: int = 2
    retry_on: tuple[str, ...] = ("timeout", "transport", "quota")


class ConvergenceSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    strategy: StrategyName = "single-pass"
    max_rounds: int = 3
    window: int = 2


class TeamLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Spawn-guard limits for the run's team (None: no limit)."""

    max_depth: int = 2
    max_parallel: int = 4
    max_tasks: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None


class PipelineDefinition(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A declared pipeline. Call :meth:`validate` (done by the loaders) before use."""

    name: str
    phases: tuple[PhaseSpec, ...]
    terminal_phases: tuple[str, ...] = ("done", ABORT_PHASE)
    transitions: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    skip_reasons: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    roles: dict[str, RoleBinding] = msgspec.field(default_factory=dict)
    retry: RetryPolicy = msgspec.field(default_factory=RetryPolicy)
    convergence: ConvergenceSpec = msgspec.field(default_factory=ConvergenceSpec)
    team: TeamLimits = msgspec.field(default_factory=TeamLimits)
    description: str = ""

    # -- identity -------------------------------------------------------------------------
    def to_data(self) -> dict[str, Any]:
        """Plain data (what YAML would hold), complete with defaults."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data

    def definition_hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`to_data` (sorted keys, compact)."""
        canonical = json.dumps(self.to_data(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    # -- lookups --------------------------------------------------------------------------
    def phase(self, name: str) -> PhaseSpec:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(name)

    def allowed(self, source: str, target: str) -> bool:
        """Whether the controller may move ``source`` -> ``target``."""
        if target == ABORT_PHASE:
            return True
        return target in self.transitions.get(source, ())

    def next_of(self, phase: PhaseSpec) -> str:
        """The phase after ``phase`` on success: ``next``, else the following one in order."""
        if phase.next:
            return phase.next
        names = [p.name for p in self.phases]
        index = names.index(phase.name)
        return names[index + 1] if index + 1 < len(names) else self.terminal_phases[0]

    def phases_of(self, role: str) -> tuple[str, ...]:
        return tuple(p.name for p in self.phases if role in p.bound_roles())

    # -- validation -----------------------------------------------------------------------
    def validate(self) -> PipelineDefinition:
        """Check the definition hangs together; raises ``InvalidRequest`` naming the fault."""
        where = f"pipeline {self.name!r}"
        if not self.name.strip():
            raise InvalidRequest("a pipeline needs a name")
        if not self.phases:
            raise InvalidRequest(f"{where}: no phases")
        names = [p.name for p in self.phases]
        if len(set(names)) != len(names):
            raise InvalidRequest(f"{where}: phase names repeat")
        if ABORT_PHASE not in self.terminal_phases:
            raise InvalidRequest(f"{where}: {ABORT_PHASE!r} must be a terminal phase")
        overlap = set(names) & set(self.terminal_phases)
        if overlap:
            raise InvalidRequest(f"{where}: terminal phases cannot have roles: {sorted(overlap)}")
        known = set(names) | set(self.terminal_phases)
        for source, targets in self.transitions.items():
            if source not in names:
                raise InvalidRequest(f"{where}: transition from unknown phase {source!r}")
            for target in targets:
                if target not in known:
                    raise InvalidRequest(f"{where}: transition {source} -> unknown phase {target!r}")
        for phase in self.phases:
            roles = phase.bound_roles()
            if phase.role and phase.roles:
                raise InvalidRequest(f"{where}: phase {phase.name!r} gives both role and roles")
            if not roles:
                raise InvalidRequest(f"{where}: phase {phase.name!r} binds no role")
            for role in roles:
                if role not in self.roles:
                    raise InvalidRequest(f"{where}: phase {phase.name!r} binds undeclared role {role!r}")
            for step in (self.next_of(phase), phase.on_continue):
                if step is not None and not self.allowed(phase.name, step):
                    raise InvalidRequest(f"{where}: phase {phase.name!r} leads to {step!r}, not an allowed transition")
            if phase.judge and phase.on_continue is None and self.convergence.strategy != "single-pass":
                raise InvalidRequest(f"{where}: judge phase {phase.name!r} needs on_continue")
        for phase_name in self.skip_reasons:
            if phase_name not in names:
                raise InvalidRequest(f"{where}: skip reasons for unknown phase {phase_name!r}")
        unused = sorted(set(self.roles) - {r for p in self.phases for r in p.bound_roles()})
        if unused:
            raise InvalidRequest(f"{where}: roles declared but bound to no phase: {unused}")
        if self.retry.max_attempts < 1 or self.convergence.max_rounds < 1 or self.convergence.window < 1:
            raise InvalidRequest(f"{where}: max_attempts, max_rounds and window must be at least 1")
        return self


def definition_from_data(data: object, *, origin: str = "definition") -> PipelineDefinition:
    """Build and validate a definition from plain data (parsed YAML or JSON)."""
    if not isinstance(data, dict):
        raise InvalidRequest(f"{origin}: a pipeline definition is a mapping")
    try:
        definition = msgspec.convert(data, PipelineDefinition)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"{origin}: {exc}") from None
    return definition.validate()


def load_definition(path: str | Path) -> PipelineDefinition:
    """Read a definition from a YAML or JSON file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read pipeline file {path}: {exc.strerror}") from None
    data: object
    try:
        if file.suffix == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidRequest(f"pipeline file {path} is not valid JSON: {exc}") from None
        else:
            import yaml

            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise InvalidRequest(f"pipeline file {path} is not valid YAML: {exc}") from None
        return definition_from_data(data, origin=str(path))
    except RecursionError:
        # A file nested thousands deep (hostile or broken) is refused, not a crash.
        raise InvalidRequest(f"pipeline file {path} is nested too deep to be a pipeline definition") from None
