"""Classified failures.

Every failure seamline reports has a *kind* from a closed set, a message that never
carries a secret, and whether trying again may help. Providers raise these at their edge;
the base verbs turn them into ``error`` events, and the CLI into one line on stderr.
"""

from __future__ import annotations

from typing import ClassVar, Final

from seamline.events import Error, ErrorKind

__all__ = [
    "AuthFailure",
    "BudgetExceeded",
    "ERROR_KINDS",
    "InvalidRequest",
    "PermissionDenied",
    "ProviderFailure",
    "QuotaExceeded",
    "SandboxViolation",
    "SeamlineError",
    "StorageFailure",
    "TimeoutFailure",
    "TransportFailure",
    "WorktreeFailure",
    "WorktreeRefused",
    "error_for_kind",
]

ERROR_KINDS: Final[tuple[ErrorKind, ...]] = (
    "timeout",
    "auth",
    "quota",
    "transport",
    "provider",
    "invalid_request",
    "sandbox",
    "permission",
    "budget",
    "storage",
)


class SeamlineError(Exception):
    """A classified failure. ``kind`` is one of :data:`ERROR_KINDS`."""

    kind: ClassVar[ErrorKind] = "provider"
    default_retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable

    def to_event(self, *, attempt: int | None = None) -> Error:
        return Error(kind=self.kind, message=self.message, retryable=self.retryable, attempt=attempt)


class TimeoutFailure(SeamlineError):
    kind = "timeout"
    default_retryable = True


class AuthFailure(SeamlineError):
    kind = "auth"


class QuotaExceeded(SeamlineError):
    kind = "quota"
    default_retryable = True

    def __init__(self, message: str, *, retryable: bool | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, retryable=retryable)
        self.retry_after = retry_after


class TransportFailure(SeamlineError):
    kind = "transport"
    default_retryable = True


class ProviderFailure(SeamlineError):
    kind = "provider"


class InvalidRequest(SeamlineError):
    """A request that cannot succeed as given: a user mistake or a refused input."""

    kind = "invalid_request"


class SandboxViolation(SeamlineError):
    kind = "sandbox"


class PermissionDenied(SeamlineError):
    kind = "permission"


class BudgetExceeded(SeamlineError):
    kind = "budget"


class StorageFailure(SeamlineError):
    """The store or a journal cannot be opened, read or written: a missing or unwritable
    folder, a damaged file, another program's database, a server that refuses. Not a
    mistake in the request (that is ``invalid_request``, as an unknown session id is)."""

    kind = "storage"


class WorktreeRefused(InvalidRequest):
    """A worktree request that cannot be done as asked, and was not begun: a workspace
    outside any git repository, a branch that exists, a main working tree with
    uncommitted changes, a merge that conflicts, a run without a worktree."""


class RunNotPaused(InvalidRequest):
    """A budget raise asked of a run that is not paused at its budget (it runs, it ended, or
    it never had ``on_budget="pause"``): nothing was changed."""


class WorktreeFailure(StorageFailure):
    """git could not do what a worktree run needs (git missing, a damaged repository, a
    commit or removal that failed): the run's work is kept where git left it."""


_BY_KIND: Final[dict[ErrorKind, type[SeamlineError]]] = {
    cls.kind: cls
    for cls in (
        TimeoutFailure,
        AuthFailure,
        QuotaExceeded,
        TransportFailure,
        ProviderFailure,
        InvalidRequest,
        SandboxViolation,
        PermissionDenied,
        BudgetExceeded,
        StorageFailure,
    )
}


def error_for_kind(kind: ErrorKind, message: str, *, retryable: bool | None = None) -> SeamlineError:
    """Build the exception class that matches ``kind``."""
    return _BY_KIND[kind](message, retryable=retryable)
