"""Fixtures shared by the provider tests."""

from tests.providers.a2a_agent_support import a2a_real_allowed, a2a_server

__all__ = ["a2a_real_allowed", "a2a_server"]
