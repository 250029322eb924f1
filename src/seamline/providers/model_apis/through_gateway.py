"""A model-API session's requests through seamline's model gateway.

The ``openai`` and ``anthropic`` providers call their API in-process, through the vendor's
SDK; with the gateway on (the default, ``-o gateway=off`` to call the API directly) each
session gets its own :class:`~seamline.providers.programs.model_gateway.SessionGateway`, as
an agent CLI's session does, and its own SDK client pointed at it: the gateway's URL as the
base URL and the session's placeholder as the key, the real key held by the gateway's
upstream. So the model-API runs share with every other run of the process one path for
model traffic: the per-upstream limit of requests at once (``max_concurrent_requests``,
``SEAMLINE_GATEWAY_MAX_CONCURRENT``), an upstream's ``retry-after`` holding the requests that
follow, the budget refusing a request before it is sent, and whatever the session gateway
does to every request (cassettes).

Usage: the provider already reads each response's usage from the stream it decodes, tied to
its step (response id, model answered); that figure is the ledger's. The gateway's own
reading of the same bytes feeds only its budget check (:meth:`SessionGateway._admit`) and
is never emitted, so nothing is counted twice.

Without a key in seamline's environment there is nothing to keep out and no gateway (a
local server that needs no key is called directly), as for the agent CLIs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from seamline.errors import BudgetExceeded, SeamlineError, TransportFailure
from seamline.gateway.meter import Vendor
from seamline.loop.messages import ModelRequest
from seamline.providers.base import ProviderSession
from seamline.providers.programs.model_gateway import (
    GatewayRoute,
    SessionGateway,
    close_session_gateway,
    open_session_gateway,
)
from seamline.redact import url_host
from seamline.usage import Rates

__all__ = ["GatewayClient", "gateway_route", "open_gateway_client"]

_VENDORS: Final[dict[str, Vendor]] = {"openai": "openai", "anthropic": "anthropic"}


def gateway_route(vendor: str, *, key_var: str, base_url_var: str, default_base_url: str) -> GatewayRoute | None:
    """How a model-API provider's SDK is pointed at its API (``None``: a vendor the gateway
    does not meter)."""
    known = _VENDORS.get(vendor)
    if known is None:
        return None
    return GatewayRoute(known, key_vars=(key_var,), base_url_var=base_url_var, default_base_url=default_base_url)


@dataclass(eq=False)
class GatewayClient:
    """One session's SDK client and the gateway it goes through."""

    session: ProviderSession
    gateway: SessionGateway
    client: Any
    vendor: str
    upstream_url: str
    turn: int = 0
    failures_before: int = 0

    async def before_request(self, request: ModelRequest) -> None:
        """Before each model request (each attempt): the turn's budget handed to the gateway
        on its first step; the previous response's usage counted there (so the budget check
        sees it) and its event, which the provider's own figure stands for, dropped."""
        gateway = self.gateway
        if request.turn != self.turn:
            self.turn = request.turn
            gateway.begin_turn(self.session.turn_budget_usd)
        await gateway.settled()
        _drop_queued(gateway)
        self.failures_before = len(gateway.upstream_failures())

    def classified(self, failure: SeamlineError) -> SeamlineError:
        """The failure of a request as the gateway explains it: a request its budget check
        refused is the turn's budget spent (not an invalid request), and an upstream the
        gateway could not reach is named (the SDK saw only its connection to the gateway
        drop)."""
        gateway = self.gateway
        if gateway.budget_refusal is not None:
            return BudgetExceeded(gateway.budget_refusal)
        failures = gateway.upstream_failures()[self.failures_before :]
        if failures and failure.kind == "transport":
            # The gateway names the upstream by its netloc; a password in it stays out.
            netloc = urlsplit(self.upstream_url).netloc
            why = failures[-1].replace(netloc, url_host(self.upstream_url)) if netloc else failures[-1]
            return TransportFailure(f"{self.vendor} API unreachable: {why}")
        return failure

    async def close(self) -> None:
        try:
            await self.client.close()
        except Exception:  # noqa: BLE001 - closing a dead connection must not fail the close
            pass
        finally:
            _drop_queued(self.gateway)
            await close_session_gateway(self.session)


async def open_gateway_client(
    session: ProviderSession,
    route: GatewayRoute | None,
    options: dict[str, str],
    *,
    rates: Callable[[str | None], Rates | None],
    model: str | None,
    upstream_url: str,
    make_client: Callable[[str, str], Any],
) -> GatewayClient | None:
    """The session's gateway, started, and an SDK client pointed at it
    (``make_client(base_url, api_key)`` with the gateway's URL and the placeholder); ``None``
    where the provider calls its API directly (``gateway=off``, no key to keep out)."""
    gateway = await open_session_gateway(session, route, options, rates=rates, model=model)
    if gateway is None:
        return None
    try:
        client = make_client(gateway.base_url, gateway.placeholder)
    except BaseException:
        await close_session_gateway(session)
        raise
    return GatewayClient(
        session=session, gateway=gateway, client=client, vendor=gateway.route.vendor, upstream_url=upstream_url
    )


def _drop_queued(gateway: SessionGateway) -> None:
    usages = gateway.usages
    while not usages.empty():
        usages.get_nowait()
