"""A dataset a spec names but nobody recorded yet, made from its recipe (`data.recipe`): a short
run of a built-in spec in a scratch home, then its episodes recorded as the Minari dataset the spec
names, once, under a lock, before the run that learns from it is created. The recording is
`rlrun record`'s own (`rlrun.enjoy.dataset.record`), run as a command: replaying a checkpoint sits
beside training in the layers (tests/unit/test_layers.py), so training asks for it as a user would,
and pays for no trainer's import when no dataset is missing.

The dataset keeps the recipe that made it (`rlrun.data.RECIPE`, outside its digest): it is recorded
in a scratch folder beside the datasets, the recipe written into it, and only then renamed to its
id, so no run sees the dataset without its recipe. A spec whose recipe differs from the one a
dataset was made by is refused (it would learn from data its recipe does not describe); one
recorded otherwise (`rlrun record --minari`, an older rlrun) keeps no recipe and is used as it is.
A resume or a fork of a run that pinned the dataset is not asked: `rlrun.data.pin` checks its
files."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlrun import data, fsutil
from rlrun.errors import BadInput
from rlrun.spec import Spec, load_spec
from rlrun.spec.sections import RecipeSpec

Train = Callable[..., Any]
"""`rlrun.training.api.train`, passed in: that module calls this one."""


def provision(spec: Spec, train: Train, previous: Spec | None = None) -> None:
    """Record the dataset `spec.data` names from its recipe if it is not there, training the
    recipe's spec with `train`; BadInput when it is there but was made by another recipe (not asked
    when `previous`, the run resumed or forked, pinned that dataset already)."""
    if spec.data is None or spec.data.recipe is None:
        return
    dataset, recipe = spec.data.dataset, spec.data.recipe
    if not data.exists(dataset):
        root = data.datasets_root()
        root.mkdir(parents=True, exist_ok=True)
        with (root / ".rlrun-recipe.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be making the same dataset right now
            if not data.exists(dataset):
                _make(dataset, recipe, train)
                return
    if previous is None or previous.data is None or previous.data.dataset != dataset:
        _check_recipe(dataset, recipe)


def _check_recipe(dataset: str, recipe: RecipeSpec) -> None:
    """BadInput when `dataset` keeps a recipe other than `recipe` (nothing when it keeps none)."""
    stored = data.recipe_of(dataset)
    if stored is None:
        return
    with contextlib.suppress(ValueError):  # as this rlrun reads it, defaults filled in (a newer one's: as it is)
        stored = RecipeSpec.model_validate(stored).model_dump(mode="json")
    given = _stored(recipe)
    differ = [key for key in sorted(stored.keys() | given.keys()) if stored.get(key) != given.get(key)]
    if differ:
        said = "; ".join(f"{key} {json.dumps(stored.get(key))}, not {json.dumps(given.get(key))}" for key in differ)
        raise BadInput(
            f"data.recipe: dataset {dataset} was made by another recipe ({said}); give this recipe a dataset"
            " id of its own (data.dataset), or drop data.recipe to learn from the dataset as it is"
        )


def _stored(recipe: RecipeSpec) -> dict[str, Any]:
    """The recipe as a dataset keeps it: every field, defaults too, as JSON."""
    return recipe.model_dump(mode="json")


def _make(dataset: str, recipe: RecipeSpec, train: Train) -> None:
    root = data.datasets_root()
    target = root / dataset
    if target.exists():
        raise BadInput(
            f"data.recipe: {target} is there but holds no dataset (no data/); remove it to make {dataset}"
            " from the recipe, or record it yourself"
        )
    with (
        tempfile.TemporaryDirectory(prefix="rlrun-recipe-") as scratch,
        tempfile.TemporaryDirectory(prefix=".rlrun-recipe-", dir=root) as making,  # beside it: one rename away
    ):
        home = Path(scratch) / "runs"
        source = load_spec(recipe.spec, [f"meta.max_frame={recipe.frames}"])
        train(source, home=home, name="recipe", handle_signals=False)
        command = ["record", "recipe", "--minari", dataset]
        command += [] if recipe.replay else ["--episodes", str(recipe.episodes)]
        command += ["--stochastic"] if recipe.stochastic and not recipe.replay else []
        command += ["--epsilon", repr(recipe.epsilon)] if recipe.epsilon is not None else []
        command += ["--noise", repr(recipe.noise)] if recipe.noise is not None else []
        command += ["--replay"] if recipe.replay else []
        environment = {**os.environ, "RLRUN_HOME": str(home), "MINARI_DATASETS_PATH": making}
        environment.pop("RLRUN_DB", None)  # the scratch home's own registry
        done = subprocess.run(
            [sys.executable, "-m", "rlrun", *command], env=environment, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise BadInput(f"data.recipe: recording {dataset} failed ({said}); fix the recipe or record it yourself")
        made = Path(making) / dataset
        data.keep_recipe(made, _stored(recipe))
        _move_in(Path(making), root, dataset)


def _move_in(making: Path, root: Path, dataset: str) -> None:
    """Rename the dataset recorded under `making` to its id under `root`, at once: the outermost of
    its folders (its namespaces', then its own) that `root` does not have yet, so a new namespace
    comes with the metadata Minari wrote for it."""
    first = root / dataset
    for parent in list(first.parents)[: dataset.count("/")]:
        if parent.exists():
            break
        first = parent
    os.rename(making / first.relative_to(root), first)
    fsutil.fsync_path(first.parent)
