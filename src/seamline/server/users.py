"""The people a shared server knows: a name, a role, a daily spending cap, and the SHA-256
of a token shown once.

The users file is JSON (``{"users": [...]}``), kept beside a file store as
``STORE.users.json`` (or anywhere, given to ``seamline serve --users FILE``), written with
mode 0600. A token is 32 random bytes (``secrets.token_urlsafe``), so its SHA-256 is
enough to keep: there is nothing to guess that a slow hash would protect. Tokens are
compared as digests in constant time (:func:`hmac.compare_digest`).

>>> import tempfile, pathlib
>>> book = UserBook(pathlib.Path(tempfile.mkdtemp()) / "users.json")
>>> token = book.add("ana", "operator")
>>> book.authenticate(token).role, book.authenticate("nope")
('operator', None)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast, get_args

from seamline.errors import InvalidRequest

__all__ = ["ACTING", "OWNER_KEY", "ROLES", "ROLE_RANK", "Role", "User", "UserBook", "UsersFileError", "users_path_for"]

Role = Literal["viewer", "operator", "admin"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
ROLE_RANK: Final[dict[str, int]] = {role: rank for rank, role in enumerate(ROLES)}
OWNER_KEY: Final = "started_by"  # the session metadata key naming the user that opened it
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
# The names of the automatic answers a decision records as its ``by``; no user may take them.
_RESERVED: Final = frozenset({"rule", "yes", "user", "token"})


class UsersFileError(InvalidRequest):
    """A users file that cannot be read, or a name or role that is not allowed."""


@dataclass(frozen=True)
class User:
    """Who a request is: ``name`` is recorded on the runs it starts and the decisions it
    makes; ``budget_usd_per_day``: its cap on what its runs spend in a UTC day (None: none)."""

    name: str
    role: Role
    budget_usd_per_day: float | None = None

    def may(self, needed: Role) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[needed]


# The user of the request being served (set by the Guard), so the hub records who started a
# run and who answered a request without every route passing it along.
ACTING: ContextVar[User | None] = ContextVar("seamline_acting_user", default=None)


def users_path_for(store_file: str | os.PathLike[str]) -> Path:
    """The users file beside a store file: ``runs.db`` -> ``runs.db.users.json``."""
    path = Path(store_file)
    return path.with_name(path.name + ".users.json")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class UserBook:
    """The users file; read again whenever it changes on disk, so ``seamline users add``
    takes effect on a running server."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen: tuple[float, int] | None = None
        self._users: list[dict[str, Any]] = []

    # -- reading -----------------------------------------------------------------------------
    def _entries(self) -> list[dict[str, Any]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._users = None, []
            return self._users
        stamp = (stat.st_mtime, stat.st_size)
        if stamp != self._seen:
            self._users = self._parse(self.path.read_text(encoding="utf-8"))
            self._seen = stamp
        return self._users

    def _parse(self, text: str) -> list[dict[str, Any]]:
        try:
            data: object = json.loads(text) if text.strip() else {"users": []}
        except json.JSONDecodeError as exc:
            raise UsersFileError(f"users file {self.path}: not JSON ({exc.msg}, line {exc.lineno})") from None
        document = cast("dict[str, object]", data) if isinstance(data, dict) else {}
        found = document.get("users")
        if not isinstance(found, list):
            raise UsersFileError(f'users file {self.path}: expected {{"users": [...]}}')
        users: list[dict[str, Any]] = []
        for item in cast("list[object]", found):
            entry = cast("dict[str, Any]", item) if isinstance(item, dict) else {}
            if not isinstance(entry.get("name"), str):
                raise UsersFileError(f"users file {self.path}: every user needs a name")
            users.append(entry)
            if entry.get("role") not in ROLES:
                raise UsersFileError(f"users file {self.path}: user {entry['name']!r} has no role of {ROLES}")
            if not isinstance(entry.get("token_sha256"), str) or len(entry["token_sha256"]) != 64:
                raise UsersFileError(f"users file {self.path}: user {entry['name']!r} has no token_sha256")
            cap = entry.get("budget_usd_per_day")
            if cap is not None and (not isinstance(cap, int | float) or cap < 0):
                raise UsersFileError(f"users file {self.path}: user {entry['name']!r}: budget_usd_per_day >= 0")
        return users

    def users(self) -> list[User]:
        return [_user(e) for e in self._entries()]

    def authenticate(self, token: str) -> User | None:
        """The user whose token this is, or None. Every entry is compared (constant time
        per entry), so the answer's timing does not say which one matched."""
        given = _digest(token).encode()
        found: dict[str, Any] | None = None
        for entry in self._entries():
            if hmac.compare_digest(given, entry["token_sha256"].encode()):
                found = entry
        return _user(found) if found is not None else None

    # -- writing -----------------------------------------------------------------------------
    def add(self, name: str, role: str, *, budget_usd_per_day: float | None = None) -> str:
        """Add a user and return its token (the only time it is seen: the file keeps its hash)."""
        if not _NAME.match(name) or name in _RESERVED:
            raise UsersFileError(f"user name {name!r}: letters, digits and ._@- (not rule, yes, user, token)")
        if role not in ROLES:
            raise UsersFileError(f"role {role!r}: one of {', '.join(ROLES)}")
        if budget_usd_per_day is not None and budget_usd_per_day < 0:
            raise UsersFileError("--budget-usd-per-day must be >= 0")
        entries = list(self._entries())
        if any(e["name"] == name for e in entries):
            raise UsersFileError(f"user {name!r} exists; remove it first to give a new token")
        token = secrets.token_urlsafe(32)
        entry: dict[str, Any] = {"name": name, "role": role, "token_sha256": _digest(token), "created_at": time.time()}
        if budget_usd_per_day is not None:
            entry["budget_usd_per_day"] = budget_usd_per_day
        self._write([*entries, entry])
        return token

    def remove(self, name: str) -> None:
        entries = self._entries()
        kept = [e for e in entries if e["name"] != name]
        if len(kept) == len(entries):
            raise UsersFileError(f"no user {name!r} in {self.path}")
        self._write(kept)

    def _write(self, entries: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"users": entries}, out, indent=2)
            out.write("\n")
        os.replace(temporary, self.path)
        self._seen = None


def _user(entry: dict[str, Any]) -> User:
    cap = entry.get("budget_usd_per_day")
    return User(name=entry["name"], role=entry["role"], budget_usd_per_day=float(cap) if cap is not None else None)
