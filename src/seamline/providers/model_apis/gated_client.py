"""A model-API provider's SDK client on the gateway's in-process transport.

With the gateway on (the default; ``-o gateway=off`` for the SDK's plain client) the
provider's one SDK client is the SDK's own default ``httpx2`` client, made as the SDK makes
it (its proxies from the environment, its certificates, its connection limits and
redirects), with every transport in it put behind a
:class:`~seamline.gateway.sdk_transport.GatedTransport`. Each session is bound to that
transport by the :class:`~seamline.gateway.sdk_binding.SdkBinding` the provider awaits each
SDK call with (:func:`~seamline.gateway.sdk_binding.sending`): its limit of requests at once
per upstream, its cassette, and, in a turn with a budget, the check that refuses a request
once the budget is spent (the turn then ends ``budget``, nothing sent). No local HTTP hop, no per-session client: the key stays in the
SDK client, in-process.

A session that replays a cassette with no key in the environment gets a client of its own
(a stand-in key, which never leaves the process: the cassette answers).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from seamline.errors import BudgetExceeded, InvalidRequest, SeamlineError
from seamline.gateway.cassette import CassettePlayer, CassetteRecorder
from seamline.gateway.meter import Vendor
from seamline.gateway.sdk_binding import SdkBinding
from seamline.providers.base import ProviderSession
from seamline.providers.programs.model_gateway import gateway_max_concurrent

__all__ = ["REPLAY_KEY", "SessionBinding", "gated_http_client", "mismatch_of", "open_binding"]

REPLAY_KEY: Final = "sl-replay-no-key"
"""The key of a replaying session's own client when there is none: it never leaves the process."""
_VENDORS: Final[dict[str, Vendor]] = {"openai": "openai", "anthropic": "anthropic"}


def gated_http_client(sdk: Any, vendor: str) -> tuple[Any, Any]:
    """The SDK's default ``httpx2`` client with its transports behind the gateway's, and the
    :class:`SdkGate` they share."""
    from seamline.gateway.sdk_transport import GatedTransport, SdkGate  # httpx2 comes with the SDKs

    gate = SdkGate(_VENDORS.get(vendor, "openai"))
    client = sdk.DefaultAsyncHttpxClient()
    # The transports the SDK's client chose (the default one, and one per proxy of the
    # environment), each kept and put behind the gate: routing by URL stays httpx2's.
    client._transport = GatedTransport(client._transport, gate)
    client._mounts = {
        pattern: None if transport is None else GatedTransport(transport, gate)
        for pattern, transport in client._mounts.items()
    }
    return client, gate


class SessionBinding:
    """One session's binding to the gated transport, and what it needs at its close."""

    def __init__(self, binding: SdkBinding, session: ProviderSession, *, own_client: Any = None) -> None:
        self.binding = binding
        self.session = session
        self.own_client = own_client
        """A client of the session's own (a replay without a key), else ``None``."""
        self._mismatches_seen = 0

    def before_request(self) -> None:
        binding = self.binding
        cassette = binding.cassette
        if isinstance(cassette, CassettePlayer):
            self._mismatches_seen = len(cassette.mismatches)
        binding.refused = None
        # Asked by the transport only in a turn with a budget.
        binding.admit = None if self.session.turn_budget_usd is None else self._admit

    def _admit(self) -> str | None:
        """Why the next request must not go out: the turn's budget is spent (the cost the
        turn has counted so far, the request that crossed the line included)."""
        budget = self.session.turn_budget_usd
        spent = self.session.totals.cost_usd
        if budget is None or spent < budget:
            return None
        return (
            f"seamline: the turn's budget of {budget:.6f} USD is spent ({spent:.6f} USD); "
            "no more model requests are sent"
        )

    def classified(self, failure: SeamlineError) -> SeamlineError:
        """A request refused for the spent budget fails ``budget``; one the cassette did not
        hold fails ``invalid_request`` saying where it differs (the SDK saw only a ``400``)."""
        if (refused := self.binding.refused) is not None:
            return BudgetExceeded(refused)
        mismatch = mismatch_of(self.binding.cassette, self._mismatches_seen)
        return InvalidRequest(mismatch) if mismatch is not None else failure

    async def close(self) -> None:
        cassette = self.binding.cassette
        if isinstance(cassette, CassetteRecorder):
            cassette.close()
        if self.own_client is not None:
            try:
                await self.own_client.close()
            except Exception:  # noqa: BLE001 - closing must not fail the close
                pass


def mismatch_of(cassette: object, seen: int) -> str | None:
    """The first mismatch of ``cassette`` (a player) after the first ``seen``."""
    if not isinstance(cassette, CassettePlayer):
        return None
    found = cassette.mismatches[seen:]
    return found[0] if found else None


def open_binding(
    session: ProviderSession, options: dict[str, str], *, vendor: str, key_var: str, key: str | None
) -> SdkBinding:
    """The session's :class:`SdkBinding`: the limit of requests at once (the
    ``max_concurrent_requests`` option, else ``SEAMLINE_GATEWAY_MAX_CONCURRENT``) and its
    cassette, if the run records or replays one."""
    limit = gateway_max_concurrent(options.get("max_concurrent_requests"), os.environ)
    use = session.cassette
    if use is None:
        return SdkBinding(limit=limit)
    places = {"home": str(Path.home())}
    if session.workspace is not None:
        places["workspace"] = str(session.workspace)
    if use.mode == "replay":
        return SdkBinding(limit=limit, cassette=CassettePlayer(use.path, places=places))
    recorder = CassetteRecorder(use.path, vendor=vendor, places=places, hidden=[key or ""], key_var=key_var)
    return SdkBinding(limit=limit, cassette=recorder)
