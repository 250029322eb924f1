"""What ``seamline serve`` lets its HTTP clients start: the operator's ``--agents FILE``
and the safe defaults without one.

A server's operator, not its clients, decides what runs. The agents file (TOML) declares
named agents::

    [agents.reviewer]
    provider = "anthropic"
    model = "claude-sonnet-4-6"
    options = { base_url = "http://127.0.0.1:8000" }
    sandbox = "bwrap"            # for providers that run a program (the default)
    budget_usd = 2.0             # the most one run may spend; a client may ask for less
    on_budget = "pause"          # at the budget a run pauses (POST /v1/runs/RUN/budget goes on); default "fail"
    workspaces = ["~/src", "/srv/repos"]
    yes = false                  # may clients ask to run tools without asking?
    client_options = ["temperature"]   # options a client may set (none by default)
    fallback = ["openai:gpt-4o-mini", { provider = "anthropic", model = "claude-haiku-4-5", options = {} }]

Clients pick an agent by name and a workspace under one of its roots. Without naming an
agent they get the safe defaults: any provider, but one that runs a program (an agent CLI,
an ACP agent, OpenCode) runs inside the envelope (serve's ``--sandbox``, ``auto`` by
default: refused where it cannot be isolated); options that name no program, path or
endpoint (see ``OptionSpec.operator_only``), no ``yes``, and a workspace inside the
server's ``--workspace``.

``fallback`` lists the backends that take a session over, in order, when a turn fails for
want of capacity (quota, overloaded; see :mod:`seamline.providers.failover`): each
``"PROVIDER[:MODEL]"`` or a table ``{provider, model, options}``. A fallback gets only its own
options (none of the agent's), and one that runs a program runs in the agent's ``sandbox``.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from seamline.errors import InvalidRequest, PermissionDenied, SeamlineError
from seamline.providers.base import Provider
from seamline.providers.failover import Fallback, parse_fallback
from seamline.providers.option_kinds import option_problem
from seamline.providers.pause import OnBudget
from seamline.providers.registry import provider_class
from seamline.runner import RunOptions

__all__ = [
    "AGENT_KEY",
    "AgentSpec",
    "AgentsFileError",
    "Plan",
    "ServePolicy",
    "UnknownAgent",
    "load_agents",
    "program_options",
]

AGENT_KEY: Final = "agent"  # the session metadata key that names a session's declared agent
SANDBOXES: Final = ("bwrap", "auto", "none")
_KEYS: Final = frozenset(
    {
        "provider",
        "model",
        "options",
        "sandbox",
        "budget_usd",
        "on_budget",
        "workspaces",
        "yes",
        "client_options",
        "description",
        "fallback",
    }
)


class UnknownAgent(InvalidRequest):
    """A client named an agent the operator did not declare (404)."""


class AgentsFileError(Exception):
    """The agents file cannot be used; the message names the file and the key or line."""


@dataclass(frozen=True)
class AgentSpec:
    """One declared agent."""

    name: str
    provider: str
    model: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sandbox: str = "bwrap"
    budget_usd: float | None = None
    workspaces: tuple[Path, ...] = ()
    yes: bool = False
    client_options: tuple[str, ...] = ()
    description: str = ""
    fallback: tuple[Fallback, ...] = ()
    on_budget: OnBudget = "fail"

    def public(self) -> dict[str, Any]:
        """What a client may see: never option values (they may hold secrets)."""
        return {
            "name": self.name,
            "description": self.description,
            "provider": self.provider,
            "model": self.model,
            "workspaces": [str(w) for w in self.workspaces],
            "sandbox": self.sandbox,
            "budget_usd": self.budget_usd,
            "on_budget": self.on_budget,
            "yes": self.yes,
            "client_options": list(self.client_options),
        }


@dataclass(frozen=True)
class Plan:
    """What the server starts for one request: everything checked."""

    provider: str
    model: str | None
    options: dict[str, str]
    workspace: Path
    yes: bool
    agent: str | None = None
    budget_usd: float | None = None
    fallback: tuple[Fallback, ...] = ()
    on_budget: OnBudget = "fail"

    def run_options(self, *, max_steps: int = 50) -> RunOptions:
        """The options the server runs this plan with (the same type every face builds)."""
        return RunOptions(
            provider=self.provider,
            model=self.model,
            options=self.options,
            workspace=self.workspace,
            yes=self.yes,
            max_steps=max_steps,
            budget_usd=self.budget_usd,
            on_budget=self.on_budget,
            fallback=self.fallback,
        )


def load_agents(path: str | os.PathLike[str], *, default_workspace: Path) -> dict[str, AgentSpec]:
    """Read and check the agents file; :class:`AgentsFileError` names what is wrong."""
    where = str(path)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise AgentsFileError(f"--agents {where}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AgentsFileError(f"--agents {where}: not TOML: {exc}") from None
    extra = set(data) - {"agents"}
    if extra:
        raise AgentsFileError(f"--agents {where}: unknown table {sorted(extra)[0]!r} (only [agents.NAME])")
    table = data.get("agents", {})
    if not isinstance(table, dict) or not table:
        raise AgentsFileError(f"--agents {where}: declares no agents ([agents.NAME] tables)")
    return {name: _agent(where, name, body, default_workspace) for name, body in table.items()}


def _agent(where: str, name: str, body: Any, default_workspace: Path) -> AgentSpec:
    def bad(key: str, why: str) -> AgentsFileError:
        return AgentsFileError(f"--agents {where}: agents.{name}.{key}: {why}" if key else f"--agents {where}: {why}")

    if not isinstance(body, dict):
        raise bad("", f"agents.{name} must be a table")
    unknown = set(body) - _KEYS
    if unknown:
        raise bad(sorted(unknown)[0], f"unknown key (known: {', '.join(sorted(_KEYS))})")
    provider = body.get("provider")
    if not isinstance(provider, str):
        raise bad("provider", "required, a provider name")
    try:
        cls = provider_class(provider)
    except SeamlineError as exc:
        raise bad("provider", exc.message) from None
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("model", "must be a string")
    options = _options(body.get("options", {}), cls, "options", bad)
    sandbox = body.get("sandbox", "bwrap")
    if sandbox not in SANDBOXES:
        raise bad("sandbox", f"one of {', '.join(SANDBOXES)}")
    budget = body.get("budget_usd")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int | float) or not math.isfinite(budget) or budget < 0
    ):
        raise bad("budget_usd", "must be a number, 0 or more")
    on_budget: object = body.get("on_budget", "fail")
    if on_budget not in ("fail", "pause"):
        raise bad("on_budget", '"fail" or "pause"')
    if on_budget == "pause" and cls.runs_own_tools:
        raise bad("on_budget", f"{provider} runs its own turns: it cannot pause between model requests")
    roots = body.get("workspaces", [str(default_workspace)])
    if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
        raise bad("workspaces", "must be a list of folders")
    resolved = []
    for root in roots:
        folder = Path(root).expanduser().resolve()
        if not folder.is_dir():
            raise bad("workspaces", f"{root} is not a folder")
        resolved.append(folder)
    yes = body.get("yes", False)
    if not isinstance(yes, bool):
        raise bad("yes", "must be true or false")
    client_options = body.get("client_options", [])
    if not isinstance(client_options, list) or not all(isinstance(o, str) for o in client_options):
        raise bad("client_options", "must be a list of option names")
    for key in client_options:
        spec = cls.options.get(key)
        if spec is None:
            raise bad("client_options", f"provider {provider} has no option {key!r}")
        if spec.operator_only or key == "sandbox":
            raise bad("client_options", f"{key!r} names a program, path or endpoint: only this file sets it")
    description = body.get("description", "")
    if not isinstance(description, str):
        raise bad("description", "must be a string")
    fallback: Any = body.get("fallback", [])
    if not isinstance(fallback, list):
        raise bad("fallback", 'must be a list of "PROVIDER[:MODEL]" or {provider, model, options} tables')
    declared: list[Any] = fallback
    return AgentSpec(
        name=name,
        provider=provider,
        model=model,
        options=dict(options),
        sandbox=sandbox,
        budget_usd=float(budget) if budget is not None else None,
        on_budget="pause" if on_budget == "pause" else "fail",
        workspaces=tuple(resolved),
        yes=yes,
        client_options=tuple(client_options),
        description=description,
        fallback=tuple(_fallback(item, f"fallback.{i}", bad) for i, item in enumerate(declared)),
    )


def _options(options: Any, cls: type[Provider], key: str, bad: Callable[[str, str], AgentsFileError]) -> dict[str, str]:
    """A table of ``cls``'s options, each checked."""
    if not isinstance(options, dict):
        raise bad(key, "must be a table of strings")
    table = cast("dict[str, Any]", options)
    for name, value in table.items():
        if not isinstance(value, str):
            raise bad(f"{key}.{name}", "must be a string")
        spec = cls.options.get(name)
        if spec is None:
            raise bad(f"{key}.{name}", f"provider {cls.name} has no such option")
        problem = option_problem(spec.kind, value)
        if problem is None and spec.choices and value not in spec.choices:
            problem = f"one of {', '.join(spec.choices)}"
        if problem is not None:
            raise bad(f"{key}.{name}", problem)
    return cast("dict[str, str]", table)


