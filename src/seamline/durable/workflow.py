"""The Temporal workflow of a durable run: advance, run the missing turns, repeat.

Workflow code is replayed by Temporal, so it holds no logic of its own beyond this loop
and imports nothing of seamline (the sandbox stays happy, and a change to the
controller never makes old histories non-deterministic). Its history holds only the run
id, turn keys and small summaries: the turns' events live in the store.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

__all__ = ["ADVANCE", "ROLE_TURN", "WORKFLOW", "PipelineWorkflow"]

WORKFLOW = "seamline.pipeline"
ADVANCE = "seamline.advance"
ROLE_TURN = "seamline.role_turn"

_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))


@workflow.defn(name=WORKFLOW)
class PipelineWorkflow:
    """Input: ``{"run_id", "store", "heartbeat_s", "turn_timeout_s"}``; result: the run's report."""

    @workflow.run
    async def run(self, job: dict[str, Any]) -> dict[str, Any]:
        run_id, store = job["run_id"], job["store"]
        heartbeat = timedelta(seconds=float(job.get("heartbeat_s", 10.0)))
        turn_timeout = timedelta(seconds=float(job.get("turn_timeout_s", 3600.0)))
        while True:
            step: dict[str, Any] = await workflow.execute_activity(
                ADVANCE,
                args=[store, run_id],
                start_to_close_timeout=timedelta(minutes=10),
                retry_policy=_RETRY,
            )
            if step["done"]:
                report: dict[str, Any] = step["report"]
                return report
            await asyncio.gather(
                *(
                    workflow.execute_activity(
                        ROLE_TURN,
                        args=[store, run_id, key],
                        start_to_close_timeout=turn_timeout,
                        heartbeat_timeout=heartbeat,
                        retry_policy=_RETRY,
                    )
                    for key in step["needed"]
                )
            )
