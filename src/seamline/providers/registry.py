"""The provider registry: built-ins by module path, third parties by entry point.

A third-party backend registers under the ``seamline.providers`` entry-point group.
Installing it makes it *available*; nothing of it is imported or run until a profile,
a pipeline or ``--provider`` names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Final

from seamline.errors import InvalidRequest
from seamline.providers.base import Provider

__all__ = ["ENTRY_POINT_GROUP", "create_provider", "provider_class", "provider_names"]

ENTRY_POINT_GROUP: Final = "seamline.providers"

_BUILTIN: Final[dict[str, str]] = {
    "offline": "seamline.providers.local.offline:OfflineProvider",
    "scripted": "seamline.providers.local.scripted:ScriptedProvider",
    "claude-code": "seamline.providers.agent_clis.claude_code:ClaudeCodeProvider",
    "codex": "seamline.providers.agent_clis.codex:CodexProvider",
    "gemini-cli": "seamline.providers.agent_clis.gemini_cli:GeminiCliProvider",
    "openai": "seamline.providers.model_apis.openai_api:OpenAIProvider",
    "anthropic": "seamline.providers.model_apis.anthropic_api:AnthropicProvider",
    "acp": "seamline.providers.acp.provider:AcpProvider",
    "opencode": "seamline.providers.opencode.provider:OpenCodeProvider",
    "a2a": "seamline.providers.a2a.provider:A2AProvider",
}
_extra: dict[str, type[Provider]] = {}


def register_builtin(name: str, target: str) -> None:
    """Add a built-in by ``module:Class`` path (used by seamline's own provider rooms)."""
    _BUILTIN[name] = target


def register(cls: type[Provider]) -> type[Provider]:
    """Register a provider class in this process (tests, notebooks)."""
    if not cls.name:
        raise ValueError("a provider class needs a name")
    _extra[cls.name] = cls
    return cls


def _entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points  # only when asked: it costs import time

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def provider_names() -> list[str]:
    """Every provider that can be named: built-ins, registered, then installed plug-ins."""
    names = list(_BUILTIN) + [n for n in _extra if n not in _BUILTIN]
    names += [n for n in sorted(_entry_points()) if n not in names]
    return names


def provider_class(name: str) -> type[Provider]:
    if name in _extra:
        return _extra[name]
    target = _BUILTIN.get(name) or _entry_points().get(name)
    if target is None:
        raise InvalidRequest(f"unknown provider {name!r}; known: {', '.join(provider_names())}")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidRequest(f"provider {name!r} cannot be loaded: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a plug-in's import-time bug is reported, not raised
        raise InvalidRequest(f"provider {name!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise InvalidRequest(f"provider {name!r}: {module_name} has no {attr}")
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise InvalidRequest(f"provider {name!r}: {target} is not a seamline Provider")
    return cls


def create_provider(name: str, *, model: str | None = None, options: Mapping[str, str] | None = None) -> Provider:
    """Instantiate a provider by name, validating its options."""
    return provider_class(name)(model=model, options=options)
