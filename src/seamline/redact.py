"""Passwords out of URLs, wherever a URL is written or shown (the raw log, events, the
store's options, messages, ``providers check``): ``http://user:secret@host`` becomes
``http://user@host``."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

__all__ = ["redact_url", "redact_urls", "url_host"]

# scheme://user:password@ — the user info of a URL inside any text.
_USER_INFO: Final = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*):[^\s/@]*@")


def redact_urls(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` in it removed."""
    return _USER_INFO.sub(r"\g<head>@", text) if "@" in text else text


def redact_url(value: str) -> str:
    """A URL without its password (the user name stays); anything else as it is."""
    return redact_urls(value)


def url_host(url: str) -> str:
    """``host[:port]`` of a URL, never its user info."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return redact_urls(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return host + (f":{port}" if port is not None else "")
