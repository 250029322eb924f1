"""The engine wired to live backends and the store: pipeline agents on real provider
sessions, and :func:`open_run`, the one-call way to start a pipeline run. Above the
engine's rooms, so the controller depends only on its ``Agents`` protocol."""

from seamline.live.agents import LiveAgents, provider_identity
from seamline.live.race import RaceAgents, Racer, open_race
from seamline.live.runs import open_run

__all__ = ["LiveAgents", "RaceAgents", "Racer", "open_race", "open_run", "provider_identity"]
