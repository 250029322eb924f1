"""The models of the HTTP API v1: the bodies clients send, the query and header parameters
they may give, and the replies routes send back.

The request bodies are what the routes decode with (msgspec, unknown fields refused); the
parameter and reply models describe what the routes read and write. Each route declares
its models with :func:`seamline.server.operations.operation`, and the OpenAPI document is
generated from them (:mod:`seamline.server.api_document`). On a request body, ``Meta``
carries descriptions and ``extra_json_schema`` only, never a constraint msgspec would
enforce: a ``minimum`` there is the document's word for what the run hub and the policy
check with their own messages. A reply field that is not always sent defaults to ``UNSET``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

__all__ = [
    "AgUiRunInput",
    "AgentChoice",
    "AgentInfo",
    "AgentList",
    "DiffQuery",
    "ErrorReply",
    "EventsQuery",
    "ForkRequest",
    "Info",
    "MergeRequest",
    "Merged",
    "NewPipelineRun",
    "NewRun",
    "NewSession",
    "PermissionAnswered",
    "PermissionReply",
    "PipelineList",
    "ProviderList",
    "ProvidersQuery",
    "Removed",
    "ResumeHeaders",
    "RevertRequest",
    "Reverted",
    "RunList",
    "RunSummary",
    "RunsQuery",
    "SessionList",
    "SessionRow",
    "SessionsQuery",
    "TraceSummary",
    "TraceVerification",
    "Transcript",
    "WorktreeDiff",
    "WorktreeDiscarded",
]

Options = Annotated[
    dict[str, str],
    Meta(
        description="provider options (see `seamline providers list --options`); one that names a program, "
        "path or endpoint is 403 (the operator's --agents FILE sets it), and with an agent only its "
        "client_options are taken"
    ),
]
Agent = Annotated[
    str | None,
    Meta(description="a declared agent (GET /v1/agents): its provider, model, options, sandbox and budget"),
]
Yes = Annotated[
    bool, Meta(description="allow write and execute tools unasked: 403 unless the chosen agent declares yes = true")
]
# The safe defaults' provider when no agent is named; the field itself stays None so that
# the hub can tell "not given" from "offline".
DefaultProvider = Annotated[str | None, Meta(extra_json_schema={"default": "offline"})]
Steps = Annotated[int, Meta(extra_json_schema={"minimum": 1})]
Budget = Annotated[float | None, Meta(extra_json_schema={"minimum": 0})]
OnBudgetChoice = Annotated[
    Literal["fail", "pause"] | None,
    Meta(
        description="what reaching budget_usd does: fail the run, or pause it (status paused) until "
        "POST /v1/runs/{run_id}/budget raises it; default: the agent's on_budget, else fail"
    ),
]


# -- request bodies ---------------------------------------------------------------------------
class NewSession(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions``."""

    provider: DefaultProvider = None
    agent: Agent = None
    model: str | None = None
    options: Options = {}
    workspace: Annotated[
        str | None,
        Meta(
            description="folder the tools use: the server's --workspace or one under it, or under a root "
            "of the chosen agent (default: the first)"
        ),
    ] = None
    yes: Yes = False
    metadata: Annotated[dict[str, Any], Meta(description="the key `agent` is the server's")] = {}


