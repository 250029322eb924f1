"""A program's model traffic through seamline's gateway, for the length of a session.

A backend that runs a program (an agent CLI) declares how the program is pointed at a model
API (:class:`GatewayRoute`: the vendor, the variables holding the key and the base URL, the
vendor's default URL). When the key is in seamline's environment, the session gets a
:class:`SessionGateway`: the program is started with the gateway's URL and a placeholder
key, so the real key never enters its environment or the envelope; every response is
metered from the wire and reaches the turn as a ``usage`` event while the turn runs; and
once the turn's budget is spent the next model request is refused before it is sent.

:func:`metered_turn` wraps a turn's events: the program's own usage figures are set aside
(the wire's are the ledger's; a difference is reported as a ``raw`` event, never counted
twice), the wire's are merged in as they come, and a turn the gateway stopped for its
budget ends ``budget``.

Requests take turns at their upstream across every session of the process: at most
``max_concurrent_requests`` (else ``SEAMLINE_GATEWAY_MAX_CONCURRENT``) at once, the rest
waiting their turn (:mod:`seamline.gateway.upstream_slots`).

A session with a cassette (``ProviderSession.cassette``, from the run's ``record`` or
``replay``) records its exchanges through the gateway, or is answered from the file with
no key needed; a request the file does not hold ends the turn ``failed`` with an
``invalid_request`` error saying where it differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest
from seamline.events import Complete, Error, Event, Raw, ToolResult, Usage
from seamline.gateway import ModelGateway, Upstream
from seamline.gateway.cassette import CassettePlayer, CassetteRecorder, CassetteUse
from seamline.gateway.meter import Vendor
from seamline.providers.base import OptionSpec, ProviderSession
from seamline.usage import Rates, priced_usage

__all__ = [
    "GATEWAY_OPTIONS",
    "MAX_CONCURRENT_VAR",
    "STORED_LOGIN_NOTE",
    "GatewayRoute",
    "SessionGateway",
    "close_session_gateway",
    "gated_turn",
    "gateway_env",
    "gateway_max_concurrent",
    "gateway_of",
    "gateway_upstream",
    "metered_turn",
    "open_session_gateway",
]

MAX_CONCURRENT_VAR: Final = "SEAMLINE_GATEWAY_MAX_CONCURRENT"
STORED_LOGIN_NOTE: Final = "the gateway cannot hold it: the program calls its API itself"
"""What a login the program keeps in its own files means for the gateway (it refreshes its
tokens itself, against its vendor's login servers): said by ``providers list`` and
``providers check``, as the session's ``{"gateway": "off"}`` note says it at run time."""

GATEWAY_OPTIONS: Final[dict[str, OptionSpec]] = {
    "gateway": OptionSpec(
        "send the program's model requests through seamline's gateway: the real key stays out of "
        "its environment and envelope, usage is read from the wire, a budget stops the turn "
        "mid-way (off: the program calls its API itself)",
        default="on",
        choices=("on", "off"),
    ),
    "max_concurrent_requests": OptionSpec(
        "the most model requests in flight at once to the upstream, counting every run of the "
        "process; the rest wait their turn (0: no limit; default: $SEAMLINE_GATEWAY_MAX_CONCURRENT, "
        "else none; where runs name different limits for one upstream, the smallest holds)",
        kind="count",
        # One client's small limit would slow every run of a server sharing that upstream.
        operator_only=True,
    ),
}

_IDLE_WAIT_S: Final = 5.0
"""How long the end of a turn waits for a response still passing through the gateway."""


@dataclass(frozen=True, slots=True)
class GatewayRoute:
    """How a program is pointed at its model API."""

    vendor: Vendor
    key_vars: tuple[str, ...]
    """The variables the program reads its key from, the preferred first."""
    base_url_var: str
    default_base_url: str

    def secret(self, environ: Mapping[str, str]) -> tuple[str, str] | None:
        """The first key variable set, and its value."""
        for name in self.key_vars:
            if environ.get(name):
                return name, environ[name]
        return None


class SessionGateway:
    """The gateway of one session: started on the session's first turn, closed with it."""

    def __init__(
        self,
        route: GatewayRoute,
        *,
        upstream_url: str,
        key_var: str,
        secret: str,
        rates: Callable[[str | None], Rates | None],
        model: str | None,
        max_concurrent: int | None = None,
        cassette: CassetteRecorder | CassettePlayer | None = None,
    ) -> None:
        self.route = route
        self.key_var = key_var
        self._gateway = ModelGateway()
        self._upstream = Upstream(route.vendor, upstream_url, secret or None, max_concurrent=max_concurrent)
        self.cassette = cassette
        self._rates = rates
        self._model = model
        self.usages: asyncio.Queue[Event] = asyncio.Queue()
        self.budget_usd: float | None = None
        self.spent_usd = 0.0
        self.budget_refusal: str | None = None
        self.wire_tokens = 0
        self._binding = self._gateway.bind(
            self._upstream, on_usage=self._on_usage, admit=self._admit, cassette=cassette
        )
        self._failures_before = 0
        self._mismatches_before = 0
        self._requests_before = 0
        self._refusals_seen = 0

    @property
    def port(self) -> int:
        return self._gateway.port

    @property
    def base_url(self) -> str:
        """The URL the program is given in place of its API's."""
        return self._gateway.base_url(self._binding)

    @property
    def placeholder(self) -> str:
        """The key the program (or an in-process SDK client) is given in place of the real one."""
        return self._binding.placeholder

    def upstream_failures(self) -> list[str]:
        """Why requests of this session could not reach the upstream, oldest first."""
        return list(self._binding.failures)

    def new_refusals(self) -> list[Raw]:
        """The requests refused since last asked (no placeholder this gateway issued: a key
        tried from inside, another program), as the events that report them."""
        refused = self._gateway.refusals[self._refusals_seen :]
        self._refusals_seen += len(refused)
        return [
            Raw(
                source="seamline", payload={"gateway_refused": {"reason": r.reason, "method": r.method, "path": r.path}}
            )
            for r in refused
        ]

    async def start(self) -> None:
        await self._gateway.start()

    async def close(self) -> None:
        await self._gateway.close()
        if isinstance(self.cassette, CassetteRecorder):
            self.cassette.close()

    def env(self) -> dict[str, str | None]:
        """The program's variables: the gateway's URL and the placeholder, no real key."""
        layer: dict[str, str | None] = dict.fromkeys(self.route.key_vars)
        layer[self.key_var] = self._binding.placeholder
        layer[self.route.base_url_var] = self.base_url
        return layer

    def begin_turn(self, budget_usd: float | None) -> None:
        self.budget_usd = budget_usd
        self.spent_usd = 0.0
        self.wire_tokens = 0
        self.budget_refusal = None
        self._failures_before = len(self._binding.failures)
        self._requests_before = self._binding.requests
        if isinstance(self.cassette, CassettePlayer):
            self._mismatches_before = len(self.cassette.mismatches)

    def requests_this_turn(self) -> int:
        """Model requests the gateway relayed since the turn began."""
        return self._binding.requests - self._requests_before

    def upstream_failure(self) -> str | None:
        """Why the upstream could not be reached during this turn, if it could not."""
        failures = self._binding.failures[self._failures_before :]
        return failures[-1] if failures else None

    def cassette_mismatch(self) -> str | None:
        """Why a request of this turn matched nothing in the cassette it replays, if one did."""
        if not isinstance(self.cassette, CassettePlayer):
            return None
        found = self.cassette.mismatches[self._mismatches_before :]
        return found[0] if found else None

    def _on_usage(self, usage: Usage) -> None:
        model = usage.model or self._model
        priced = priced_usage(usage, model=model, rates=self._rates(model))
        if priced.cost_usd is not None:
            self.spent_usd += priced.cost_usd
        self.wire_tokens += usage.input_tokens + usage.output_tokens
        self.usages.put_nowait(priced)

    def _admit(self) -> str | None:
        budget = self.budget_usd
        if budget is None or self.spent_usd < budget:
            return None
        self.budget_refusal = (
            f"seamline: the turn's budget of {budget:.6f} USD is spent ({self.spent_usd:.6f} USD); "
            "no more model requests are sent"
        )
        return self.budget_refusal

    async def settled(self) -> None:
        """Until no response is passing through (bounded): its usage is then queued."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._gateway.idle(), _IDLE_WAIT_S)


def gateway_upstream(route: GatewayRoute, base_url_option: str | None, environ: Mapping[str, str]) -> str:
    """Where the program's requests would have gone: the ``base_url`` option, else the
    base URL variable the program would read, else the vendor's own."""
    return base_url_option or environ.get(route.base_url_var) or route.default_base_url


def gateway_max_concurrent(option: str | None, environ: Mapping[str, str]) -> int | None:
    """The limit of requests at once per upstream: the ``max_concurrent_requests`` option,
    else ``SEAMLINE_GATEWAY_MAX_CONCURRENT``; ``None`` for none (unset or 0)."""
    value, source = option, "max_concurrent_requests"
    if value is None or not value.strip():
        value, source = environ.get(MAX_CONCURRENT_VAR), MAX_CONCURRENT_VAR
    if value is None or not value.strip():
        return None
    try:
        limit = int(value.strip())
    except ValueError:
        raise InvalidRequest(f"{source} must be a whole number, not {value!r}") from None
    if limit < 0:
        raise InvalidRequest(f"{source} must not be negative, not {value!r}")
    return limit or None


async def metered_turn(inner: AsyncIterator[Event], gateway: SessionGateway) -> AsyncIterator[Event]:
    """``inner``'s events with usage from the wire in place of the program's own report.

    The wire's figures are handed over in band, before the program's next event (a program
    prints something after each model response: text, a tool call), and all of them before
    the turn's end; no second task reads the program, so an abort reaches it as before."""
    reported: list[Usage] = []
    usages = gateway.usages
    async for event in inner:
        while not usages.empty():
            yield usages.get_nowait()
        for refusal in gateway.new_refusals():
            yield refusal
        if isinstance(event, Usage):
            reported.append(event)
            continue
        if isinstance(event, ToolResult) and gateway.placeholder in event.output:
            # The program's shell read its placeholder (env, /proc): worth nothing but at
            # this gateway, yet said, as every sighting of it outside a model request is.
            yield Raw(
                source="seamline",
                payload={
                    "gateway_placeholder_seen": {"in": "tool_result", "call_id": event.call_id, "tool": event.name}
                },
            )
        if isinstance(event, Complete):
            await gateway.settled()
            while not usages.empty():
                yield usages.get_nowait()
            for refusal in gateway.new_refusals():
                yield refusal
            if gateway.wire_tokens == 0 and gateway.requests_this_turn() == 0:
                for usage in reported:  # no request passed the gateway: the report stands
                    yield usage
            elif (note := _reconciled(reported, gateway)) is not None:
                yield note
            if (unreachable := gateway.upstream_failure()) is not None:
                yield Raw(source="seamline", payload={"gateway_upstream_unreachable": unreachable})
            if (mismatch := gateway.cassette_mismatch()) is not None:
                yield Error(kind="invalid_request", message=mismatch, retryable=False)
                event = Complete(outcome="failed", stop_reason="invalid_request", text=event.text)
            elif gateway.budget_refusal is not None and event.outcome != "budget":
                yield Error(kind="budget", message=gateway.budget_refusal)
                event = Complete(outcome="budget", stop_reason="budget", text=event.text)
        yield event


_STATE_KEY: Final = "model_gateway"


def gateway_of(session: ProviderSession) -> SessionGateway | None:
    """The session's gateway, if it has one."""
    found = session.state.get(_STATE_KEY)
    return found if isinstance(found, SessionGateway) else None


def gateway_env(session: ProviderSession) -> dict[str, str | None]:
    """The variables the session's program gets from its gateway (none without one)."""
    gateway = gateway_of(session)
    return gateway.env() if gateway is not None else {}


async def open_session_gateway(
    session: ProviderSession,
    route: GatewayRoute | None,
    options: Mapping[str, str],
    *,
    rates: Callable[[str | None], Rates | None],
    model: str | None,
) -> SessionGateway | None:
    """The session's gateway, started on its first turn; None where the program calls its
    API itself (no route, ``gateway=off``, or no key in seamline's environment to keep out).
    A session with a cassette always has one (replaying needs no key; recording needs one)."""
    if (found := gateway_of(session)) is not None:
        return found
    use = session.cassette
    secret = route.secret(os.environ) if route is not None else None
    if route is None or options.get("gateway", "on") == "off" or (secret is None and use is None):
        if use is not None:
            raise InvalidRequest(f"cassette {use.path}: {_no_cassette_because(route, options)}")
        return None
    if secret is None and use is not None and use.mode == "record":
        raise InvalidRequest(
            f"cassette {use.path}: recording needs the key in seamline's environment "
            f"({' or '.join(route.key_vars)}), so that the requests pass the gateway"
        )
    cassette = _cassette_for(use, route, session, secret)
    if secret is None:  # a replay: the placeholder goes where the recorded run's key was
        recorded_var = cassette.key_var if isinstance(cassette, CassettePlayer) else None
        secret = (recorded_var if recorded_var in route.key_vars else route.key_vars[0], "")
    gateway = SessionGateway(
        route,
        upstream_url=gateway_upstream(route, options.get("base_url"), os.environ),
        key_var=secret[0],
        secret=secret[1],
        rates=rates,
        model=model,
        max_concurrent=gateway_max_concurrent(options.get("max_concurrent_requests"), os.environ),
        cassette=cassette,
    )
    await gateway.start()
    session.state[_STATE_KEY] = gateway
    return gateway


def _no_cassette_because(route: GatewayRoute | None, options: Mapping[str, str]) -> str:
    if route is None:
        return "this backend's model requests do not pass seamline's gateway, so they cannot be recorded or replayed"
    return "gateway=off: the program calls its API itself, so its requests cannot be recorded or replayed"


def _cassette_for(
    use: CassetteUse | None, route: GatewayRoute, session: ProviderSession, secret: tuple[str, str] | None
) -> CassetteRecorder | CassettePlayer | None:
    """The session's recorder or player; the folders named are those the matcher
    normalises (the workspace, the home)."""
    if use is None:
        return None
    places = {"home": str(Path.home())}
    if session.workspace is not None:
        places["workspace"] = str(session.workspace)
    if use.mode == "replay":
        return CassettePlayer(use.path, places=places)
    key_var, key = secret or (None, "")
    return CassetteRecorder(use.path, vendor=route.vendor, places=places, hidden=[key], key_var=key_var)


async def close_session_gateway(session: ProviderSession) -> None:
    gateway = session.state.pop(_STATE_KEY, None)
    if isinstance(gateway, SessionGateway):
        await gateway.close()


def _off_because(session: ProviderSession, route: GatewayRoute | None, options: Mapping[str, str]) -> str | None:
    """Why the program calls its API itself, said once a session (never silently)."""
    if route is None or session.state.get("gateway_off_said"):
        return None
    session.state["gateway_off_said"] = True
    if options.get("gateway", "on") == "off":
        return "gateway=off: the program calls its API with the key in its environment"
    return f"no {' or '.join(route.key_vars)} in seamline's environment: the program calls its API with its own login"


async def gated_turn(
    session: ProviderSession, turn: AsyncIterator[Event], route: GatewayRoute | None, options: Mapping[str, str]
) -> AsyncIterator[Event]:
    """``turn`` metered through the session's gateway (opened before), or, without one, as
    it is, with a note the first time saying why."""
    gateway = gateway_of(session)
    try:
        if gateway is None:
            if (why := _off_because(session, route, options)) is not None:
                yield Raw(source="seamline", payload={"gateway": "off", "because": why})
            async for event in turn:
                yield event
            return
        gateway.begin_turn(session.turn_budget_usd)
        metered = metered_turn(turn, gateway)
        try:
            async for event in metered:
                yield event
        finally:
            await metered.aclose()  # type: ignore[attr-defined]
    finally:
        await turn.aclose()  # type: ignore[attr-defined]  # the program's turn ends here too


def _reconciled(reported: list[Usage], gateway: SessionGateway) -> Raw | None:
    """A note when the program's own usage report differs from the wire's (never counted)."""
    if not reported:
        return None
    said = sum(u.input_tokens + u.output_tokens for u in reported)
    wire = gateway.wire_tokens
    if said == wire:
        return None
    return Raw(source="seamline", payload={"gateway_usage": {"program_reported_tokens": said, "wire_tokens": wire}})
