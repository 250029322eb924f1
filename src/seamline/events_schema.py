"""Write the event vocabulary's JSON Schema: ``python -m seamline.events_schema [FILE]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from seamline.events import event_schema


def main(argv: list[str]) -> int:
    text = json.dumps(event_schema(), indent=2, sort_keys=True) + "\n"
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
