"""Cassettes: every model exchange of a session, recorded to a file and replayed from it.

A :class:`CassetteRecorder` sits on a binding while its requests are relayed: each request
(method, path, body; never a credential) and its answer (status, headers, the body's
pieces as they arrived) becomes one line of the file. A :class:`CassettePlayer` sits on a
binding instead of an upstream: no connection leaves the gateway; each request is matched
against the recorded ones not yet answered (in order, normalised:
:mod:`seamline.gateway.cassette_match`) and answered with the recorded answer, piece by
piece, so a stream replays as a stream. A request that matches none is answered with an
error in the vendor's format, and :attr:`CassettePlayer.mismatches` says why.

The file is JSON Lines (docs/gateway.md, "Cassettes")::

    {"seamline_cassette": 1, "vendor": "anthropic", "places": {"workspace": "/src/app", ...}}
    {"request": {"method": "POST", "target": "/v1/messages?beta=true", "body": {...}},
     "response": {"status": 200, "reason": "OK", "headers": [["content-type", "text/event-stream"]],
                  "chunks": ["event: message_start\\ndata: {...}\\n\\n", ...]}}

A chunk that is not UTF-8 text is kept as ``{"base64": "..."}``; a body that is not JSON
as a string (or ``{"base64": ...}``).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, Literal

from seamline.errors import InvalidRequest
from seamline.gateway.cassette_match import as_array, as_object, first_difference, normalised, without_key

__all__ = [
    "CASSETTE_VERSION",
    "CassetteMode",
    "CassettePlayer",
    "CassetteRecorder",
    "CassetteUse",
    "Exchange",
    "chunk_frame",
    "load_cassette",
    "replay_head",
]

CASSETTE_VERSION: Final = 1
CassetteMode = Literal["record", "replay"]
_UNKEPT_HEADERS: Final = frozenset({"transfer-encoding", "content-length", "connection", "set-cookie", "keep-alive"})
_REDACTED: Final = "<redacted>"
_PLACEHOLDER: Final = re.compile(r"sl-gw-[A-Za-z0-9_-]{16,}")


@dataclass(frozen=True, slots=True)
class CassetteUse:
    """A run's cassette: where it is, and whether the run records it or replays it."""

    path: Path
    mode: CassetteMode

    @classmethod
    def of(cls, *, record: str | os.PathLike[str] | None, replay: str | os.PathLike[str] | None) -> CassetteUse | None:
        """The cassette ``record`` or ``replay`` names (not both; a file to replay must exist)."""
        if record is not None and replay is not None:
            raise InvalidRequest("give record= or replay=, not both (one cassette per run)")
        if replay is not None:
            path = Path(replay)
            if not path.is_file():
                raise InvalidRequest(f"cassette {path}: no such file to replay")
            return cls(path.resolve(), "replay")
        if record is not None:
            return cls(Path(record).resolve(), "record")
        return None


@dataclass(slots=True)
class Exchange:
    """One model request and its answer, as recorded."""

    method: str
    target: str
    body: object
    status: int
    reason: str
    headers: list[tuple[str, str]]
    chunks: list[bytes]

    def to_json(self) -> dict[str, object]:
        return {
            "request": {"method": self.method, "target": self.target, "body": self.body},
            "response": {
                "status": self.status,
                "reason": self.reason,
                "headers": [list(pair) for pair in self.headers],
                "chunks": [_chunk_json(chunk) for chunk in self.chunks],
            },
        }


def _chunk_json(chunk: bytes) -> object:
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(chunk).decode("ascii")}


