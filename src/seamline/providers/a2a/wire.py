"""A2A's JSON-RPC binding over HTTP, as a2a-sdk 1.3.0 (protocol 1.0) speaks it.

One POST per call to the agent's JSON-RPC URL, with the header ``A2A-Version: 1.0``;
method names are the 1.0 ones (``SendMessage``, ``SendStreamingMessage``, ``GetTask``,
``CancelTask``), parameters and results are protobuf JSON (camelCase, enums by name:
``ROLE_USER``, ``TASK_STATE_COMPLETED``). A streaming call answers server-sent events whose
data is one JSON-RPC response each. The agent card is ``GET /.well-known/agent-card.json``.

Every failure comes out classified (no secret in a message: the token never is, a URL's
password is removed):

- no connection, a dropped stream: ``TransportFailure``; no answer in time: ``TimeoutFailure``;
- HTTP 401/403: ``AuthFailure``; 429: ``QuotaExceeded`` (with ``retry-after``); another
  4xx: ``InvalidRequest``; 5xx: ``ProviderFailure`` (retryable);
- a body that is not a JSON-RPC 2.0 response: ``ProviderFailure`` ("malformed JSON-RPC");
- an error response: :class:`A2ARequestError` (an ``InvalidRequest``) for what the request got
  wrong (task not found or not cancelable, unsupported operation or content type,
  invalid params), else :class:`A2AError` (a ``ProviderFailure``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import msgspec

from seamline.errors import (
    AuthFailure,
    InvalidRequest,
    ProviderFailure,
    QuotaExceeded,
    SeamlineError,
    TimeoutFailure,
    TransportFailure,
)
from seamline.extras import install_hint
from seamline.redact import redact_url
from seamline.transport.sse import read_sse

try:
    import httpx2
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(f"{exc}; install it with: {install_hint('a2a')}") from None

__all__ = [
    "CARD_PATH",
    "PROTOCOL_VERSION",
    "A2AError",
    "A2ARequestError",
    "A2AWire",
    "classify_status",
    "result_of",
    "rpc_error",
]

CARD_PATH: Final = "/.well-known/agent-card.json"
PROTOCOL_VERSION: Final = "1.0"
_CARD_LIMIT: Final = 1024 * 1024
# The A2A codes that say the request was wrong, not the agent (a2a.utils.errors).
_REQUEST_CODES: Final = frozenset({-32001, -32002, -32003, -32004, -32005, -32008, -32602, -32600})
_decoder: Final = msgspec.json.Decoder()

JsonObject = dict[str, Any]


class A2AError(ProviderFailure):
    """A JSON-RPC error response that the agent is to blame for; ``code`` says which."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"a2a: the agent answered JSON-RPC error {code}: {message[:300]}")
        self.code = code


