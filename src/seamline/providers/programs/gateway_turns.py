"""The gateway's session policy for the programs that are pointed at it only sometimes.

An ACP agent is any program and OpenCode may use a provider of its own configuration: the
gateway holds where seamline knows how the program reaches its API (the route), and where
it does not, the session's first turn says so, never silently (:func:`routed_turn`).

A program that reports a refused request as the failure of its whole turn (an ACP agent's
``session/prompt`` error, OpenCode's session error) has its turn end ``budget`` when that
refusal was the gateway's, for the turn's budget: the failure was seamline's doing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Final

from seamline.errors import SeamlineError
from seamline.events import Complete, Event, Raw
from seamline.providers.base import ProviderSession
from seamline.providers.programs.model_gateway import GatewayRoute, gated_turn, gateway_of

__all__ = ["routed_turn"]

_UNROUTED_SAID: Final = "gateway_unrouted_said"


async def routed_turn(
    session: ProviderSession,
    turn: AsyncIterator[Event],
    route: GatewayRoute | None,
    options: Mapping[str, str],
    *,
    unrouted_because: str,
) -> AsyncIterator[Event]:
    """``turn`` through the session's gateway (:func:`gated_turn`, the gateway opened before);
    without a route, the session's first turn says why the key is in the program's
    environment (``unrouted_because``, or ``gateway=off``)."""
    if route is None and not session.state.get(_UNROUTED_SAID):
        session.state[_UNROUTED_SAID] = True
        because = (
            "gateway=off: the program calls its API with the key in its environment"
            if options.get("gateway", "on") == "off"
            else unrouted_because
        )
        yield Raw(source="seamline", payload={"gateway": "off", "because": because})
    async for event in gated_turn(session, _ended_by_budget(session, turn), route, options):
        yield event


async def _ended_by_budget(session: ProviderSession, turn: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """``turn``, where a failure that follows the gateway's budget refusal ends it as the
    refusal's doing (:func:`metered_turn` then makes the end ``budget``)."""
    try:
        async for event in turn:
            yield event
    except SeamlineError as exc:
        gateway = gateway_of(session)
        if gateway is None or gateway.budget_refusal is None:
            raise
        yield Complete(outcome="failed", stop_reason=exc.kind, text="")
    finally:
        await turn.aclose()  # type: ignore[attr-defined]
