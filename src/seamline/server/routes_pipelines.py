"""The pipeline routes: the built-in pipelines, a run of one, and its trace."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from seamline.server.api_models import NewPipelineRun, PipelineList, RunSummary, TraceSummary, TraceVerification
from seamline.server.inputs import read_body
from seamline.server.operations import Reply, operation
from seamline.server.remote_runs import RemoteRunHub
from seamline.server.runs import NotFound, Run
from seamline.server.state import run_hub, session_store

__all__ = ["list_pipelines", "start_pipeline", "trace_summary", "verify_trace"]


@operation("the built-in pipelines", replies={200: Reply("pipelines", PipelineList)})
async def list_pipelines(request: Request) -> Response:
    from seamline.pipeline.builtin import BUILTIN_PIPELINES

    return JSONResponse({"pipelines": sorted(BUILTIN_PIPELINES)})


@operation(
    "run a built-in pipeline under its controller; its roles stream as AG-UI subagents",
    replies={201: Reply("the run", RunSummary)},
    body=NewPipelineRun,
    errors=(400, 404, 413),
)
async def start_pipeline(request: Request) -> Response:
    body = await read_body(request, NewPipelineRun)
    hub = run_hub(request)
    start: Callable[..., Awaitable[Run]] = hub.start_pipeline
    key = request.headers.get("idempotency-key")
    if key is not None and isinstance(hub, RemoteRunHub):  # on Temporal: a retry finds the run it started
        start = functools.partial(hub.start_pipeline, run_id=key)
    run = await start(
        request.path_params["name"],
        body.prompt,
        provider=body.provider,
        model=body.model,
        options=body.options,
        workspace=body.workspace,
        yes=body.yes,
        max_steps=body.max_steps,
        budget_usd=body.budget_usd,
        on_budget=body.on_budget,
        agent=body.agent,
    )
    return JSONResponse(run.summary(), status_code=201, headers={"location": f"/v1/runs/{run.id}"})


@operation("a pipeline run's trace summary", replies={200: Reply("summary", TraceSummary)}, errors=(400, 404))
async def trace_summary(request: Request) -> Response:
    from seamline.trace.verify import verify_trace as verify

    return JSONResponse(verify(_trace_file(request)).summary())


@operation("verify a pipeline run's trace", replies={200: Reply("verification", TraceVerification)}, errors=(400, 404))
async def verify_trace(request: Request) -> Response:
    from seamline.trace.verify import verify_trace as verify

    verification = verify(_trace_file(request))
    problems = [str(p) for p in verification.problems]  # each a line, as in the summary
    return JSONResponse({"ok": verification.ok, "replayable": verification.replayable, "problems": problems})


def _trace_file(request: Request) -> Path:
    from seamline.trace.writer import trace_path

    run_id = request.path_params["run_id"]
    path = trace_path(run_id, store_path=session_store(request).location)
    if not path.is_file():
        raise NotFound(f"no trace for run {run_id!r}")
    return path
