"""docs/architecture.md names every room under src/seamline/ and draws the same ranks as
tests/test_import_graph.py, so the guide a newcomer reads first is the house as it is."""

from __future__ import annotations

import re

from tests.test_import_graph import PACKAGE, RANKS

GUIDE = PACKAGE.parents[1] / "docs" / "architecture.md"


def _rooms() -> set[str]:
    found = set()
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            found.add(f"{path.name}/")
        elif path.suffix == ".py" and path.name != "__init__.py":
            found.add(path.name)
    return found


def _missing(text: str) -> list[str]:
    return sorted(room for room in _rooms() if f"`{room}`" not in text)


def _table(text: str) -> dict[str, int]:
    section = text.split("## The rooms and their ranks", 1)[1].split("\n## ", 1)[0]
    ranks: dict[str, int] = {}
    for rank, cells in re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.M):
        for room in re.findall(r"`([^`]+)`", cells):
            ranks[room.removesuffix("/").removesuffix(".py")] = int(rank)
    return ranks


def test_the_guide_names_every_room() -> None:
    assert _missing(GUIDE.read_text()) == []


def test_the_guides_ranks_are_the_import_tests() -> None:
    assert _table(GUIDE.read_text()) == RANKS


def test_a_room_left_out_or_ranked_otherwise_is_found() -> None:
    text = GUIDE.read_text().replace("`live/`", "`lives/`").replace("| 5 | `tools/` |", "| 6 | `tools/` |")
    assert _missing(text) == ["live/"]
    table = _table(text)
    assert table != RANKS and table["tools"] == 6 and "live" not in table
