"""A dataset a spec names but nobody recorded yet, made from its recipe (`data.recipe`): a short
run of a built-in spec in a scratch home, then its episodes recorded as the Minari dataset the spec
names, once, under a lock, before the run that learns from it is created. The recording is
`rlrun record`'s own (`rlrun.enjoy.dataset.record`), run as a command: replaying a checkpoint sits
beside training in the layers (tests/unit/test_layers.py), so training asks for it as a user would,
and pays for no trainer's import when no dataset is missing."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlrun import data
from rlrun.errors import BadInput
from rlrun.spec import Spec, load_spec
from rlrun.spec.sections import RecipeSpec

Train = Callable[..., Any]
"""`rlrun.training.api.train`, passed in: that module calls this one."""


def provision(spec: Spec, train: Train) -> None:
    """Record the dataset `spec.data` names from its recipe if it is not there (nothing otherwise),
    training the recipe's spec with `train`."""
    if spec.data is None or spec.data.recipe is None or data.exists(spec.data.dataset):
        return
    root = data.datasets_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".rlrun-recipe.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be making the same dataset right now
        if not data.exists(spec.data.dataset):
            _make(spec.data.dataset, spec.data.recipe, train)


def _make(dataset: str, recipe: RecipeSpec, train: Train) -> None:
    with tempfile.TemporaryDirectory(prefix="rlrun-recipe-") as scratch:
        home = Path(scratch) / "runs"
        source = load_spec(recipe.spec, [f"meta.max_frame={recipe.frames}"])
        train(source, home=home, name="recipe", handle_signals=False)
        command = ["record", "recipe", "--minari", dataset]
        command += [] if recipe.replay else ["--episodes", str(recipe.episodes)]
        command += ["--stochastic"] if recipe.stochastic and not recipe.replay else []
        command += ["--epsilon", repr(recipe.epsilon)] if recipe.epsilon is not None else []
        command += ["--noise", repr(recipe.noise)] if recipe.noise is not None else []
        command += ["--replay"] if recipe.replay else []
        environment = {**os.environ, "RLRUN_HOME": str(home)}
        environment.pop("RLRUN_DB", None)  # the scratch home's own registry
        done = subprocess.run(
            [sys.executable, "-m", "rlrun", *command], env=environment, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise BadInput(f"data.recipe: recording {dataset} failed ({said}); fix the recipe or record it yourself")
