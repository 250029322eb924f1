"""Retry policy, failure classification and stream truncation for the model-API providers."""

from __future__ import annotations

import email.utils
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seamline.errors import ProviderFailure, QuotaExceeded, TransportFailure
from seamline.providers.model_apis.retry import RetryPolicy, classify_failure, retry_after_seconds, scrub
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.model_api_support import model_api_env, of_type, run_turn

__all__ = ["model_api_env"]


def test_backoff_doubles_is_capped_and_jittered() -> None:
    policy = RetryPolicy(max_retries=5, base_delay=1.0, max_delay=4.0)
    failure = ProviderFailure("x", retryable=True)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 4.0)]:
        waits = [policy.delay(attempt, failure) for _ in range(50)]
        assert all(w is not None and ceiling * 0.5 <= w <= ceiling for w in waits)
        assert len(set(waits)) > 1  # jittered
    assert policy.delay(6, failure) is None  # bounded
    assert policy.delay(1, ProviderFailure("x", retryable=False)) is None


def test_retry_after_wins_and_is_bounded() -> None:
    policy = RetryPolicy(max_retries=3, base_delay=0.1, max_retry_after=10)
    assert policy.delay(1, QuotaExceeded("x", retry_after=7)) == 7
    assert policy.delay(1, QuotaExceeded("x", retry_after=11)) is None


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds({"retry-after": "3"}) == 3
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    parsed = retry_after_seconds({"retry-after": date})
    assert parsed is not None and 25 <= parsed <= 31
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_scrub_masks_the_key_and_key_shapes() -> None:
    key = "sk-proj-abcdefghijklmnop"
    assert key not in scrub(f"bad key {key}!", key)
    assert "sk-ant-***" in scrub("echo sk-ant-api03-XYZxyz0123456789", None)
    assert scrub("ask-me anything", "short") == "ask-me anything"


def test_classification_of_plain_exceptions() -> None:
    assert isinstance(classify_failure(ConnectionResetError("reset"), vendor="v", secret=None), TransportFailure)
    assert classify_failure(TimeoutError(), vendor="v", secret=None).kind == "timeout"
    odd = classify_failure(ValueError("weird sk-test-1234567890"), vendor="v", secret=None)
    assert odd.kind == "provider" and "1234567890" not in odd.message


# -- truncated streams: any cut point gives a classified end, never a crash ------------------
_ENTRY = {
    "text": "one two three four",
    "reasoning": "hmm",
    "tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}],
    "usage": {"input_tokens": 10, "output_tokens": 4},
}


@pytest.mark.usefixtures("model_api_env")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    route=st.sampled_from(["chat", "responses", "anthropic"]),
    cut=st.integers(min_value=0, max_value=40),
    how=st.sampled_from(["abrupt", "clean"]),
)
def test_any_truncation_ends_in_one_complete_with_a_classified_error(route: str, cut: int, how: str) -> None:
    fake = FakeAnthropic if route == "anthropic" else FakeOpenAI
    model = "claude-sonnet-4-6" if route == "anthropic" else "gpt-4o"
    options = {"max_retries": "1"}
    if route != "anthropic":
        options["route"] = route
    script = [{**_ENTRY, "cut_after": cut, "cut": how, "times": 2}, {"text": "fine"}]
    with fake(script) as server:
        result = run_turn("anthropic" if route == "anthropic" else "openai", server, model=model, options=options)
    completes = of_type(result.events, "complete")
    assert len(completes) == 1 and result.events[-1] is completes[0]
    streamed = "".join(e.text for e in of_type(result.events, "text_delta"))
    assert "one two three four".startswith(streamed) or streamed.startswith("one two three four")
    final_errors = [e for e in of_type(result.events, "error") if e.attempt is None]
    if result.outcome == "failed":
        assert [e.kind for e in final_errors] == ["transport"]
    else:
        assert result.outcome == "completed" and not final_errors
