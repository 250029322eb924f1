"""Modules: named packages of stages, tools and tool sources, and how they are found.

A module is any object with a ``name`` (``str`` or ``None``) and ``configure(builder)``.
``AgentBuilder.use(module)`` calls ``configure``, where the module adds what it brings.
Installing a module makes it *available*; it runs only when something names it: code
that calls ``use()``, or ``seamline run --module NAME``.

Modules are found by name among the built-ins and the entry point group
``seamline.modules``; a third-party package registers one in its ``pyproject.toml``::

    [project.entry-points."seamline.modules"]
    "example.audit" = "example_audit:AuditModule"

The entry point names a class (or any callable) that builds the module without
arguments.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from seamline.errors import InvalidRequest

if TYPE_CHECKING:
    from seamline.stages.builder import AgentBuilder

__all__ = ["ENTRY_POINT_GROUP", "Module", "available_modules", "load_module"]

ENTRY_POINT_GROUP: Final = "seamline.modules"

# Built-in modules, imported only when named so an unused one costs nothing.
_BUILTIN: Final[dict[str, str]] = {
    "masking": "seamline.stages.masking:MaskingModule",
}


@runtime_checkable
class Module(Protocol):
    """What ``AgentBuilder.use`` accepts. A module whose name is ``None`` may be used,
    but it cannot satisfy a profile's required modules."""

    @property
    def name(self) -> str | None: ...

    def configure(self, builder: AgentBuilder) -> None: ...


def available_modules() -> dict[str, str]:
    """Every module name that can be loaded, with where it comes from."""
    found = {name: target for name, target in _BUILTIN.items()}
    from importlib.metadata import entry_points  # only when asked: it costs import time

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def load_module(name: str) -> Module:
    """Build the module registered as ``name`` (built-in first, then entry points)."""
    target = _BUILTIN.get(name)
    factory: object
    if target is not None:
        module_path, _, attr = target.partition(":")
        factory = getattr(importlib.import_module(module_path), attr)
    else:
        from importlib.metadata import entry_points

        matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not matches:
            known = ", ".join(sorted(available_modules())) or "none"
            raise InvalidRequest(f"unknown module {name!r}; available: {known}")
        try:
            factory = matches[0].load()
        except Exception as exc:  # noqa: BLE001 - a broken third-party package must not crash the CLI
            raise InvalidRequest(f"module {name!r} failed to load: {type(exc).__name__}: {exc}") from None
    module = factory
    if isinstance(factory, type) or (callable(factory) and not isinstance(factory, Module)):
        try:
            module = factory()
        except Exception as exc:  # noqa: BLE001 - foreign code; report it as one line
            raise InvalidRequest(f"module {name!r} failed to start: {type(exc).__name__}: {exc}") from None
    if not isinstance(module, Module):
        raise InvalidRequest(f"module {name!r} has no name and configure(builder); got {type(module).__name__}")
    return module
