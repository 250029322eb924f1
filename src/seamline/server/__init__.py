"""``seamline serve``: the HTTP API v1 (runs streamed as AG-UI or seamline events) and a
web page, on Starlette and uvicorn. Needs ``seamline[server]``.

>>> from seamline.server import create_app  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seamline.server.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Imported on use, so importing a part of the server (its guard) does not load the app.
    if name == "create_app":
        from seamline.server.app import create_app

        return create_app
    raise AttributeError(name)