class A2ARequestError(InvalidRequest):
    """A JSON-RPC error response that says the request was wrong (``-32001`` task not found…)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"a2a: the agent refused the request, JSON-RPC error {code}: {message[:300]}")
        self.code = code


def rpc_error(code: int, message: str) -> A2AError | A2ARequestError:
    return A2ARequestError(code, message) if code in _REQUEST_CODES else A2AError(code, message)


def classify_status(status: int, what: str, body: str, retry_after: str | None = None) -> SeamlineError:
    """The classified failure for an HTTP answer of ``status`` (400 or more)."""
    text = f"{what} answered HTTP {status}" + (f": {body[:200]}" if body.strip() else "")
    if status in (401, 403):
        return AuthFailure(f"{text} (is -o token=… or -o token_env=… right?)")
    if status == 429:
        seconds: float | None
        try:
            seconds = float(retry_after) if retry_after else None
        except ValueError:
            seconds = None
        return QuotaExceeded(text, retry_after=seconds)
    if status >= 500:
        return ProviderFailure(text, retryable=True)
    return InvalidRequest(text)


class A2AWire:
    """One HTTP client for one agent: its card, JSON-RPC calls and streams."""

    def __init__(self, base_url: str, *, token: str | None, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.rpc_url = self.base_url + "/"
        headers = {"A2A-Version": PROTOCOL_VERSION}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout))
        self._ids = 0
        self._secret = token.encode() if token else None

    def _scrub(self, body: bytes) -> bytes:
        """``body`` without the token (a server may echo the request's headers in an error)."""
        return body.replace(self._secret, b"***") if self._secret and self._secret in body else body

    def _failed(self, response: httpx2.Response, what: str, body: bytes) -> SeamlineError:
        text = self._scrub(body).decode("utf-8", "replace")
        return classify_status(response.status_code, what, text, response.headers.get("retry-after"))

    @property
    def shown(self) -> str:
        """The agent's URL as messages name it (no password)."""
        return redact_url(self.base_url)

    async def close(self) -> None:
        await self._client.aclose()

    async def _send(
        self, request: httpx2.Request, what: str, timeout: float, *, stream: bool = False
    ) -> httpx2.Response:
        """``request`` sent; a connection that fails or an answer that does not come, classified."""
        try:
            return await self._client.send(request, stream=stream)
        except httpx2.TimeoutException:
            raise TimeoutFailure(f"{what} got no answer within {timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise TransportFailure(f"a2a: cannot reach {self.shown}: {type(exc).__name__}: {exc}") from None

    async def card(self, *, timeout: float) -> JsonObject:
        """The agent card, as JSON (:mod:`seamline.providers.a2a.card` reads it)."""
        url = self.base_url + CARD_PATH
        what = f"a2a: the agent card at {redact_url(url)}"
        response = await self._send(self._client.build_request("GET", url, timeout=timeout), what, timeout)
        if response.status_code >= 400:
            raise self._failed(response, what, response.content)
        if len(response.content) > _CARD_LIMIT:
            raise ProviderFailure(f"{what} is larger than {_CARD_LIMIT} bytes")
        try:
            data = _decoder.decode(response.content)
        except msgspec.DecodeError as exc:
            raise ProviderFailure(f"{what} does not parse as JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ProviderFailure(f"{what} is not a JSON object")
        return data

    def _request(self, method: str, params: Mapping[str, Any]) -> JsonObject:
        self._ids += 1
        return {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": dict(params)}

    async def call(self, method: str, params: Mapping[str, Any], *, timeout: float) -> Any:
        """One JSON-RPC call; its ``result``."""
        what = f"a2a: {method} at {redact_url(self.rpc_url)}"
        request = self._client.build_request("POST", self.rpc_url, json=self._request(method, params), timeout=timeout)
        response = await self._send(request, what, timeout)
        if response.status_code >= 400:
            raise self._failed(response, what, response.content)
        return result_of(self._scrub(response.content), what)

    async def stream(self, method: str, params: Mapping[str, Any], *, timeout: float) -> AsyncIterator[Any]:
        """A streaming call: the ``result`` of each response the server sends, in order.
        An answer that is plain JSON (an error before the stream began) is one response."""
        what = f"a2a: {method} at {redact_url(self.rpc_url)}"
        request = self._client.build_request(
            "POST",
            self.rpc_url,
            json=self._request(method, params),
            headers={"Accept": "text/event-stream"},
            # connecting and the first byte are bounded; the events may come as slowly as the agent works
            timeout=httpx2.Timeout(timeout, read=None),
        )
        response = await self._send(request, what, timeout, stream=True)
        try:
            if response.status_code >= 400:
                raise self._failed(response, what, await response.aread())
            if "text/event-stream" not in response.headers.get("content-type", ""):
                yield result_of(self._scrub(await response.aread()), what)
                return
            async for event in read_sse(response, what=f"{what}: the event stream"):
                data = self._scrub(event.data.encode())
                if event.event == "error":
                    result_of(data, what)  # raises the error it carries
                    raise ProviderFailure(f"{what}: the stream sent an error event: {data[:200]!r}")
                yield result_of(data, what)
        finally:
            await response.aclose()


def result_of(body: bytes, what: str) -> Any:
    """The ``result`` of one JSON-RPC response body; its error raised as :class:`A2AError`."""
    try:
        message = _decoder.decode(body)
    except msgspec.DecodeError:
        raise ProviderFailure(f"{what}: malformed JSON-RPC (not JSON): {body[:120]!r}") from None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ProviderFailure(f"{what}: malformed JSON-RPC (not a 2.0 response): {body[:120]!r}")
    error = message.get("error")
    if error is not None:
        if not isinstance(error, dict) or not isinstance(error.get("code"), int):
            raise ProviderFailure(f"{what}: malformed JSON-RPC error: {str(error)[:200]}")
        raise rpc_error(error["code"], str(error.get("message", "")))
    if "result" not in message:
        raise ProviderFailure(f"{what}: malformed JSON-RPC (neither result nor error)")
    return message["result"]
