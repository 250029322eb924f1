"""The shape of the house: every room has a rank and imports only rooms of a lower rank
(the design's arrows, from the faces down to the vocabulary), no room reaches for the
facade, and the loop, the provider seam and the pipeline controller stay in small functions.

The graph is read from the source with ``ast``: every import that runs (at module level or
inside a function; ``if TYPE_CHECKING:`` blocks are left out, they never run), resolved to
the module it names. A room is a package under ``seamline/`` (``loop``, ``pipeline``…) or
a top-level module (``events``, ``usage``…); ``seamline/__init__.py`` is the facade.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "seamline"
MAX_FUNCTION_LINES = 60
# The provider seam, the loop and the controller, with the modules split out of them.
SMALL_FUNCTION_PLACES = (
    "providers/base.py",
    "providers/settle.py",
    "loop",
    "pipeline/controller.py",
    "pipeline/redrive.py",
)

# Module cycles inside one room that belong to another piece of work; a pair listed here is
# tolerated, never required, so fixing one needs no change here.
KNOWN_MODULE_CYCLES = {
    # cli/: `run --session` continues a session through `sessions`, which borrows the
    # sandbox options of `run` (both imports inside functions).
    frozenset({"seamline.cli.run_command", "seamline.cli.sessions_command"}),
}


# The ranks of the rooms (docs/architecture.md draws the same picture). A room imports only
# rooms of a lower rank: the engine (sandbox, trace, tools, loop, stages, pipeline) knows
# no store, no backend and no face; the store knows the engine's protocols; backends know
# the seam; faces know everything below them. A new room needs a rank here.
RANKS: dict[str, int] = {
    # the vocabulary: plain types and functions of the environment
    "events": 0, "redact": 0, "extras": 0, "moved_modules": 0, "_version": 0, "locations": 0, "store_files": 0, "exit_codes": 0,
    "errors": 1, "usage": 1, "events_schema": 1,
    "definitions": 2,
    # reusable wire code
    "transport": 3,
    # the engine
    "sandbox": 4, "trace": 4, "gateway": 4,
    "tools": 5,
    "loop": 6,
    "stages": 7,
    "pipeline": 8,
    # the store, the backends, the engine wired to them
    "sessions": 9,
    "providers": 10, "worktrees": 10,
    "live": 11, "runner": 11,
    # the Python API and its fakes
    "agent": 12, "testing": 12, "evals": 12,
    "durable": 12,  # runs on Temporal workers: a face of its own, and what serve --on temporal submits to
    # the faces
    "server": 13, "acp_agent": 13, "telemetry": 13,
    "mcp_server": 14,  # a face over serve's run engine and policy
    "cli": 15,
    "__main__": 16,
}  # fmt: skip


# The provider room's own rooms: the seam (the modules directly in `providers/`), then what
# every program-running backend shares, then the families, which do not import each other.
PROVIDER_SEAM = {"base", "settle", "pause", "registry", "settings", "option_kinds", "failover"}
PROVIDER_RANKS: dict[str, int] = {
    "": 0,  # the seam
    "programs": 1,
    "model_apis": 2, "agent_clis": 2, "acp": 2, "opencode": 2, "a2a": 2, "local": 2,
}  # fmt: skip


def _modules() -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield from _runtime_imports(ast.Module(body=[other], type_ignores=[]))
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        else:
            yield from _runtime_imports(child)


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in MODULES else base


def _every_import(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, those only type checkers read included."""
    for child in ast.walk(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child


def _import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        nodes = _every_import(tree) if type_checking else _runtime_imports(tree)
        graph[module] = {
            target
            for node in nodes
            for target in _targets(module, is_package, node)
            if target == "seamline" or target.startswith("seamline.")
        }
    return graph


GRAPH = _import_graph()


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _witnesses(component: list[str]) -> list[str]:
    members = set(component)
    return sorted(
        f"{source} -> {target}"
        for source, targets in GRAPH.items()
        for target in targets
        if _room(source) in members and _room(target) in members and _room(source) != _room(target)
    )


def test_the_graph_sees_the_rooms_imports() -> None:
    # The walker itself: a known import at module level and one inside a function.
    assert "seamline.events" in GRAPH["seamline.loop.kernel"]
    assert "seamline.sessions.postgres" in GRAPH["seamline.sessions.sqlite_store"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _against_ranks(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a room to one of the same or a higher rank (or to a room with no rank)."""
    found = []
    for source, targets in sorted(graph.items()):
        room = _room(source)
        for target in sorted(targets):
            other = _room(target)
            if room is None or other is None or other == room:
                continue
            if room not in RANKS or other not in RANKS:
                found.append(f"{source} -> {target}: give room {room if room not in RANKS else other!r} a rank")
            elif RANKS[other] >= RANKS[room]:
                found.append(
                    f"{source} -> {target}: {room} (rank {RANKS[room]}) may not import {other} ({RANKS[other]})"
                )
    return found


def test_every_import_points_down_the_ranks() -> None:
    assert _against_ranks(GRAPH) == []
    rooms = {room for module in GRAPH if (room := _room(module)) is not None}
    assert rooms <= set(RANKS), sorted(rooms - set(RANKS))


def test_an_import_against_the_ranks_is_found() -> None:
    # Planted: the engine reaching for the store, a backend reaching for a face, a new room.
    planted = {module: set(targets) for module, targets in GRAPH.items()}
    planted["seamline.tools.workspace"].add("seamline.sessions.sqlite_store")
    planted["seamline.providers.base"].add("seamline.server.app")
    planted["seamline.newroom.thing"] = {"seamline.events"}
    planted["seamline.loop.kernel"].add("seamline.newroom.thing")
    found = _against_ranks(planted)
    assert any(
        f.startswith("seamline.tools.workspace -> seamline.sessions.sqlite_store: tools (rank 5)") for f in found
    )
    assert any(f.startswith("seamline.providers.base -> seamline.server.app") for f in found)
    assert any("give room 'newroom' a rank" in f for f in found)
    assert len(found) == 4


def test_no_import_cycle_between_rooms() -> None:
    rooms: dict[str, set[str]] = {}
    for source, targets in GRAPH.items():
        room = _room(source)
        if room is None:
            continue
        rooms.setdefault(room, set()).update(
            other for target in targets if (other := _room(target)) is not None and other != room
        )
    problems = [f"{' <-> '.join(c)}: {'; '.join(_witnesses(c))}" for c in _cycles(rooms)]
    assert problems == []


def test_no_import_cycle_between_modules() -> None:
    cycles = [c for c in _cycles(GRAPH) if frozenset(c) not in KNOWN_MODULE_CYCLES]
    assert cycles == []


def test_no_room_imports_the_facade() -> None:
    # `seamline/__init__.py` re-exports the rooms; a room that imports it depends on all of them.
    offenders = sorted(module for module, targets in GRAPH.items() if _room(module) and "seamline" in targets)
    assert offenders == []


def test_the_rooms_version_is_the_facades() -> None:
    import seamline
    from seamline._version import __version__

    assert seamline.__version__ == __version__


def _long_functions(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({length} lines)"


def test_the_loop_the_seam_and_the_controller_keep_functions_small() -> None:
    files: list[Path] = []
    for place in SMALL_FUNCTION_PLACES:
        target = PACKAGE / place
        files.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target])
    assert all(path.exists() for path in files) and len(files) >= 8
    assert [line for path in files for line in _long_functions(path)] == []


def _provider_room(module: str) -> str | None:
    """The room of a module under `providers/`: "" for the seam, else its family's package."""
    parts = module.split(".")
    if parts[:2] != ["seamline", "providers"]:
        return None
    if len(parts) == 2 or (len(parts) == 3 and not MODULES[module][1]):
        return ""
    return parts[2]


def _against_provider_ranks(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for source, targets in sorted(graph.items()):
        room = _provider_room(source)
        if room is None or source == "seamline.providers":  # the package re-exports the seam
            continue
        for target in sorted(targets):
            other = _provider_room(target)
            if other is None or other == room:
                continue
            if room not in PROVIDER_RANKS or other not in PROVIDER_RANKS:
                found.append(f"{source} -> {target}: give providers/{room or other} a rank")
            elif PROVIDER_RANKS[other] >= PROVIDER_RANKS[room]:
                found.append(f"{source} -> {target}: providers/{room} may not import providers/{other}")
    return found


def test_the_provider_families_are_rooms_of_their_own() -> None:
    assert _against_provider_ranks(GRAPH) == []
    seam = {m.split(".")[2] for m in MODULES if _provider_room(m) == "" and m != "seamline.providers"}
    assert seam == PROVIDER_SEAM, "only the seam's own modules sit directly in providers/"
    rooms = {room for m in MODULES if (room := _provider_room(m))}
    assert rooms == set(PROVIDER_RANKS) - {""}


def test_an_import_against_the_provider_ranks_is_found() -> None:
    planted = {module: set(targets) for module, targets in GRAPH.items()}
    planted["seamline.providers.agent_clis.claude_code"].add("seamline.providers.acp.provider")
    planted["seamline.providers.base"].add("seamline.providers.programs.lookup")
    planted["seamline.providers.programs.lookup"].add("seamline.providers.local.offline")
    found = _against_provider_ranks(planted)
    assert found == [
        "seamline.providers.agent_clis.claude_code -> seamline.providers.acp.provider:"
        " providers/agent_clis may not import providers/acp",
        "seamline.providers.base -> seamline.providers.programs.lookup: providers/ may not import providers/programs",
        "seamline.providers.programs.lookup -> seamline.providers.local.offline:"
        " providers/programs may not import providers/local",
    ]


def test_the_seam_has_no_circle_even_for_type_checkers() -> None:
    # base.py and settle.py imported each other (settle only for its annotations); the
    # settler now names what it needs of a session as a protocol.
    everything = _import_graph(type_checking=True)
    seam = {
        m: {t for t in targets if _provider_room(t) == ""}
        for m, targets in everything.items()
        if _provider_room(m) == ""
    }
    assert [c for c in _cycles(seam) if "seamline.providers" not in c] == []
    assert "seamline.providers.base" not in everything["seamline.providers.settle"]