def _fallback(item: Any, key: str, bad: Callable[[str, str], AgentsFileError]) -> Fallback:
    """One entry of ``fallback``: ``"PROVIDER[:MODEL]"`` or ``{provider, model, options}``."""
    table: dict[str, Any] = cast("dict[str, Any]", item) if isinstance(item, dict) else {}
    if isinstance(item, dict):
        unknown = sorted(set(table) - {"provider", "model", "options"})
        if unknown:
            raise bad(f"{key}.{unknown[0]}", "unknown key (known: model, options, provider)")
        name, model = table.get("provider"), table.get("model")
        if not isinstance(name, str) or ":" in name or (model is not None and not isinstance(model, str)):
            raise bad(key, "provider (and model) must be strings")
        text = f"{name}:{model}" if model else name
    elif isinstance(item, str):
        text = item
    else:
        raise bad(key, 'must be "PROVIDER[:MODEL]" or a table {provider, model, options}')
    try:
        found = parse_fallback(text)
    except SeamlineError as exc:
        raise bad(key, exc.message) from None
    options = _options(table.get("options", {}), provider_class(found.provider), f"{key}.options", bad)
    return Fallback(found.provider, found.model, dict(options) or None)


def _enclosed(fallback: Fallback, spec: AgentSpec) -> Fallback:
    """A declared agent's fallback with the options that let it start here (the envelope)."""
    extra = program_options(provider_class(fallback.provider), spec)
    return Fallback(fallback.provider, fallback.model, {**(fallback.options or {}), **extra} or None)