def _body_json(raw: bytes, hidden: Sequence[str]) -> object:
    """A request body as it is kept: JSON when it is, else text, else base64; every
    ``hidden`` value (the real key) and the gateway's placeholders replaced."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}
    for value in hidden:
        if value:
            text = text.replace(value, _REDACTED)
    text = _PLACEHOLDER.sub("<placeholder>", text)  # worth nothing after the session; kept out all the same
    try:
        parsed: object = json.loads(text)
    except ValueError:
        return text
    return parsed


class CassetteRecorder:
    """Writes a binding's exchanges to a cassette as each one ends (the file is complete
    line by line: a run that dies keeps what it had recorded)."""

    def __init__(
        self,
        path: Path,
        *,
        vendor: str,
        places: Mapping[str, str],
        hidden: Sequence[str],
        key_var: str | None = None,
    ) -> None:
        self.path = path
        self._hidden = tuple(v for v in hidden if v)
        self.recorded = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise InvalidRequest(f"cassette {path}: cannot be written ({exc.strerror or exc})") from None
        header: dict[str, object] = {"seamline_cassette": CASSETTE_VERSION, "vendor": vendor, "places": dict(places)}
        if key_var is not None:
            header["key_var"] = key_var  # the variable the program read its key from (never the key)
        self._write(header)

    def add(
        self,
        *,
        method: str,
        target: str,
        body: bytes,
        status: int,
        reason: str,
        headers: Sequence[tuple[str, str]],
        chunks: list[bytes],
    ) -> None:
        kept = [(k, v) for k, v in headers if k.lower() not in _UNKEPT_HEADERS]
        exchange = Exchange(method, without_key(target), _body_json(body, self._hidden), status, reason, kept, chunks)
        self._write(exchange.to_json())
        self.recorded += 1

    def _write(self, value: object) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(value, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load_cassette(path: Path) -> tuple[dict[str, object], list[Exchange]]:
    """The header and the exchanges of a cassette; a file that is not one fails naming the
    file and the line (``invalid_request``)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InvalidRequest(f"cassette {path}: no such file to replay") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cassette {path}: cannot be read ({exc})") from None
    if not lines:
        raise InvalidRequest(f"cassette {path}: the file is empty (no header line)")
    header = _json_line(path, 1, lines[0])
    version = header.get("seamline_cassette")
    if version != CASSETTE_VERSION:
        raise InvalidRequest(
            f"cassette {path}, line 1: not a seamline cassette of version {CASSETTE_VERSION} "
            f"(seamline_cassette is {version!r})"
        )
    exchanges = [_exchange(path, number, line) for number, line in enumerate(lines[1:], start=2) if line.strip()]
    return header, exchanges


def _json_line(path: Path, number: int, line: str) -> dict[str, object]:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise InvalidRequest(f"cassette {path}, line {number}: not JSON ({exc})") from None
    found = as_object(value)
    if found is None:
        raise InvalidRequest(f"cassette {path}, line {number}: not a JSON object")
    return found


def _exchange(path: Path, number: int, line: str) -> Exchange:
    value = _json_line(path, number, line)
    request, response = as_object(value.get("request")), as_object(value.get("response"))
    try:
        if request is None or response is None:
            raise ValueError("no request or response object")
        method, target, status = request.get("method"), request.get("target"), response.get("status")
        if not (isinstance(method, str) and isinstance(target, str) and type(status) is int):
            raise ValueError("no method, target or status")
        headers = [_header_pair(pair) for pair in as_array(response.get("headers", [])) or []]
        chunks = [_chunk_bytes(chunk) for chunk in as_array(response.get("chunks", [])) or []]
        reason = str(response.get("reason", ""))
        return Exchange(method, target, request.get("body"), status, reason, headers, chunks)
    except (TypeError, ValueError):
        raise InvalidRequest(
            f"cassette {path}, line {number}: not an exchange (request.method, request.target, "
            "response.status, response.headers and response.chunks)"
        ) from None


def _header_pair(pair: object) -> tuple[str, str]:
    items = as_array(pair)
    if items is None or len(items) != 2:
        raise ValueError("a header is [name, value]")
    return str(items[0]), str(items[1])


def _chunk_bytes(chunk: object) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    encoded = (as_object(chunk) or {}).get("base64")
    if isinstance(encoded, str):
        return base64.b64decode(encoded, validate=True)
    raise ValueError("a chunk is a string or {'base64': ...}")


