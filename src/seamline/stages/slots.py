"""Named slots for stages.

A stage's slot is a plain integer: stages run by slot value, whatever order they were
added in. A request passes them from the lowest value to the highest and then reaches
the model (or the tool); what comes back passes them in reverse. The named slots leave
room between them so a stage can sit just before or after another one.

>>> StageSlot.CONTEXT < StageSlot.MASKING < StageSlot.CUSTOM
True
>>> StageSlot.MASKING + 10  # just after masking, before any custom stage
210
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["StageSlot"]


class StageSlot(IntEnum):
    """The named slots, lowest (furthest from the model) first."""

    CONTEXT = 100
    """Adds context to requests (history, retrieved documents) before anything else sees them."""
    MASKING = 200
    """Replaces secrets with placeholders; sees the request after the context stages."""
    CUSTOM = 300
    """Everything else: logging, timing, policy. Closest to the model or the tool."""