def program_options(cls: type[Provider], agent: AgentSpec | None, default_sandbox: str = "auto") -> dict[str, str]:
    """The options that let a provider which runs a program on this machine start here,
    or :class:`PermissionDenied`. The declared agent's ``sandbox`` (else the server's
    ``default_sandbox``) is passed as the provider option ``sandbox``: the backend runs in
    the whole-process envelope unless the operator said ``none``."""
    if not cls.runs_own_tools:
        return {}
    mode = agent.sandbox if agent is not None else default_sandbox
    spec = cls.options.get("sandbox")
    if spec is not None and mode in spec.choices:
        return {"sandbox": mode}
    if mode == "none":
        return {}
    whose = f"agent {agent.name}" if agent is not None else "the safe defaults"
    fix = 'the operator may declare sandbox = "none"' if agent is not None else "see seamline serve --agents FILE"
    raise PermissionDenied(
        f"{whose}: provider {cls.name} cannot run inside seamline's sandbox (sandbox = {mode!r}); {fix}"
    )


class ServePolicy:
    """Turns what a client asked for into a :class:`Plan`, or refuses it (403 for what
    only the operator may choose, 404 for an unknown agent, 400 for bad input)."""

    def __init__(
        self, workspace: Path, agents: Mapping[str, AgentSpec] | None = None, *, sandbox: str = "auto"
    ) -> None:
        self.workspace = workspace.resolve()
        self.agents = dict(agents or {})
        self.sandbox = sandbox  # serve's --sandbox: the envelope of a program backend no agent declares

    def require_agent(self, name: str) -> AgentSpec:
        agent = self.agents.get(name)
        if agent is None:
            known = ", ".join(self.agents) or "none: the server was started without --agents FILE"
            raise UnknownAgent(f"no agent {name!r} (declared: {known})")
        return agent

    def plan(
        self,
        *,
        provider: str | None,
        model: str | None,
        options: Mapping[str, str],
        workspace: str | None,
        yes: bool,
        agent: str | None,
        budget_usd: float | None = None,
    ) -> Plan:
        """A new session's (or pipeline run's) plan."""
        check_budget(budget_usd)
        if agent is not None:
            spec = self.require_agent(agent)
            if provider is not None and provider != spec.provider:
                raise InvalidRequest(f"agent {agent} runs provider {spec.provider}; leave provider out")
            if model is not None:
                raise PermissionDenied(f"agent {agent}'s model is the operator's choice; leave model out")
            return self._agent_plan(spec, options, workspace, yes, budget_usd)
        name = provider or "offline"
        cls = provider_class(name)
        self.check_client_options(cls, options, None)
        merged = {**dict(options), **program_options(cls, None, self.sandbox)}
        self.check_yes(yes, None)
        return Plan(name, model, merged, self.workspace_in(workspace, (self.workspace,)), yes, None, budget_usd)

    def _agent_plan(
        self,
        spec: AgentSpec,
        options: Mapping[str, str],
        workspace: str | None,
        yes: bool,
        budget_usd: float | None,
    ) -> Plan:
        cls = provider_class(spec.provider)
        self.check_client_options(cls, options, spec)
        self.check_yes(yes, spec)
        merged = {**dict(options), **spec.options, **program_options(cls, spec)}
        return Plan(
            spec.provider,
            spec.model,
            merged,
            self.workspace_in(workspace, spec.workspaces or (self.workspace,)),
            yes,
            spec.name,
            cap_budget(budget_usd, spec),
            tuple(_enclosed(f, spec) for f in spec.fallback),
            spec.on_budget,
        )

    def stored(self, record: Any, options: Mapping[str, str], yes: bool, budget_usd: float | None = None) -> Plan:
        """The plan to revive or fork a stored session: its declared agent's settings, or
        the safe defaults for its provider (a session another surface made may be neither)."""
        check_budget(budget_usd)
        name = (record.metadata or {}).get(AGENT_KEY)
        if isinstance(name, str):
            spec = self.agents.get(name)
            if spec is None or record.provider not in (spec.provider, *(f.provider for f in spec.fallback)):
                raise PermissionDenied(
                    f"session {record.id} belongs to agent {name!r}, which this server does not declare"
                )
            return self._agent_plan(spec, options, record.workspace, yes, budget_usd)
        cls = provider_class(record.provider)
        self.check_client_options(cls, options, None)
        merged = {**dict(options), **program_options(cls, None, self.sandbox)}
        self.check_yes(yes, None)
        ws = self.workspace_in(record.workspace, (self.workspace,))
        return Plan(record.provider, record.model, merged, ws, yes, None, budget_usd)

    def run_on_budget(self, record: Any, asked: OnBudget | None) -> OnBudget:
        """What a run's budget does: what the client asked, else its agent's, else ``fail``."""
        if asked is not None:
            return asked
        spec = self._agent_of(record)
        return spec.on_budget if spec is not None else "fail"

    def _agent_of(self, record: Any) -> AgentSpec | None:
        """The declared agent a stored session belongs to, if any."""
        metadata: Mapping[str, object] = record.metadata or {}
        name = metadata.get(AGENT_KEY)
        return self.agents.get(name) if isinstance(name, str) else None

    def run_budget(self, record: Any, budget_usd: float | None) -> float | None:
        """A run's budget: what the client asked, capped by its agent's."""
        check_budget(budget_usd)
        name = (record.metadata or {}).get(AGENT_KEY)
        spec = self.agents.get(name) if isinstance(name, str) else None
        return cap_budget(budget_usd, spec) if spec is not None else budget_usd

    @staticmethod
    def check_client_options(cls: type[Provider], options: Mapping[str, str], agent: AgentSpec | None) -> None:
        for key in options:
            spec = cls.options.get(key)
            if key != "sandbox" and spec is None:
                continue  # the provider reports an unknown option itself (400)
            if key == "sandbox" or (spec is not None and spec.operator_only):
                raise PermissionDenied(
                    f"option {key!r} names a program, path or endpoint: only the server's operator sets it "
                    f"(seamline serve --agents FILE)"
                )
            if agent is not None and key not in agent.client_options:
                raise PermissionDenied(
                    f"option {key!r} is agent {agent.name}'s operator's choice (not in client_options)"
                )

    @staticmethod
    def check_yes(yes: bool, agent: AgentSpec | None) -> None:
        if yes and (agent is None or not agent.yes):
            whose = f"agent {agent.name} does not allow it" if agent is not None else "no declared agent allows it"
            raise PermissionDenied(f"yes: true (run tools without asking) is refused: {whose} (yes = true in --agents)")

    def workspace_in(self, given: str | None, roots: tuple[Path, ...]) -> Path:
        """``given`` (relative to the first root) resolved, symlinks followed, inside a root."""
        base = roots[0] if roots else self.workspace
        if given is None:
            folder = base
        else:
            path = Path(given).expanduser()
            folder = (path if path.is_absolute() else base / path).resolve()
        if not any(folder == root or folder.is_relative_to(root) for root in roots):
            allowed = ", ".join(str(r) for r in roots)
            raise PermissionDenied(f"workspace {given or folder} is outside the folders this server offers ({allowed})")
        if not folder.is_dir():
            raise InvalidRequest(f"workspace {given} is not a folder")
        return folder


def check_budget(budget_usd: float | None) -> None:
    if budget_usd is not None and not (math.isfinite(budget_usd) and budget_usd >= 0):
        raise InvalidRequest(f"budget_usd must be 0 or more, not {budget_usd}")


def cap_budget(budget_usd: float | None, spec: AgentSpec | None) -> float | None:
    if spec is None or spec.budget_usd is None:
        return budget_usd
    return spec.budget_usd if budget_usd is None else min(budget_usd, spec.budget_usd)
