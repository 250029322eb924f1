"""Traces: chained records of a run, verification, replay and re-drive."""
