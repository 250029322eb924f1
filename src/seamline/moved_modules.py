"""Old import paths of modules that moved to another room, kept working.

A package whose modules moved calls :func:`keep_old_paths` with ``{old: new}``; importing
an old path then gives the module at its new path (the same object, so ``isinstance`` and
monkeypatching see one module). Nothing is imported until an old path is asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping
from types import ModuleType

__all__ = ["keep_old_paths"]


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.moved: dict[str, str] = {}

    def new_name(self, fullname: str) -> str | None:
        """Where ``fullname`` lives now: a moved module, or a module inside a moved package."""
        head, tail = fullname, ""
        while head:
            if (new := self.moved.get(head)) is not None:
                return new + tail
            head, dot, last = head.rpartition(".")
            tail = f"{dot}{last}{tail}"
        return None

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("seamline.") or self.new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return ModuleType(spec.name)  # a placeholder: exec_module puts the real one in its place

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns what sys.modules holds under the name once this returns.
        new = self.new_name(module.__name__)
        assert new is not None  # find_spec said so
        sys.modules[module.__name__] = importlib.import_module(new)


_FINDER = _OldPaths()


def keep_old_paths(moved: Mapping[str, str]) -> None:
    """Make each old dotted path import the module now at the new one."""
    _FINDER.moved.update(moved)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
