"""The route table of ``seamline serve``: one route per path and method.

Every route in the OpenAPI document declares its models (``@operation`` on its handler);
the page and the document itself are left out of it (``include_in_schema=False``).
"""

from __future__ import annotations

from typing import Final

from starlette.routing import BaseRoute, Route

from seamline.server.a2a_route import a2a_card, a2a_root_card, a2a_rpc
from seamline.server.agui_route import agent_agui, agui
from seamline.server.routes_evals import evaluation, evaluation_page, list_evaluations
from seamline.server.routes_info import info, list_agents, list_providers, openapi, page
from seamline.server.routes_pipelines import list_pipelines, start_pipeline, trace_summary, verify_trace
from seamline.server.routes_runs import answer_permission, cancel_run, get_run, list_runs, raise_budget, run_events
from seamline.server.routes_sessions import (
    create_session,
    delete_session,
    fork_session,
    get_session,
    list_sessions,
    revert_session,
    start_run,
    transcript,
)
from seamline.server.routes_worktrees import discard_worktree, merge_worktree, worktree_diff

__all__ = ["ROUTES"]

ROUTES: Final[tuple[BaseRoute, ...]] = (
    Route("/", page, methods=["GET"], include_in_schema=False),
    Route("/page/{name}", page, methods=["GET"], include_in_schema=False),
    Route("/v1/openapi.json", openapi, methods=["GET"], include_in_schema=False),
    Route("/v1/info", info, methods=["GET"]),
    Route("/v1/providers", list_providers, methods=["GET"]),
    Route("/v1/agents", list_agents, methods=["GET"]),
    Route("/v1/sessions", list_sessions, methods=["GET"]),
    Route("/v1/sessions", create_session, methods=["POST"]),
    Route("/v1/sessions/{session_id}", get_session, methods=["GET"]),
    Route("/v1/sessions/{session_id}", delete_session, methods=["DELETE"]),
    Route("/v1/sessions/{session_id}/fork", fork_session, methods=["POST"]),
    Route("/v1/sessions/{session_id}/transcript", transcript, methods=["GET"]),
    Route("/v1/sessions/{session_id}/revert", revert_session, methods=["POST"]),
    Route("/v1/sessions/{session_id}/runs", start_run, methods=["POST"]),
    Route("/v1/sessions/{session_id}/diff", worktree_diff, methods=["GET"]),
    Route("/v1/sessions/{session_id}/merge", merge_worktree, methods=["POST"]),
    Route("/v1/sessions/{session_id}/discard", discard_worktree, methods=["POST"]),
    Route("/v1/runs", list_runs, methods=["GET"]),
    Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
    Route("/v1/runs/{run_id}/events", run_events, methods=["GET"]),
    Route("/v1/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
    Route("/v1/runs/{run_id}/budget", raise_budget, methods=["POST"]),
    Route("/v1/runs/{run_id}/permissions/{request_id}", answer_permission, methods=["POST"]),
    Route("/v1/runs/{run_id}/diff", worktree_diff, methods=["GET"]),
    Route("/v1/runs/{run_id}/merge", merge_worktree, methods=["POST"]),
    Route("/v1/runs/{run_id}/discard", discard_worktree, methods=["POST"]),
    Route("/v1/pipelines", list_pipelines, methods=["GET"]),
    Route("/v1/pipelines/{name}/runs", start_pipeline, methods=["POST"]),
    Route("/v1/traces/{run_id}", trace_summary, methods=["GET"]),
    Route("/v1/traces/{run_id}/verify", verify_trace, methods=["GET"]),
    Route("/v1/evals", list_evaluations, methods=["GET"]),
    Route("/v1/evals/{eval_id}", evaluation, methods=["GET"]),
    Route("/v1/evals/{eval_id}/page", evaluation_page, methods=["GET"]),
    Route("/v1/agui", agui, methods=["POST"]),
    Route("/v1/agents/{name}/agui", agent_agui, methods=["POST"]),
    Route("/v1/agents/{name}/a2a/.well-known/agent-card.json", a2a_card, methods=["GET"]),
    Route("/v1/agents/{name}/a2a", a2a_rpc, methods=["POST"]),
    Route("/.well-known/agent-card.json", a2a_root_card, methods=["GET"]),
)