class NewRun(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions/{session_id}/runs``."""

    prompt: str
    busy: Literal["reject", "enqueue"] = "reject"
    max_steps: Steps = 50
    budget_usd: Budget = None
    on_budget: OnBudgetChoice = None
    options: Options = {}
    yes: Yes = False


class NewPipelineRun(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/pipelines/{name}/runs``."""

    prompt: str
    provider: DefaultProvider = None
    agent: Agent = None
    model: str | None = None
    options: Options = {}
    workspace: str | None = None
    yes: Yes = False
    max_steps: Steps = 50
    budget_usd: Budget = None
    on_budget: OnBudgetChoice = None


class BudgetRaise(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/runs/{run_id}/budget``."""

    budget_usd: Annotated[
        float,
        Meta(ge=0, description="the run's new budget in USD, in all (what it spent before the pause included)"),
    ]


class ForkRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions/{session_id}/fork``."""

    at: int | None = None
    options: Options = {}
    yes: Yes = False


class RevertRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions/{session_id}/revert``."""

    to_step: Annotated[int, Meta(extra_json_schema={"minimum": 0})] = 0
    force: bool = False


class MergeRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions/{session_id}/merge``."""

    squash: Annotated[bool, Meta(description="one commit of all the run's turns, not a merge commit")] = False


class PermissionReply(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/runs/{run_id}/permissions/{request_id}``."""

    decision: Literal["allow", "deny"]
    scope: Literal["once", "session", "always"] = "once"


class AgentChoice(msgspec.Struct, forbid_unknown_fields=True):
    """What an AG-UI thread's session runs on: ``forwardedProps.seamline``, or a declared agent."""

    provider: str = "offline"
    model: str | None = None
    options: Options = {}
    workspace: str | None = None
    yes: bool = False
    max_steps: Steps = 50
    budget_usd: float | None = None
    pipeline: Annotated[
        str | None,
        Meta(description="a built-in pipeline to run on the prompt instead of a turn on the thread's session"),
    ] = None


class _AgUiMessage(msgspec.Struct):
    id: str
    role: str


class _AgUiResume(msgspec.Struct, rename="camel"):
    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = UNSET


class _ForwardedProps(msgspec.Struct):
    seamline: Annotated[
        AgentChoice | UnsetType,
        Meta(description="how the thread's session is opened, or the pipeline to run (only that on a declared agent)"),
    ] = UNSET


class _RunAgentInput(msgspec.Struct, rename="camel"):
    # The shape the document shows; ag_ui's own RunAgentInput (pydantic) decodes the body.
    thread_id: Annotated[str, Meta(description="names the session (opened on first use)")]
    run_id: Annotated[str, Meta(description="echoed in RUN_STARTED and RUN_FINISHED")]
    messages: Annotated[list[_AgUiMessage], Meta(description="the last user message is the prompt")]
    parent_run_id: str | UnsetType | None = UNSET
    tools: list[dict[str, Any]] | UnsetType = UNSET
    context: list[dict[str, Any]] | UnsetType = UNSET
    state: Any = UNSET
    forwarded_props: _ForwardedProps | UnsetType = UNSET
    resume: Annotated[
        list[_AgUiResume] | UnsetType | None,
        Meta(description="answers to the thread's pending interrupts: payload {decision, scope}"),
    ] = UNSET


AgUiRunInput = Annotated[_RunAgentInput, Meta(description="AG-UI RunAgentInput")]
"""``POST /v1/agui`` and ``POST /v1/agents/{name}/agui``."""


# -- query and header parameters --------------------------------------------------------------
class ProvidersQuery(msgspec.Struct):
    preflight: bool = True


class SessionsQuery(msgspec.Struct):
    limit: Annotated[int, Meta(ge=0, le=10_000)] = 100


class DiffQuery(msgspec.Struct):
    stat: Annotated[bool, Meta(description="files changed and counts (`git diff --stat`), not the whole diff")] = False


class RunsQuery(msgspec.Struct):
    session_id: str | UnsetType = UNSET


class EventsQuery(msgspec.Struct):
    format: Literal["agui", "seamline"] = "agui"
    stream: Literal["sse", "ndjson"] | UnsetType = UNSET
    after: str | UnsetType = UNSET
    interrupts: bool = False


class ResumeHeaders(msgspec.Struct):
    last_event_id: str | UnsetType = msgspec.field(name="Last-Event-ID", default=UNSET)


# -- replies ----------------------------------------------------------------------------------
class _ErrorBody(msgspec.Struct):
    kind: str
    message: str
    role: Annotated[
        str | None, Meta(description="on a 403 for a role: the role that would be needed (operator or admin)")
    ] = None


class ErrorReply(msgspec.Struct):
    """Every error: a classified kind and one line for people."""

    error: _ErrorBody


class Info(msgspec.Struct):
    name: str
    version: str
    api: str
    agui_protocol_version: str
    formats: list[str]
    store: str
    auth: bool
    user: Annotated[str, Meta(description="who the request is: a user's name, token (--token) or local")]
    role: Literal["viewer", "operator", "admin"]


class _PreflightCheck(msgspec.Struct):
    name: str
    ok: bool
    detail: str


class _ProviderRow(msgspec.Struct):
    name: str
    error: Annotated[str | UnsetType, Meta(description="why the provider cannot be loaded")] = UNSET
    description: str | UnsetType = UNSET
    default_model: str | UnsetType | None = UNSET
    capabilities: dict[str, Any] | UnsetType = UNSET
    preflight: list[_PreflightCheck] | UnsetType = UNSET
    ready: bool | UnsetType = UNSET


class ProviderList(msgspec.Struct):
    providers: list[_ProviderRow]


class AgentInfo(msgspec.Struct):
    """A declared agent as clients see it: never its option values."""

    name: str
    description: str
    provider: str
    model: str | None
    workspaces: list[str]
    sandbox: str
    budget_usd: float | None
    on_budget: Annotated[
        Literal["fail", "pause"], Meta(description="what reaching budget_usd does to a run: fail, or pause")
    ]
    yes: bool
    client_options: list[str]


class AgentList(msgspec.Struct):
    agents: list[AgentInfo]


class SessionRow(msgspec.Struct):
    """A stored session, with its cost and whether this server holds it."""

    id: str
    provider: str
    model: str | None
    provider_session_id: str | None
    parent_id: str | None
    workspace: str | None
    mode: str
    status: str
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    run_options: Annotated[dict[str, Any], Meta(description="what the session was started with; no secrets")]
    cost_usd: Annotated[float | None, Meta(description="null when some usage had no known price")]
    input_tokens: int
    output_tokens: int
    live: Annotated[bool, Meta(description="held open by this server")]
    busy: Annotated[bool, Meta(description="running or queuing a turn")]
    runs: list[str]
    title: Annotated[str, Meta(description="the first line of the session's first prompt ('' before one)")]


class SessionList(msgspec.Struct):
    sessions: list[SessionRow]


class Removed(msgspec.Struct):
    removed: Annotated[str, Meta(description="the id of the session removed")]


class Transcript(msgspec.Struct):
    session_id: str
    entries: list[dict[str, Any]]
    files: list[dict[str, Any]]


class Reverted(msgspec.Struct):
    session_id: str
    workspace: str
    to_step: int
    steps_undone: int
    restored: list[str]


class WorktreeDiff(msgspec.Struct):
    session_id: str
    branch: str
    base: Annotated[str, Meta(description="the commit the run started from")]
    state: Annotated[str, Meta(description="open, merged or discarded")]
    diff: Annotated[str, Meta(description="as `git diff` (or `git diff --stat`) prints it")]


class Merged(msgspec.Struct):
    session_id: str
    branch: str
    into: Annotated[str, Meta(description="the branch merged into, in the main working tree")]
    commits: int
    commit: Annotated[str | None, Meta(description="the new commit; null when the run changed nothing")]
    squashed: bool


class WorktreeDiscarded(msgspec.Struct):
    session_id: str
    branch: str
    path: Annotated[str, Meta(description="the worktree removed")]
    state: str


class _PendingPermission(msgspec.Struct):
    request_id: str
    call_id: str | None
    tool: str
    arguments: dict[str, Any]
    reason: str


class _PausedAt(msgspec.Struct):
    budget: Annotated[Literal["run", "pipeline"], Meta(description="the run's own budget, or its pipeline's")]
    budget_usd: float
    spent_usd: float


class RunSummary(msgspec.Struct):
    id: str
    session_id: Annotated[str | None, Meta(description="null for a pipeline run")]
    pipeline: str | None
    started_by: Annotated[
        str | None,
        Meta(description="the user that started it (token for --token); null on a server that asks no token"),
    ]
    status: Annotated[
        Literal["queued", "running", "completed", "failed", "aborted", "budget", "paused"],
        Meta(description="paused: stopped at its budget (see paused); POST /v1/runs/{run_id}/budget goes on"),
    ]
    stop_reason: str | None
    prompt: str
    created_at: float
    finished_at: float | None
    events: Annotated[int, Meta(description="events so far; the last event id")]
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    pending_permissions: list[_PendingPermission]
    current_tool: Annotated[str | None, Meta(description="the tool called and not answered yet, if any")]
    paused: Annotated[
        _PausedAt | None,
        Meta(description="while the run is paused at its budget: which budget, its cap, what was spent"),
    ] = None


class RunList(msgspec.Struct):
    runs: list[RunSummary]


class PermissionAnswered(msgspec.Struct):
    request_id: str
    decision: Literal["allow", "deny"]
    scope: Literal["once", "session", "always"]


class PipelineList(msgspec.Struct):
    pipelines: list[str]


class TraceSummary(msgspec.Struct):
    # What the header and the run_end record hold is whatever the trace file says.
    run_id: str | None
    pipeline: Any
    definition_hash: Any
    head_hash: str
    fingerprint: str
    records: int
    outcome: Any
    stop_reason: Any
    detail: Any
    ok: bool
    problems: list[str]
    replayable: bool
    replay_reasons: list[str]
    notes: list[str]
    anchored: bool


class TraceVerification(msgspec.Struct):
    ok: bool
    replayable: bool
    problems: list[str]


class EvalListed(msgspec.Struct):
    """One kept evaluation (``seamline eval list``)."""

    id: str
    dataset: str
    status: str
    variants: list[str]
    trials: int
    planned: int


class EvalList(msgspec.Struct):
    evaluations: list[EvalListed]


class EvalReport(msgspec.Struct):
    """An evaluation's figures, as ``seamline eval show ID --json`` prints them (the pass@k
    and pass^k keys of each variant are named after its samples: ``pass@4``, ``pass^4``)."""

    id: str
    dataset: str
    status: str
    samples: int
    trials: dict[str, int]
    variants: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    test: str
    results: list[dict[str, Any]]
