"""Property tests of the A2A translator and the JSON-RPC reader: an artifact cut into any
chunks streams back whole and in order; random results, random bodies and random cards
never raise anything but a classified failure."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.errors import SeamlineError
from seamline.events import Complete, Text, TextDelta
from seamline.providers.a2a.card import read_card
from seamline.providers.a2a.translator import A2ATranslator
from seamline.providers.a2a.wire import result_of

json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
URLS = ["http://127.0.0.1:9", "http://127.0.0.1:9/rpc", "http://127.0.0.2:9/"]
STATES = ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"]
STATES += ["TASK_STATE_REJECTED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED", "TASK_STATE_SUBMITTED"]


def shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """An object with some of ``fields``, each of its A2A shape or anything else; or anything."""
    return st.fixed_dictionaries({}, optional={k: v | json_value for k, v in fields.items()}) | json_value


part = shaped({"text": st.text(max_size=6), "data": json_value, "url": st.text(max_size=6), "raw": st.text()})
message = shaped({"role": st.sampled_from(["ROLE_AGENT", "ROLE_USER"]), "parts": st.lists(part, max_size=3)})
status = shaped({"state": st.sampled_from(STATES), "message": message})
artifact = shaped({"artifactId": st.sampled_from(["a", "b"]), "parts": st.lists(part, max_size=3)})
ids = {"taskId": st.text(max_size=3), "contextId": st.text(max_size=3)}
task = shaped({"id": st.text(max_size=3), "status": status, "artifacts": st.lists(artifact, max_size=2)})
status_update = shaped({**ids, "status": status})
artifact_update = shaped({**ids, "artifact": artifact, "append": st.booleans(), "lastChunk": st.booleans()})
random_result = st.one_of(
    task.map(lambda t: {"task": t}),
    message.map(lambda m: {"message": m}),
    status_update.map(lambda u: {"statusUpdate": u}),
    artifact_update.map(lambda u: {"artifactUpdate": u}),
    json_value,
)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.text(min_size=1, max_size=40))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def update(chunk: str, *, first: bool, last: bool) -> dict[str, Any]:
    return {
        "artifactUpdate": {
            "taskId": "t",
            "contextId": "c",
            "artifact": {"artifactId": "a", "parts": [{"text": chunk}]},
            "append": not first,
            "lastChunk": last,
        }
    }


@settings(max_examples=200, deadline=None)
@given(chunked())
def test_an_artifact_in_any_chunks_streams_back_whole_and_in_order(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    translator = A2ATranslator()
    events = []
    for i, chunk in enumerate(chunks):
        events += translator.feed(update(chunk, first=i == 0, last=i == len(chunks) - 1))
    events += translator.feed({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_COMPLETED"}}})
    assert [e.text for e in events if isinstance(e, TextDelta)] == chunks
    assert [e.text for e in events if isinstance(e, Text)] == [text]
    assert translator.done and translator.ending == Complete(outcome="completed", stop_reason="completed", text=text)
    assert translator.context_id == "c" and translator.task_id == "t"


@settings(max_examples=300, deadline=None)
@given(st.lists(random_result, max_size=6))
def test_random_results_raise_nothing_but_a_classified_failure(results: list[Any]) -> None:
    translator = A2ATranslator()
    for result in results:
        try:
            translator.feed(result)
        except SeamlineError:
            return


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60) | json_value.map(lambda v: json.dumps(v).encode()))
def test_any_body_is_a_result_or_a_classified_failure(body: bytes) -> None:
    try:
        result_of(body, "a2a: test")
    except SeamlineError:
        pass


@settings(max_examples=300, deadline=None)
@given(
    shaped(
        {
            "name": st.text(min_size=1, max_size=4),
            "capabilities": shaped({"streaming": st.booleans()}),
            "supportedInterfaces": st.lists(
                shaped({"url": st.sampled_from(URLS), "protocolBinding": st.sampled_from(["JSONRPC", "GRPC"])}),
                max_size=3,
            ),
            "url": st.sampled_from(URLS),
            "preferredTransport": st.sampled_from(["JSONRPC", "GRPC"]),
        }
    )
)
def test_any_card_is_read_or_refused_with_a_classified_failure(card: Any) -> None:
    try:
        info = read_card(card, base_url=URLS[0])
    except SeamlineError:
        return
    assert info.name and info.rpc_url.startswith(URLS[0])  # never another origin


def test_a_well_formed_response_gives_its_result() -> None:
    assert result_of(b'{"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}', "t") == {"x": 1}
    with pytest.raises(SeamlineError, match="-32001"):
        result_of(b'{"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "no"}}', "t")
