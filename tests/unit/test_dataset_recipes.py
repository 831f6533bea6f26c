"""A dataset keeps the recipe that made it (`rlrun.data.keep_recipe`, `rlrun.training.datasets`):
its digest leaves the recipe out, a spec whose recipe differs is refused in one line, the same
recipe (however it is written) and a dataset that keeps none are used as they are, and a resume or
a fork of a run that pinned the dataset is not asked. A dataset's folder here is a real one that
holds files but no Minari data: nothing here opens it, and nothing trains (a spec refused or
passed never reaches the recipe's training). tests/test_offline.py makes a dataset from its recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlrun import data
from rlrun.errors import BadInput
from rlrun.spec import Spec, load_spec
from rlrun.training.api import train
from rlrun.training.datasets import provision

DATASET = "rlrun/cartpole-kept-v0"
RECIPE = ["data.recipe.frames=2000", "data.recipe.episodes=5", "data.recipe.epsilon=0.2"]


def _spec(*edits: str) -> Spec:
    return load_spec("bc_cartpole", [f"data.dataset={DATASET}", *RECIPE, *edits])


def test_a_dataset_keeps_its_recipe_outside_its_digest_and_refuses_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    folder = tmp_path / "datasets" / DATASET
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "main_data.hdf5").write_bytes(b"the rows")
    (folder / "data" / "metadata.json").write_text("{}")
    bare = data.digest(folder)
    spec = _spec()

    # A dataset recorded by hand (or by an older rlrun) keeps no recipe: any recipe uses it as it is.
    assert data.recipe_of(DATASET) is None
    provision(_spec("data.recipe.episodes=6"), train)
    assert sorted(p.name for p in folder.rglob("*")) == ["data", "main_data.hdf5", "metadata.json"], "nothing made"

    # Kept: the digest is the data's alone, with the recipe or without it.
    data.keep_recipe(folder, spec.data.recipe.model_dump(mode="json"))
    assert json.loads((folder / data.RECIPE).read_text())["episodes"] == 5
    assert data.digest(folder) == bare
    assert not list(folder.glob(f".{data.RECIPE}.tmp-*")), "written atomically, nothing left beside it"

    # The same recipe, written as a spec writes it (a size, defaults left out), uses the dataset.
    data.keep_recipe(folder, {"spec": "reinforce_cartpole", "frames": "2k", "episodes": 5, "epsilon": 0.2})
    provision(spec, train)
    assert data.digest(folder) == bare, "not made again"

    # Another recipe is refused: one line naming data.recipe, what differs and the fix.
    with pytest.raises(BadInput) as refused:
        provision(_spec("data.recipe.episodes=6", "data.recipe.stochastic=false"), train)
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith(f"data.recipe: dataset {DATASET} was made by another recipe"), said
    assert "episodes 5, not 6; stochastic true, not false" in said, said
    assert "a dataset id of its own" in said and "drop data.recipe" in said, said
    assert refused.value.exit_code == 2

    # A resume or a fork of a run that pinned the dataset: its files are checked (`data.pin`), not its recipe.
    provision(_spec("data.recipe.episodes=6"), train, previous=data.pin(spec))

    # The same dataset named by its folder's path keeps the same recipe.
    with pytest.raises(BadInput, match="made by another recipe"):
        provision(load_spec("bc_cartpole", [f"data.dataset={folder}", *RECIPE, "data.recipe.frames=3k"]), train)

    # A recipe file that is not one is said, with the fix; deleting it uses the dataset as it is.
    (folder / data.RECIPE).write_text("[1, 2")
    with pytest.raises(BadInput, match="delete that file to learn from the dataset as it is"):
        provision(spec, train)
    (folder / data.RECIPE).unlink()
    provision(_spec("data.recipe.episodes=6"), train)
    assert data.digest(folder) == bare
