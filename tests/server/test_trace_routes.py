"""GET /v1/traces/RUN and /v1/traces/RUN/verify on a trace that fails its checks: the
verdict is a reply (ok false, each problem a line), not a server error."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from seamline.trace.writer import trace_path
from tests.server.harness import serve


def test_a_tampered_trace_is_reported_not_a_500(tmp_path: Path) -> None:
    with serve(tmp_path) as served, served.client() as client:
        script = served.script("pipeline", [{"text": "The answer is 42."}])
        body = {"prompt": "six times seven?", "provider": "scripted", "options": {"script": script}}
        reply = client.post("/v1/pipelines/single/runs", json=body)
        assert reply.status_code == 201, reply.text
        run_id = reply.json()["id"]
        with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
            list(response.iter_lines())  # to the run's end
        assert client.get(f"/v1/traces/{run_id}/verify").json()["ok"] is True
        path = trace_path(run_id, store_path=served.store.location)
        path.write_text(path.read_text() + "not a record\n")
        verify = client.get(f"/v1/traces/{run_id}/verify")
        assert verify.status_code == 200, verify.text
        assert verify.json()["ok"] is False
        problems = verify.json()["problems"]
        assert problems and all(isinstance(p, str) for p in problems), problems
        assert "not a trace record" in problems[0]
        summary = client.get(f"/v1/traces/{run_id}")
        assert summary.status_code == 200 and summary.json()["problems"] == problems
