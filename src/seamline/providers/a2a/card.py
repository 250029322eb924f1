"""What seamline reads of an A2A agent card: its name, whether it streams, and the URL of
its JSON-RPC interface.

A 1.0 card lists ``supportedInterfaces`` (``url``, ``protocolBinding``); a 0.3 card has
``url`` and ``preferredTransport``, which a 1.0 server also writes for old clients. Only a
``JSONRPC`` interface on the same origin (scheme, host, port) as the URL the operator gave
is used: a card cannot send the token, or the prompt, somewhere else (``rpc_url=`` names
another one on purpose). A card without a JSON-RPC interface or with fields of the wrong
type is refused as a ``ProviderFailure`` that says what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from seamline.errors import InvalidRequest, ProviderFailure
from seamline.redact import redact_url

__all__ = ["AgentCardInfo", "read_card", "same_origin"]


@dataclass(frozen=True, slots=True)
class AgentCardInfo:
    name: str
    streaming: bool
    rpc_url: str


def same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    default = {"http": 80, "https": 443}
    return (
        pa.scheme == pb.scheme
        and (pa.hostname or "") == (pb.hostname or "")
        and (pa.port or default.get(pa.scheme)) == (pb.port or default.get(pb.scheme))
    )


def read_card(card: Any, *, base_url: str) -> AgentCardInfo:
    """The card's name, streaming and JSON-RPC URL; refused where it does not say them."""
    where = f"a2a: the agent card at {redact_url(base_url)}"
    if not isinstance(card, dict):
        raise ProviderFailure(f"{where} is not a JSON object")
    name = card.get("name")
    if not isinstance(name, str) or not name:
        raise ProviderFailure(f"{where} has no name: not an A2A agent card")
    capabilities = card.get("capabilities", {})
    if not isinstance(capabilities, dict):
        raise ProviderFailure(f"{where}: capabilities is not an object")
    streaming = capabilities.get("streaming", False)
    if not isinstance(streaming, bool):
        raise ProviderFailure(f"{where}: capabilities.streaming is not true or false")
    candidates: list[str] = []
    interfaces = card.get("supportedInterfaces", [])
    if not isinstance(interfaces, list):
        raise ProviderFailure(f"{where}: supportedInterfaces is not a list")
    for interface in interfaces:
        if not isinstance(interface, dict):
            raise ProviderFailure(f"{where}: an interface is not an object")
        url = interface.get("url")
        if interface.get("protocolBinding") == "JSONRPC" and isinstance(url, str) and url:
            candidates.append(url)
    legacy = card.get("url")
    if isinstance(legacy, str) and legacy and card.get("preferredTransport", "JSONRPC") == "JSONRPC":
        candidates.append(legacy)
    if not candidates:
        raise ProviderFailure(f"{where} offers no JSON-RPC interface (seamline speaks A2A's JSON-RPC binding)")
    for url in candidates:
        if same_origin(url, base_url):
            return AgentCardInfo(name=name, streaming=streaming, rpc_url=url)
    raise InvalidRequest(
        f"{where} names a JSON-RPC URL on another origin ({redact_url(candidates[0])}); "
        "seamline sends nothing there unless the operator names it with -o rpc_url=…"
    )
