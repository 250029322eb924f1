"""Providers that call no model: ``offline`` (embedded, answers from the workspace) and
``scripted`` (a fake for tests that replays a script)."""
