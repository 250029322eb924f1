"""``seamline eval``: datasets of tasks run on several backends, checked, and compared.

This room holds the dataset (:mod:`seamline.evals.dataset`) and the numbers
(:mod:`seamline.evals.stats`); the trials run over the race machinery in ``live/``.
"""

from __future__ import annotations

from seamline.evals.dataset import Dataset, DatasetError, DatasetProblem, Task, load_dataset
from seamline.evals.stats import cost_per_pass, mcnemar_exact, pass_at_k, pass_hat_k, wilson_interval

__all__ = [
    "Dataset",
    "DatasetError",
    "DatasetProblem",
    "Task",
    "cost_per_pass",
    "load_dataset",
    "mcnemar_exact",
    "pass_at_k",
    "pass_hat_k",
    "wilson_interval",
]
