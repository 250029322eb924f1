"""The models of the HTTP API v1: the request bodies clients send, decoded with msgspec
(unknown fields refused)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["AgentChoice", "ForkRequest", "NewPipelineRun", "NewRun", "NewSession", "PermissionReply", "RevertRequest"]


class NewSession(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions``."""

    provider: str | None = None  # the safe defaults' "offline" unless an agent is named
    agent: str | None = None
    model: str | None = None
    options: dict[str, str] = {}
    workspace: str | None = None
    yes: bool = False
    metadata: dict[str, Any] = {}


class NewRun(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions/{session_id}/runs``."""

    prompt: str
    busy: Literal["reject", "enqueue"] = "reject"
    max_steps: int = 50
    budget_usd: float | None = None
    options: dict[str, str] = {}
    yes: bool = False


class NewPipelineRun(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/pipelines/{name}/runs``."""

    prompt: str
    provider: str | None = None
    agent: str | None = None
    model: str | None = None
    options: dict[str, str] = {}
    workspace: str | None = None
    yes: bool = False
    max_steps: int = 50
    budget_usd: float | None = None


class ForkRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions/{session_id}/fork``."""

    at: int | None = None
    options: dict[str, str] = {}
    yes: bool = False


class RevertRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/sessions/{session_id}/revert``."""

    to_step: int = 0
    force: bool = False


class PermissionReply(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/runs/{run_id}/permissions/{request_id}``."""

    decision: Literal["allow", "deny"]
    scope: Literal["once", "session", "always"] = "once"


class AgentChoice(msgspec.Struct, forbid_unknown_fields=True):
    """What an AG-UI thread's session runs on: ``forwardedProps.seamline``, or a declared agent."""

    provider: str = "offline"
    model: str | None = None
    options: dict[str, str] = {}
    workspace: str | None = None
    yes: bool = False
    max_steps: int = 50
    budget_usd: float | None = None
