"""The worktree routes: a worktree run's diff against the commit it started from, its
merge into the branch it started from, and its removal; the same as ``seamline diff``,
``merge`` and ``discard`` (:mod:`seamline.worktrees`), over the server's store.

A refusal changes nothing and is 409 with the reason (the main working tree is dirty or on
another branch, the merge conflicts, the run is still running or was merged or discarded
already); a session without a worktree is 404. Each is served under the session
(``/v1/sessions/ID/diff``) and under a run (``/v1/runs/RUN/diff``: a run of this server,
whose session is meant, or a worktree run's own id, as ``seamline diff RUN`` takes it). Only runs whose repository lies inside the
folder this server offers are served (403 otherwise).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from seamline.errors import InvalidRequest, WorktreeRefused
from seamline.server.api_models import DiffQuery, Merged, MergeRequest, WorktreeDiff, WorktreeDiscarded
from seamline.server.inputs import read_body
from seamline.server.operations import Reply, operation
from seamline.server.runs import NotFound
from seamline.server.state import run_hub, session_store
from seamline.worktrees import Worktree, diff, discard, merge, worktree_of

__all__ = ["Refused", "discard_worktree", "merge_worktree", "worktree_diff"]


class Refused(InvalidRequest):
    """A worktree action refused, nothing changed (409, kind ``refused``)."""


def _worktree(request: Request) -> Worktree:
    hub = run_hub(request)
    named = request.path_params.get("session_id")
    if named is None:  # /v1/runs/RUN/...: a run of this server, or a worktree run's own id (the CLI's RUN)
        run = hub.runs.get(request.path_params["run_id"])
        named = run.session_id if run is not None and run.session_id else request.path_params["run_id"]
    record = hub.require_session(named)
    tree = worktree_of(record)
    if tree is None:
        raise NotFound(f"session {record.id[:12]} has no worktree (it was not started with --worktree)")
    # The repository is one this server offers, as a session's workspace must be.
    hub.policy.workspace_in(tree.repo, (hub.workspace,))
    return tree


@operation(
    "a worktree run's changes against the commit it started from",
    replies={200: Reply("the diff", WorktreeDiff)},
    query=DiffQuery,
    errors=(400, 404, 409),
)
async def worktree_diff(request: Request) -> Response:
    tree = _worktree(request)
    stat = request.query_params.get("stat", "false").lower() in ("1", "true", "yes")
    try:
        text = diff(tree.run_id, store=session_store(request), stat=stat)
    except WorktreeRefused as exc:
        raise Refused(exc.message) from None
    return JSONResponse(
        {"session_id": tree.run_id, "branch": tree.branch, "base": tree.base, "state": tree.state, "diff": text}
    )


@operation(
    "merge a worktree run's branch into the branch it started from, in the main working tree; "
    "409 and nothing changed when that tree is dirty or the merge conflicts",
    replies={200: Reply("what was merged", Merged)},
    body=MergeRequest,
    errors=(400, 404, 409, 413),
)
async def merge_worktree(request: Request) -> Response:
    body = await read_body(request, MergeRequest)
    tree = _worktree(request)
    try:
        done = merge(tree.run_id, store=session_store(request), squash=body.squash)
    except WorktreeRefused as exc:
        raise Refused(exc.message) from None
    return JSONResponse(
        {
            "session_id": done.run_id,
            "branch": done.branch,
            "into": done.into,
            "commits": done.commits,
            "commit": done.commit,
            "squashed": done.squashed,
        }
    )


@operation(
    "remove a worktree run's worktree and branch (the session stays, marked discarded)",
    replies={200: Reply("what was removed", WorktreeDiscarded)},
    errors=(400, 404, 409),
)
async def discard_worktree(request: Request) -> Response:
    tree = _worktree(request)
    try:
        gone = discard(tree.run_id, store=session_store(request))
    except WorktreeRefused as exc:
        raise Refused(exc.message) from None
    return JSONResponse({"session_id": gone.run_id, "branch": gone.branch, "path": gone.path, "state": gone.state})
