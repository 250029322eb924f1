"""The process ``grep`` searches in: its address space is capped, so no pattern and no line
can grow it without bound (``x{100000000}``, ``(a|aa)*$`` on a 15 MB line).

The parent (:func:`seamline.tools.read_tools.grep_tree`) writes one JSON request on stdin and
reads one JSON answer on stdout: ``{"ok": text}`` or ``{"kind": ..., "message": ...}``. The
cap is set here, first thing, before the pattern is compiled; running out of it is a
``MemoryError``, answered as a classified error.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _answer(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload))
    sys.stdout.flush()


def main() -> None:
    request = json.loads(sys.stdin.read())
    limit = int(request["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        from seamline.errors import SeamlineError
        from seamline.tools.read_tools import Stopped, search_here

        timeout = float(request["timeout"])
        deadline = time.monotonic() + timeout
        # The walk looks at the flag between files and lines: past the deadline it ends
        # even when nobody is left to kill this process.
        stop = threading.Event()
        timer = threading.Timer(timeout, stop.set)
        timer.daemon = True
        timer.start()
        text = search_here(
            Path(request["root"]),
            list(request["parts"]),
            request["pattern"],
            glob=request["glob"],
            max_results=int(request["max_results"]),
            is_file=bool(request["is_file"]),
            stop=stop,
            deadline=deadline,
        )
    except Stopped:
        _answer({"kind": "timeout", "message": "grep ran past its time limit and was stopped"})
        return
    except MemoryError:
        _answer({"kind": "memory", "message": ""})
        return
    except SeamlineError as exc:
        _answer({"kind": exc.kind, "message": exc.message})
        return
    except OSError as exc:
        _answer({"kind": "os", "errno": exc.errno, "message": exc.strerror or str(exc)})
        return
    except Exception as exc:  # noqa: BLE001 - answered, classified by the parent
        _answer({"kind": "error", "message": f"{type(exc).__name__}: {exc}"})
        return
    _answer({"ok": text})


if __name__ == "__main__":
    main()
