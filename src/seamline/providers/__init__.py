"""The provider seam and the registry of backends.

The seam is the modules here: ``base`` (:class:`Provider`, :class:`ProviderSession`),
``settle`` (the invariants of a turn), ``registry``, ``settings`` and ``option_kinds``.
Each family of backends is a room below it: ``model_apis``, ``agent_clis``, ``acp``,
``opencode``, ``a2a`` (a remote A2A agent), ``local`` (offline and scripted), and
``programs`` (what every backend that runs a program shares). The modules' paths before the families had rooms still import
(``seamline.providers.acp`` and ``seamline.providers.opencode`` are now the rooms, and
still give their provider class).
"""

from seamline.moved_modules import keep_old_paths
from seamline.providers.base import Capabilities, OptionSpec, PreflightCheck, Provider, ProviderSession
from seamline.providers.registry import create_provider, provider_class, provider_names, register

__all__ = [
    "Capabilities",
    "OptionSpec",
    "PreflightCheck",
    "Provider",
    "ProviderSession",
    "create_provider",
    "provider_class",
    "provider_names",
    "register",
]

keep_old_paths(
    {
        "seamline.providers._retry": "seamline.providers.model_apis.retry",
        "seamline.providers._model_api": "seamline.providers.model_apis.base",
        "seamline.providers.anthropic_api": "seamline.providers.model_apis.anthropic_api",
        "seamline.providers.openai_api": "seamline.providers.model_apis.openai_api",
        "seamline.providers.agent_cli": "seamline.providers.agent_clis.base",
        "seamline.providers.cli_turn": "seamline.providers.agent_clis.turn",
        "seamline.providers.cli_approvals": "seamline.providers.agent_clis.approvals",
        "seamline.providers.cli_parsers": "seamline.providers.agent_clis.parsers",
        "seamline.providers.claude_code": "seamline.providers.agent_clis.claude_code",
        "seamline.providers.codex_hooks": "seamline.providers.agent_clis.codex_hooks",
        "seamline.providers.codex_warm": "seamline.providers.agent_clis.codex_warm",
        "seamline.providers.codex": "seamline.providers.agent_clis.codex",
        "seamline.providers.gemini_cli": "seamline.providers.agent_clis.gemini_cli",
        "seamline.providers.envelope_launch": "seamline.providers.programs.envelope_launch",
        "seamline.providers.program_lookup": "seamline.providers.programs.lookup",
        "seamline.providers.runtime_dir": "seamline.providers.programs.runtime_dir",
        "seamline.providers.warm_process": "seamline.providers.programs.warm_process",
        "seamline.providers.cli_journal": "seamline.providers.programs.journal",
        "seamline.providers._acp_settings": "seamline.providers.programs.agent_settings",
        "seamline.providers._acp_agent": "seamline.providers.acp.agent_process",
        "seamline.providers._acp_translator": "seamline.providers.acp.translator",
        "seamline.providers._opencode_server": "seamline.providers.opencode.server",
        "seamline.providers.offline": "seamline.providers.local.offline",
        "seamline.providers.scripted": "seamline.providers.local.scripted",
    }
)
