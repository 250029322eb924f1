"""The evaluation routes: the evaluations kept beside the server's store (``seamline eval``),
their figures as JSON, and their self-contained report page; read-only, as ``seamline eval
list`` and ``show`` are."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from seamline.errors import InvalidRequest
from seamline.evals.html import render
from seamline.evals.record import EvalRecord, evals_dir, find_record, list_records
from seamline.evals.report import report
from seamline.server.api_models import EvalList, EvalReport
from seamline.server.operations import Reply, operation
from seamline.server.runs import NotFound
from seamline.server.state import session_store

__all__ = ["evaluation", "evaluation_page", "list_evaluations"]

_REPORT_HEADERS: Final = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
}


@operation("the kept evaluations, newest first", replies={200: Reply("evaluations", EvalList)})
async def list_evaluations(request: Request) -> Response:
    rows = []
    for record in list_records(evals_dir(session_store(request).location)):
        plan = record.plan()
        rows.append(
            {
                "id": record.id,
                "dataset": plan.dataset,
                "status": str(record.status().get("status")),
                "variants": [v.label for v in plan.variants],
                "trials": len(record.trials()),
                "planned": len(plan.trial_keys()),
            }
        )
    return JSONResponse({"evaluations": rows})


@operation("an evaluation's figures", replies={200: Reply("figures", EvalReport)}, errors=(400, 404))
async def evaluation(request: Request) -> Response:
    return JSONResponse(_figures(request))


@operation(
    "an evaluation's figures as one self-contained page",
    replies={200: Reply("the page", str, media=("text/html",))},
    errors=(400, 404),
)
async def evaluation_page(request: Request) -> Response:
    # The page holds no script and asks for nothing; its one inline style is all it may use.
    return HTMLResponse(render(_figures(request)), headers=_REPORT_HEADERS)


def _figures(request: Request) -> dict[str, object]:
    record = _record(request)
    return report(record.plan(), record.trials(), status=str(record.status().get("status")))


def _record(request: Request) -> EvalRecord:
    eval_id = request.path_params["eval_id"]
    try:
        return find_record(evals_dir(session_store(request).location), eval_id)
    except InvalidRequest as exc:
        if "no evaluation" in exc.message:
            raise NotFound(exc.message) from None
        raise
