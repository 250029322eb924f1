"""The OpenAPI 3.1 document of the HTTP API v1, generated from the route table's declared
models (:mod:`seamline.server.api_document`) and pinned in ``docs/openapi.json``.

A test compares the document with the pinned copy and with the routes the app serves, and
property tests (schemathesis) check the running server against it. Regenerate the pinned
copy with ``python -m seamline.server.openapi docs/openapi.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from seamline.server.api_document import api_document
from seamline.server.routes import ROUTES

__all__ = ["main", "openapi_document"]


def openapi_document() -> dict[str, Any]:
    """The document, as served at ``/v1/openapi.json`` and pinned in docs/openapi.json."""
    return api_document(ROUTES)


def main(argv: list[str]) -> int:
    """``python -m seamline.server.openapi [FILE]``: write the document (docs/openapi.json)."""
    text = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
