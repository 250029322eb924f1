"""An ACP agent's model traffic through seamline's gateway.

An ACP agent is any program, so seamline can point it at the gateway only where it knows
which vendor's variables the agent reads: by the agent's program name
(:data:`KNOWN_AGENTS`: ``claude-agent-acp`` reads ``ANTHROPIC_*``, ``gemini --acp``
``GEMINI_*``/``GOOGLE_GEMINI_BASE_URL``, ``codex-acp`` ``OPENAI_*``), or by the operator's
``-o gateway_vendor=anthropic|openai|gemini``. The agent is then started with the
gateway's URL and a placeholder in those variables (and in ``api_key_env``'s, whose key
``authenticate`` passes), and the real key never enters its environment or its envelope. An agent whose vendor is not known calls its API itself with
the key in its environment, and its session's first turn says so (a ``raw`` event), never
silently.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import Final

from seamline.errors import InvalidRequest
from seamline.events import Event
from seamline.providers.base import OptionSpec, ProviderSession
from seamline.providers.programs.gateway_turns import routed_turn
from seamline.providers.programs.model_gateway import GatewayRoute

__all__ = [
    "GATEWAY_VENDOR_OPTION",
    "KNOWN_AGENTS",
    "VENDOR_ROUTES",
    "acp_gated_turn",
    "acp_route",
    "other_vendors_keys",
]

#: How each vendor's programs are pointed at its API (the variables Claude Code, Codex and
#: Gemini CLI read; the ACP agents built on them read the same).
VENDOR_ROUTES: Final[dict[str, GatewayRoute]] = {
    "anthropic": GatewayRoute(
        vendor="anthropic",
        key_vars=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
        base_url_var="ANTHROPIC_BASE_URL",
        default_base_url="https://api.anthropic.com",
    ),
    "openai": GatewayRoute(
        vendor="openai",
        key_vars=("OPENAI_API_KEY",),
        base_url_var="OPENAI_BASE_URL",
        default_base_url="https://api.openai.com/v1",
    ),
    "gemini": GatewayRoute(
        vendor="gemini",
        key_vars=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        base_url_var="GOOGLE_GEMINI_BASE_URL",
        default_base_url="https://generativelanguage.googleapis.com",
    ),
}

#: The ACP agents whose vendor seamline knows, by program name.
KNOWN_AGENTS: Final[dict[str, str]] = {
    "claude-agent-acp": "anthropic",
    "claude-code-acp": "anthropic",
    "codex-acp": "openai",
    "gemini": "gemini",
}

GATEWAY_VENDOR_OPTION: Final = OptionSpec(
    "whose API variables the agent reads, for seamline's gateway (anthropic, openai, gemini; default: known "
    "for claude-agent-acp, codex-acp and gemini --acp; for another agent without it, the key stays in its "
    "environment)",
    choices=("anthropic", "openai", "gemini"),
    operator_only=True,
)


def acp_route(argv: Sequence[str], options: Mapping[str, str]) -> GatewayRoute | None:
    """The agent's route to its API: ``gateway_vendor=``, else its program's known vendor;
    None where neither says (the agent then calls its API itself)."""
    vendor = options.get("gateway_vendor") or (KNOWN_AGENTS.get(PurePath(argv[0]).name) if argv else None)
    if not vendor:
        return None
    route = VENDOR_ROUTES.get(vendor)
    if route is None:
        raise InvalidRequest(f"acp: gateway_vendor={vendor!r}: choose one of {', '.join(VENDOR_ROUTES)}")
    named = options.get("api_key_env")
    if named and named not in route.key_vars:
        # The key `authenticate` passes is the one the gateway keeps out (the agent gets the
        # placeholder in that variable, and over ACP).
        route = replace(route, key_vars=(named, *route.key_vars))
    return route


def other_vendors_keys(route: GatewayRoute) -> frozenset[str]:
    """The other vendors' key variables: an agent routed through the gateway needs none of
    them, so the envelope keeps them out."""
    return frozenset(n for r in VENDOR_ROUTES.values() for n in r.key_vars) - set(route.key_vars)


async def acp_gated_turn(
    session: ProviderSession,
    turn: AsyncIterator[Event],
    route: GatewayRoute | None,
    options: Mapping[str, str],
    program: str,
) -> AsyncIterator[Event]:
    """``turn`` through the session's gateway; where the agent's vendor is not known, the
    session's first turn says why its key is in its environment."""
    because = (
        f"the vendor of ACP agent {program!r} is not known: it calls its API with the key in its "
        "environment (-o gateway_vendor=anthropic|openai|gemini sends it through the gateway)"
    )
    async for event in routed_turn(session, turn, route, options, unrouted_because=because):
        yield event