class CassettePlayer:
    """Answers a binding's requests from a cassette, each recorded answer once."""

    def __init__(self, path: Path, *, places: Mapping[str, str]) -> None:
        self.path = path
        header, self._exchanges = load_cassette(path)
        key_var = header.get("key_var")
        self.key_var = key_var if isinstance(key_var, str) else None
        """The variable the recorded program read its key from (a replay puts its placeholder
        there: a program may send other requests with another kind of key)."""
        recorded_places = as_object(header.get("places")) or {}
        self._recorded_places = {k: str(v) for k, v in recorded_places.items()}
        self._places = dict(places)
        self._used = [False] * len(self._exchanges)
        self.requests = 0
        self.mismatches: list[str] = []

    def answer(self, method: str, target: str, body: bytes) -> Exchange | None:
        """The recorded exchange this request matches (used up), or ``None``: then
        :attr:`mismatches` ends with why."""
        self.requests += 1
        sent_target = without_key(target)
        sent = normalised(_body_json(body, ()), self._places)
        for index, exchange in enumerate(self._exchanges):
            if self._used[index] or exchange.method != method or exchange.target != sent_target:
                continue
            if normalised(exchange.body, self._recorded_places) == sent:
                self._used[index] = True
                return exchange
        self.mismatches.append(self._why(method, sent_target, sent))
        return None

    @property
    def left(self) -> int:
        """Recorded exchanges not yet replayed."""
        return self._used.count(False)

    def _why(self, method: str, target: str, sent: object) -> str:
        number = self.requests
        path = target.partition("?")[0]
        left = [i for i, used in enumerate(self._used) if not used]
        same = [i for i in left if self._exchanges[i].method == method and self._exchanges[i].target == target]
        where = f"; in {self.path}"
        if not left:
            return (
                f"cassette: request {number} ({method} {path}) has no recorded request left "
                f"(the cassette holds {len(self._exchanges)}){where}"
            )
        if not same:
            first = self._exchanges[left[0]]
            return (
                f"cassette: request {number} differs at method and path "
                f"(recorded {first.method} {first.target}, sent {method} {target}){where}"
            )
        nearest = max(same, key=lambda i: _likeness(normalised(self._exchanges[i].body, self._recorded_places), sent))
        recorded = normalised(self._exchanges[nearest].body, self._recorded_places)
        field_named = first_difference(recorded, sent) or "body"
        return f"cassette: request {number} differs at {field_named}{where}"


def replay_head(exchange: Exchange, *, keep_alive: bool) -> bytes:
    """The head of a recorded answer as it is replayed: its status and headers, its body
    chunked (each recorded piece one chunk) unless the status has none."""
    lines = [f"HTTP/1.1 {exchange.status} {exchange.reason or 'OK'}"]
    lines += [f"{k}: {v}" for k, v in exchange.headers if k.lower() not in _UNKEPT_HEADERS]
    if exchange.status in (204, 304):
        lines.append("content-length: 0")
    else:
        lines.append("transfer-encoding: chunked")
    lines.append(f"connection: {'keep-alive' if keep_alive else 'close'}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk_frame(piece: bytes) -> bytes:
    return f"{len(piece):x}\r\n".encode() + piece + b"\r\n"


def _likeness(recorded: object, sent: object) -> int:
    """How alike two request bodies are, to name the recorded request a changed one was
    meant to be (a program's side requests differ from its turn's at the top): the top
    level's keys with equal values, less the keys only one has. Ties go to the earliest."""
    recorded_fields, sent_fields = as_object(recorded), as_object(sent)
    if recorded_fields is None or sent_fields is None:
        return 0
    equal = sum(1 for key, value in recorded_fields.items() if key in sent_fields and sent_fields[key] == value)
    return equal - len(recorded_fields.keys() ^ sent_fields.keys())
