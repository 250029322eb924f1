"""Typed provider settings: the ``--provider-option NAME=VALUE`` strings of the CLI as
keyword arguments a type checker reads.

>>> from seamline.providers.settings import OpenAISettings
>>> settings = OpenAISettings(base_url="http://127.0.0.1:8000/v1", route="responses")
>>> settings.provider, settings.options()["route"]
('openai', 'responses')

Give one to :class:`seamline.Agent` (``provider=OpenAISettings(...)``); each names its
provider and turns into the same validated options as the CLI's strings
(:meth:`ProviderSettings.options`), so both paths check values in one place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from seamline.providers.base import Provider
from seamline.providers.registry import create_provider

__all__ = [
    "ACPSettings",
    "AnthropicSettings",
    "ClaudeCodeSettings",
    "CodexSettings",
    "GeminiCLISettings",
    "OfflineSettings",
    "OpenAISettings",
    "OpenCodeSettings",
    "ProviderSettings",
    "ScriptedSettings",
]

Effort: TypeAlias = Literal["low", "medium", "high"]
#: ``bwrap``/``auto``: the program runs inside seamline's envelope (docs/sandbox.md); ``none``: not
EnvelopeMode: TypeAlias = Literal["bwrap", "auto", "none"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderSettings:
    """Base of the typed settings: ``provider`` names the provider, ``model`` its model
    (``None``: the provider's default); every other field is one of its options, ``None``
    meaning the provider's default."""

    provider: ClassVar[str] = ""
    model: str | None = None

    def options(self) -> dict[str, str]:
        """The options as the CLI spells them (strings), leaving out those not given."""
        found: dict[str, str] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name == "model" or value is None:
                continue
            if isinstance(value, bool):
                found[item.name] = "true" if value else "false"
            elif isinstance(value, tuple):
                found[item.name] = ",".join(str(v) for v in value)
            else:
                found[item.name] = str(value)
        return found

    def create(self) -> Provider:
        """The provider these settings describe; option values are checked here."""
        return create_provider(self.provider, model=self.model, options=self.options())


@dataclass(frozen=True, kw_only=True, slots=True)
class _ModelAPISettings(ProviderSettings):
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning_effort: Effort | None = None
    timeout: float | None = None
    max_retries: int | None = None
    retry_base_delay: float | None = None
    retry_max_delay: float | None = None
    max_retry_after: float | None = None
    #: the model requests through seamline's gateway (``on``, the default) or straight to the API
    gateway: Literal["on", "off"] | None = None
    #: model requests at once to the upstream, shared by every run of the process
    max_concurrent_requests: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenAISettings(_ModelAPISettings):
    """The OpenAI API or any compatible server (``base_url``); ``route`` picks the Chat
    Completions or the Responses API."""

    provider: ClassVar[str] = "openai"
    route: Literal["chat", "responses"] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AnthropicSettings(_ModelAPISettings):
    """The Anthropic Messages API."""

    provider: ClassVar[str] = "anthropic"


@dataclass(frozen=True, kw_only=True, slots=True)
class _AgentCLISettings(ProviderSettings):
    executable: str | None = None
    turn_timeout: float | None = None
    max_retries: int | None = None
    grace: float | None = None
    effort: str | None = None
    base_url: str | None = None
    #: the program's model requests through seamline's gateway (``on``, the default) or not
    gateway: Literal["on", "off"] | None = None
    #: model requests at once to the upstream, shared by every session of the process
    max_concurrent_requests: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaudeCodeSettings(_AgentCLISettings):
    """The Claude Code CLI."""

    provider: ClassVar[str] = "claude-code"
    #: Claude Code's settings layers (``user``, ``project``, ``local``); default ``user`` only
    setting_sources: tuple[str, ...] | None = None
    sandbox: EnvelopeMode | None = None
    allow_hosts: tuple[str, ...] | None = None
    #: the envelope's limits: tasks, memory of the whole envelope, its private /tmp (bytes)
    max_processes: int | None = None
    memory_bytes: int | None = None
    tmp_bytes: int | None = None
    allowed_tools: tuple[str, ...] | None = None
    permission_mode: Literal["default", "acceptEdits", "plan", "bypassPermissions"] | None = None
    max_budget_usd: float | None = None
    config_dir: str | None = None
    #: one live CLI process per session (True, the default) or one per turn (False)
    warm: bool | None = None
    #: seconds a warm process may sit idle between turns before it is ended
    warm_idle: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CodexSettings(_AgentCLISettings):
    """The Codex CLI."""

    provider: ClassVar[str] = "codex"
    api_key_env: str | None = None
    #: the envelope, or (kept for old code) Codex's own mode; prefer ``codex_sandbox`` for that
    sandbox: EnvelopeMode | Literal["read-only", "workspace-write", "danger-full-access"] | None = None
    allow_hosts: tuple[str, ...] | None = None
    #: the envelope's limits: tasks, memory of the whole envelope, its private /tmp (bytes)
    max_processes: int | None = None
    memory_bytes: int | None = None
    tmp_bytes: int | None = None
    codex_sandbox: Literal["read-only", "workspace-write", "danger-full-access"] | None = None
    codex_home: str | None = None
    websockets: bool | None = None
    #: one live ``codex app-server`` per session (True, the default) or one ``codex exec`` per turn (False)
    warm: bool | None = None
    #: seconds a warm process may sit idle between turns before it is ended
    warm_idle: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class GeminiCLISettings(_AgentCLISettings):
    """The Gemini CLI."""

    provider: ClassVar[str] = "gemini-cli"
    sandbox: EnvelopeMode | None = None
    allow_hosts: tuple[str, ...] | None = None
    #: the envelope's limits: tasks, memory of the whole envelope, its private /tmp (bytes)
    max_processes: int | None = None
    memory_bytes: int | None = None
    tmp_bytes: int | None = None
    approval_mode: Literal["default", "auto_edit", "yolo", "plan"] | None = None
    gemini_home: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ACPSettings(ProviderSettings):
    """Any agent that speaks the Agent Client Protocol, started with ``command``."""

    provider: ClassVar[str] = "acp"
    #: claude-agent-acp's settings layers (``user``, ``project``, ``local``); default none
    setting_sources: tuple[str, ...] | None = None
    command: str | None = None
    turn_timeout: float | None = None
    request_timeout: float | None = None
    cancel_timeout: float | None = None
    grace: float | None = None
    auth_method: str | None = None
    api_key_env: str | None = None
    sandbox: EnvelopeMode | None = None
    allow_hosts: tuple[str, ...] | None = None
    #: the envelope's limits: tasks, memory of the whole envelope, its private /tmp (bytes)
    max_processes: int | None = None
    memory_bytes: int | None = None
    tmp_bytes: int | None = None
    #: the agent's model requests through seamline's gateway (``on``, the default, where its
    #: vendor is known) or not; ``gateway_vendor`` names the vendor of an agent seamline does
    #: not know (``anthropic``, ``openai``, ``gemini``)
    gateway: Literal["on", "off"] | None = None
    gateway_vendor: Literal["anthropic", "openai", "gemini"] | None = None
    #: model requests at once to the upstream, shared by every session of the process
    max_concurrent_requests: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenCodeSettings(ProviderSettings):
    """OpenCode's server."""

    provider: ClassVar[str] = "opencode"
    #: load the workspace's own OpenCode configuration too (default False)
    project_config: bool | None = None
    executable: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    startup_timeout: float | None = None
    turn_timeout: float | None = None
    request_timeout: float | None = None
    cancel_timeout: float | None = None
    max_retries: int | None = None
    grace: float | None = None
    sandbox: EnvelopeMode | None = None
    allow_hosts: tuple[str, ...] | None = None
    #: the envelope's limits: tasks, memory of the whole envelope, its private /tmp (bytes)
    max_processes: int | None = None
    memory_bytes: int | None = None
    tmp_bytes: int | None = None
    #: OpenCode's model requests through seamline's gateway (``on``, the default, with
    #: seamline's provider) or not
    gateway: Literal["on", "off"] | None = None
    #: model requests at once to the upstream, shared by every session of the process
    max_concurrent_requests: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OfflineSettings(ProviderSettings):
    """The offline provider: answers from the workspace's files, no model."""

    provider: ClassVar[str] = "offline"
    max_files: int | None = None
    passages: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptedSettings(ProviderSettings):
    """The scripted provider playing a JSON script file (see :mod:`seamline.testing`)."""

    provider: ClassVar[str] = "scripted"
    script: str | None = None
