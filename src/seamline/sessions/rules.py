"""Permission rules kept in the session store, and the one approval path built on them.

Rules live in the store (SQLite or PostgreSQL), in a table of their own
(``permission_rules``), read and written through the store's own connection.
:class:`PermissionRules` is the store's :class:`~seamline.tools.permissions.RuleBook`.

>>> rules = PermissionRules(":memory:")
>>> rule = rules.add("deny", tool="shell", pattern="command=git push*")
>>> [r.describe() for r in rules.list()]
['#1 deny tool=shell pattern=command=git push*']
"""

from __future__ import annotations

import os
from pathlib import Path

from seamline.errors import InvalidRequest
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.sqlite_store import open_store
from seamline.tools.permissions import (
    EFFECTS,
    TOOL_CLASSES,
    Effect,
    PermissionRule,
    PermissionService,
    Prompter,
)

__all__ = ["PermissionRules", "permission_service"]


def _effect(value: str) -> Effect:
    for effect in EFFECTS:
        if value == effect:
            return effect
    raise InvalidRequest(f"a stored rule has the effect {value!r}; the store is damaged")


class PermissionRules:
    """Durable rules kept in the session store (table ``permission_rules``), SQLite or
    PostgreSQL alike, read and written through the store's own connection.

    ``store`` is an open store (shared, not closed here), or a location to open one
    (``":memory:"``, a file path, a ``postgresql://`` URL), which :meth:`close` closes.
    """

    def __init__(self, store: SessionStore | str | os.PathLike[str]) -> None:
        if isinstance(store, SessionStore):
            self.store, self._owned = store, False
        else:
            self.store, self._owned = open_store(store), True
        self.path = self.store.location

    def add(
        self,
        effect: str,
        *,
        tool: str | None = None,
        tool_class: str | None = None,
        pattern: str | None = None,
        workspace: str | os.PathLike[str] | None = None,
    ) -> PermissionRule:
        """Store a rule and return it with its id."""
        if effect not in EFFECTS:
            raise InvalidRequest(f"a rule's effect is one of {', '.join(EFFECTS)}; got {effect!r}")
        if tool_class is not None and tool_class not in TOOL_CLASSES:
            raise InvalidRequest(f"a tool class is one of {', '.join(TOOL_CLASSES)}; got {tool_class!r}")
        where = str(Path(workspace).resolve()) if workspace is not None else None
        rule_id, now = self.store.add_permission_rule(effect, tool, tool_class, pattern, where)
        return PermissionRule(rule_id, _effect(effect), tool, tool_class, pattern, where, now)

    def remove(self, rule_id: int) -> bool:
        """Delete rule ``rule_id``; False when there was none."""
        return self.store.remove_permission_rule(rule_id)

    def list(self) -> list[PermissionRule]:
        """Every rule, oldest first."""
        return [PermissionRule(row[0], _effect(row[1]), *row[2:]) for row in self.store.permission_rule_rows()]

    def close(self) -> None:
        if self._owned:
            self.store.close()


def permission_service(
    *,
    store: SessionStore | None,
    workspace: str | os.PathLike[str] | None,
    yes: bool = False,
    prompter: Prompter | None = None,
) -> PermissionService:
    """The one approval path of every entry point (``run``, resume, fork, pipelines, the
    Python API): hard denials, then the store's rules, then ``--yes`` or the prompter."""
    rules = PermissionRules(store) if store is not None else None
    return PermissionService(rules=rules, workspace=workspace, yes=yes, prompter=prompter)
