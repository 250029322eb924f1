"""Notifications: a signed JSON POST to each ``--notify`` URL when a permission request
waits, a run finishes or fails, or a budget is reached.

Deliveries run in the background: :meth:`Notifier.emit` only queues, so a run never waits
on a receiver. Each delivery is tried up to ``attempts`` times, with back-off doubling from
``backoff`` seconds, on a connection error, a timeout, a 429 or a 5xx; another 4xx ends it.
At most ``MAX_QUEUED`` deliveries wait; past that the oldest are dropped (and counted).

The body (docs/serve.md, "Notifications") carries seamline's fields, ``text`` (Slack's
incoming webhooks), and ``title``, ``message``, ``tags``, ``priority`` and ``topic``
(ntfy's JSON publishing). With a secret, ``X-Seamline-Signature: sha256=HEX`` is the
HMAC-SHA256 of the exact body bytes under it.

>>> body = notification_body("run.finished", {"id": "r1", "status": "completed"}, {}, topic=None)
>>> body["event"], body["title"]
('run.finished', 'seamline: run r1 completed')
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

__all__ = ["EVENTS", "MAX_QUEUED", "SIGNATURE_HEADER", "Notifier", "notification_body", "sign"]

SIGNATURE_HEADER: Final = "X-Seamline-Signature"
EVENTS: Final = ("permission.requested", "run.finished", "run.failed", "budget.reached")
MAX_QUEUED: Final = 1000
_log = logging.getLogger("seamline.server.notify")


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 of ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def notification_body(
    event: str, run: Mapping[str, Any] | None, details: Mapping[str, Any], *, topic: str | None
) -> dict[str, Any]:
    """The JSON object POSTed for ``event``: ``run`` is the run's summary (None for a
    budget refused before a run started), ``details`` what the event adds."""
    run_id = str(run["id"]) if run else None
    short = run_id[:12] if run_id else ""
    if event == "permission.requested":
        title = f"seamline: approval wanted in run {short}"
        message = f"{details.get('tool', 'a tool')} waits for approval: {details.get('reason', '')}".rstrip(": ")
    elif event == "budget.reached":
        who = details.get("user") or (run or {}).get("started_by")
        title = f"seamline: budget reached{f' by {who}' if who else ''}"
        message = f"run {short} stopped at its budget" if run else f"{who} has spent the daily budget; run refused"
    else:
        status = (run or {}).get("status", "")
        title = f"seamline: run {short} {status}"
        message = f"run {short} {status} ({(run or {}).get('stop_reason') or 'no reason'})"
    body: dict[str, Any] = {
        "event": event,
        "id": uuid.uuid4().hex,  # one per notification, the same on every retry of it
        "time": time.time(),
        "run": dict(run) if run else None,
        "details": dict(details),
        "title": title,
        "message": message,
        "text": f"*{title}*\n{message}",
        "tags": ["seamline", event.replace(".", "-")],
        "priority": 4 if event in ("permission.requested", "run.failed", "budget.reached") else 3,
    }
    if topic is not None:
        body["topic"] = topic
    return body


class Notifier:
    """Sends notifications to ``urls``; ``secret`` signs them. Started lazily on the
    running loop by the first :meth:`emit`; :meth:`close` waits ``grace`` seconds for
    what is queued, then gives up on it."""

    def __init__(
        self,
        urls: Iterable[str],
        *,
        secret: str | None = None,
        attempts: int = 5,
        backoff: float = 1.0,
        timeout: float = 10.0,
        grace: float = 5.0,
    ) -> None:
        self.urls = tuple(urls)
        for url in self.urls:
            if urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"--notify {url!r}: an http:// or https:// URL")
        self._secret = secret
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.timeout = timeout
        self.grace = grace
        self.dropped = 0
        self.failed = 0
        self._queue: deque[tuple[str, bytes, str]] = deque()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def emit(self, event: str, run: Mapping[str, Any] | None, details: Mapping[str, Any]) -> None:
        """Queue ``event`` for every URL; returns at once (called from the event loop)."""
        if not self.urls:
            return
        for url in self.urls:
            topic = parse_qs(urlsplit(url).query).get("topic", [None])[0]
            body = json.dumps(notification_body(event, run, details, topic=topic)).encode()
            if len(self._queue) >= MAX_QUEUED:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append((url, body, event))
        if self._worker is None:
            self._wake = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._work())
        assert self._wake is not None
        self._wake.set()

    async def _work(self) -> None:
        assert self._wake is not None
        while True:
            while self._queue:
                url, body, event = self._queue.popleft()
                task = asyncio.get_running_loop().create_task(self._deliver(url, body, event))
                self._sending.add(task)  # each delivery retries on its own: a slow receiver holds no other
                task.add_done_callback(self._sending.discard)
            self._wake.clear()
            await self._wake.wait()

    async def _deliver(self, url: str, body: bytes, event: str) -> None:
        headers = {"Content-Type": "application/json", "User-Agent": "seamline", "X-Seamline-Event": event}
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(self._secret, body)
        shown = urlsplit(url)._replace(query="", fragment="").geturl()  # a query may hold a key
        status: int | None = None
        for attempt in range(1, self.attempts + 1):
            status = await asyncio.to_thread(self._post, url, body, headers)
            if status is not None and status < 300:
                return
            if status is not None and 400 <= status < 500 and status != 429:
                break  # the receiver refuses it: trying again would be refused again
            if attempt < self.attempts:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
        self.failed += 1
        _log.warning("notification %s to %s not delivered (last status %s)", event, shown, status)

    def _post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int | None:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, ValueError):
            return None  # refused, reset, timed out: try again

    async def close(self) -> None:
        """Let queued deliveries go out for up to ``grace`` seconds, then stop."""
        if self._worker is None:
            return
        deadline = time.monotonic() + self.grace
        while (self._queue or self._sending) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in [self._worker, *self._sending]:
            task.cancel()
        await asyncio.gather(self._worker, *self._sending, return_exceptions=True)
        self._worker = None
