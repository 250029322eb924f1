"""``seamline serve``: the HTTP API v1 (runs streamed as AG-UI or seamline events) and a
web page, on Starlette and uvicorn. Needs ``seamline[server]``.

>>> from seamline.server import create_app  # doctest: +SKIP
"""

from __future__ import annotations

from seamline.server.app import create_app

__all__ = ["create_app"]
