"""rlrun: reinforcement-learning runs that survive the real world.

The Python API mirrors the command line:

    from rlrun import load_spec, metrics, train
    result = train(load_spec("reinforce_cartpole", ["meta.max_frame=20k"]), home="runs")
    pandas.DataFrame(metrics(result.run_id, home="runs"))  # training metrics, every session

Heavy modules (torch, gymnasium) load only when training needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from rlrun.metrics_log import metrics
    from rlrun.search import plan_search, resume_search, run_search
    from rlrun.spec import Spec, load_spec
    from rlrun.training import TrainResult, resume, train

__all__ = ["Spec", "TrainResult", "__version__", "load_spec", "metrics", "plan_search", "resume", "resume_search",
           "run_search", "train"]

_LAZY = {"Spec": "rlrun.spec", "load_spec": "rlrun.spec", "train": "rlrun.training", "resume": "rlrun.training",
         "TrainResult": "rlrun.training", "metrics": "rlrun.metrics_log", "plan_search": "rlrun.search",
         "run_search": "rlrun.search", "resume_search": "rlrun.search"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlrun' has no attribute {name!r}")
