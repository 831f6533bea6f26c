"""rlrun: reinforcement-learning runs that survive the real world.

The Python API mirrors the command line:

    from rlrun import load_spec, metrics, train
    result = train(load_spec("reinforce_cartpole", ["meta.max_frame=20k"]), home="runs")
    pandas.DataFrame(metrics(result.run_id, home="runs"))  # training metrics, every session
    list_runs(RunFilter.of(algorithm="ppo"), home="runs").runs  # what `rlrun ls --algo ppo` lists

Heavy modules (torch, gymnasium) load only when training needs them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from rlrun.catalog import export_metrics, list_runs, list_searches, lookup, lookup_search, plot_data
    from rlrun.enjoy.dataset import record
    from rlrun.enjoy.policy import load_policy
    from rlrun.home.bundle import pull, push
    from rlrun.home.maintenance import plan_removal, remove
    from rlrun.refs import RunFilter
    from rlrun.search import plan_search, resume_search, run_search
    from rlrun.session.metrics_log import metrics
    from rlrun.spec import Spec, load_spec
    from rlrun.training import TrainResult, resume, train

__all__ = [
    "RunFilter",
    "Spec",
    "TrainResult",
    "__version__",
    "export_metrics",
    "list_runs",
    "list_searches",
    "load_policy",
    "load_spec",
    "lookup",
    "lookup_search",
    "metrics",
    "plan_removal",
    "plan_search",
    "plot_data",
    "pull",
    "push",
    "record",
    "remove",
    "resume",
    "resume_search",
    "run_search",
    "train",
]

_LAZY = {
    "Spec": "rlrun.spec",
    "load_spec": "rlrun.spec",
    "train": "rlrun.training",
    "resume": "rlrun.training",
    "TrainResult": "rlrun.training",
    "metrics": "rlrun.session.metrics_log",
    "plan_search": "rlrun.search",
    "run_search": "rlrun.search",
    "resume_search": "rlrun.search",
    "RunFilter": "rlrun.refs",
    **dict.fromkeys(
        ("list_runs", "list_searches", "lookup", "lookup_search", "export_metrics", "plot_data"), "rlrun.catalog"
    ),
    "plan_removal": "rlrun.home.maintenance",
    "remove": "rlrun.home.maintenance",
    "load_policy": "rlrun.enjoy.policy",
    "record": "rlrun.enjoy.dataset",
    "push": "rlrun.home.bundle",
    "pull": "rlrun.home.bundle",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlrun' has no attribute {name!r}")


# Modules that moved when the package was regrouped into rooms (0.1 layout -> rooms), by their old
# names: users' scripts that import an old path get the module at its new one (the same object).
MOVED = {
    "rlrun.algorithms.configs": "rlrun.spec.agents",
    "rlrun.atari": "rlrun.envs.atari",
    "rlrun.consistency": "rlrun.spec.consistency",
    "rlrun.device": "rlrun.session.device",
    "rlrun.display": "rlrun.cli.display",
    "rlrun.envstate": "rlrun.envs.state",
    "rlrun.evaluation": "rlrun.session.evaluation",
    "rlrun.events": "rlrun.session.events",
    "rlrun.folder_runs": "rlrun.home.folders",
    "rlrun.maintenance": "rlrun.home.maintenance",
    "rlrun.memory": "rlrun.algorithms.replay",
    "rlrun.metrics_log": "rlrun.session.metrics_log",
    "rlrun.plot": "rlrun.cli.plot",
    "rlrun.retention": "rlrun.snapshot.retention",
    "rlrun.schedules": "rlrun.spec.schedules",
    "rlrun.search_space": "rlrun.search.space",
    "rlrun.stack": "rlrun.session.stack",  # issue 56's first home, before it took a room beside the device
    "rlrun.stopping": "rlrun.session.stopping",
    "rlrun.tensorboard_log": "rlrun.session.tensorboard_log",
    "rlrun.video": "rlrun.enjoy.video",
    "rlrun.views": "rlrun.cli.views",
}


def _new_name(old: str) -> str | None:
    for before, after in MOVED.items():
        if old == before or old.startswith(before + "."):
            return after + old[len(before) :]
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old module name with the module at its new name (imported then, not before)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        # First in sys.meta_path, so asked about every import of the process (torch's thousands):
        # anything outside rlrun is declined before the table is looked at.
        if not fullname.startswith("rlrun.") or _new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        module = importlib.import_module(_new_name(spec.name) or spec.name)
        spec.loader_state = module.__spec__  # the import system sets the alias's spec on the module next
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when it was imported under its new name: give it back its own spec."""
        alias = module.__spec__
        if alias is not None and alias.loader_state is not None:
            module.__spec__ = alias.loader_state


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())  # before the path finder: an old name never loads a second copy
