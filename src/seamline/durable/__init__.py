"""Scale-out on Temporal: a pipeline run as a workflow, each role turn as an activity.

The room is in two halves. ``ledger`` and ``steps`` know nothing of Temporal: the ledger
keeps a run's spec, its finished role turns and its live events in the session store,
and the steps are the two pieces of work a worker does (advance the controller over the
turns finished so far; run one role turn). ``workflow``, ``worker`` and ``client`` wrap
them for Temporal and import ``temporalio`` (the ``temporal`` extra). The core never
imports this room.
"""

from seamline.durable.ledger import RunLedger, turn_key
from seamline.durable.steps import RunSpec, advance, run_turn

__all__ = ["RunLedger", "RunSpec", "advance", "run_turn", "turn_key"]
