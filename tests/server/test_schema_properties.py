"""Property tests with schemathesis: requests generated from docs/openapi.json against the
running server. No 5xx, every status and body as documented, every error a JSON error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from seamline.server.openapi import openapi_document  # noqa: E402
from tests.server.harness import Served, serve  # noqa: E402

schema = schemathesis.openapi.from_dict(openapi_document())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("schema"), max_body=64 * 1024) as server:
        yield server


@schema.parametrize()
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_document(case: schemathesis.Case, served: Served) -> None:
    if case.path == "/v1/providers":
        case.query = {**(case.query or {}), "preflight": "false"}  # preflight runs programs; not fuzzed
    # A schema-valid body may still name a provider, option or folder that does not exist:
    # that is a 400 by design, so "valid data is accepted" is not checked.
    case.call_and_validate(base_url=served.base, excluded_checks=[positive_data_acceptance])


def test_store_survives_the_fuzzing(served: Served) -> None:
    # Whatever was created stays readable; nothing half-written. The test makes what it
    # checks (run alone, the fuzzing before it made nothing): a session with metadata and
    # a finished turn, beside whatever the fuzzing left.
    with served.client() as client:
        created = client.post("/v1/sessions", json={"provider": "offline", "metadata": {"nested": {"a": [1, 2]}}})
        assert created.status_code == 201, created.text
        session_id = created.json()["id"]
        run_id = client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "what is here?"}).json()["id"]
        with client.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as response:
            list(response.iter_lines())  # the stream ends when the run does
        listed = client.get("/v1/sessions", params={"limit": 10000})
        assert listed.status_code == 200 and session_id in [row["id"] for row in listed.json()["sessions"]]
    records = served.store.list_sessions(limit=10000)
    assert session_id in [r.id for r in records]
    for record in records:
        assert served.store.get(record.id) == record
        served.store.transcript(record.id)
    assert served.store.transcript(session_id)[0].kind == "user"
