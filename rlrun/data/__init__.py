"""Datasets an agent learns from (`data` in a spec): where one is, what its files hash to, and its
transitions as NumPy arrays in a fixed row order.

A dataset is a Minari dataset, named by its id (found under `MINARI_DATASETS_PATH`, default
`~/.minari/datasets`) or by the path of its folder. It is read with Minari itself (the `minari`
extra), imported only when a spec names a dataset. Its rows are its episodes in index order, each
episode's steps in order: the same rows on every machine, so a batch drawn with the agent's
generator is the same batch on every resume.

A run pins its dataset: `pin` records the digest of every file of the dataset in the spec
(`data.sha256`) when the run is created, and refuses a resume or a fork whose files no longer hash
to it. Snapshots hold the spec, hence the dataset's id and digest, never the data.

A dataset made from a spec's recipe (`data.recipe`, `rlrun.training.datasets`) keeps that recipe
beside its `data/`, in `RECIPE` (`keep_recipe` writes it, `recipe_of` reads it): what it was made
by, not what it holds, so the digest leaves it out (the same data hashes the same with or without it).

Every problem is bad input said in one line naming the key, the problem and the fix: a dataset not
found, one whose spaces are not the env's, a file Minari cannot read, the `minari` extra missing.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlrun.errors import BadInput, install_hint
from rlrun.fsutil import atomic_write

if TYPE_CHECKING:
    from rlrun.spec import DataSpec, Spec

KEY = "data.dataset"
RECIPE = "rlrun-recipe.json"
"""The file in a dataset's folder, beside `data/`, holding the recipe that made it (`recipe_of`)."""


@dataclass(frozen=True)
class Transitions:
    """A dataset's steps as rows: `obs[i]`, `action[i]`, `reward[i]`, `terminated[i]`,
    `truncated[i]`, `next_obs[i]` (the env's own values, never normalised)."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray

    def __len__(self) -> int:
        return len(self.reward)


def datasets_root() -> Path:
    """Where Minari keeps datasets by id: `MINARI_DATASETS_PATH`, else `~/.minari/datasets`."""
    configured = os.environ.get("MINARI_DATASETS_PATH")
    return Path(configured).expanduser() if configured else Path.home() / ".minari" / "datasets"


def exists(dataset: str) -> bool:
    """Whether `dataset` names a dataset's folder (`locate` would find it)."""
    given = Path(dataset).expanduser()
    return any((folder / "data").is_dir() for folder in (given, datasets_root() / dataset))


def locate(dataset: str) -> Path:
    """The folder of the dataset `dataset` names (a folder holding `data/`, or an id under
    `datasets_root()`); BadInput when there is none."""
    given = Path(dataset).expanduser()
    for folder in (given, datasets_root() / dataset):
        if (folder / "data").is_dir():
            return folder
    raise BadInput(
        f"{KEY} = {dataset!r}: no such dataset (not a dataset folder, nor an id under {datasets_root()});"
        " record one with `rlrun record RUN --minari ID`, or set MINARI_DATASETS_PATH"
    )


def digest(folder: Path) -> str:
    """SHA-256 over every file of the dataset's folder but its recipe (`RECIPE`): each file's path
    (relative, in sorted order) and its content's SHA-256."""
    whole = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p != folder / RECIPE):
        whole.update(file.relative_to(folder).as_posix().encode() + b"\0")
        whole.update(_file_sha256(file).encode() + b"\n")
    return whole.hexdigest()


def keep_recipe(folder: Path, recipe: dict[str, Any]) -> None:
    """Store `recipe` (a JSON object) in the dataset folder `folder` as the one that made it, atomically."""
    atomic_write(folder / RECIPE, json.dumps(recipe, indent=2, sort_keys=True).encode() + b"\n")


def recipe_of(dataset: str) -> dict[str, Any] | None:
    """The recipe the dataset `dataset` names was made by, as its maker stored it (a JSON object);
    None for one recorded otherwise (`rlrun record --minari`, or by an rlrun before recipes were
    kept)."""
    file = locate(dataset) / RECIPE
    try:
        stored = json.loads(file.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise BadInput(
            f"{KEY} = {dataset!r}: its recipe file {file} cannot be read ({type(error).__name__}: {error});"
            " delete that file to learn from the dataset as it is"
        ) from None
    if not isinstance(stored, dict):
        raise BadInput(f"{KEY} = {dataset!r}: {file} holds no recipe; delete it to learn from the dataset as it is")
    return stored


def _file_sha256(file: Path) -> str:
    sha = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def pin(spec: Spec, previous: Spec | None = None) -> Spec:
    """The spec as a run records it: `data.sha256` filled in from the dataset's files. A spec (or
    the run it resumes or forks, `previous`) that already pins another digest for the same dataset
    is refused: its files changed since."""
    data = spec.data
    if data is None:
        return spec
    now = digest(locate(data.dataset))
    pinned = data.sha256
    if pinned is None and previous is not None and previous.data is not None:
        pinned = previous.data.sha256 if previous.data.dataset == data.dataset else None
    if pinned is not None and pinned != now:
        raise BadInput(
            f"{KEY} = {data.dataset!r}: its files changed since the run pinned them (sha256 {pinned[:12]}…,"
            f" now {now[:12]}…); put the recorded files back, or learn from it in a new run"
        )
    return spec.model_copy(update={"data": data.model_copy(update={"sha256": now})})


def check_spaces(data: DataSpec, obs_space: Any, action_space: Any) -> None:
    """The dataset opens and its spaces are the env's (before a run is recorded)."""
    stored = _open(data.dataset, locate(data.dataset))
    _check_space("observations", stored.observation_space, obs_space, data.dataset)
    _check_space("actions", stored.action_space, action_space, data.dataset)


def load(data: DataSpec, obs_space: Any, action_space: Any) -> Transitions:
    """The dataset's transitions, checked against the env's spaces and against the digest the run
    pinned (`data.sha256`)."""
    folder = locate(data.dataset)
    if data.sha256 is not None and digest(folder) != data.sha256:
        raise BadInput(
            f"{KEY} = {data.dataset!r}: its files changed since the run pinned them; put the recorded"
            " files back, or learn from it in a new run"
        )
    check_spaces(data, obs_space, action_space)
    return _rows(_open(data.dataset, folder), obs_space, action_space)


def _open(dataset: str, folder: Path) -> Any:
    try:
        import minari  # noqa: F401  # the package itself, not only the module below: the extra is whole or absent
        from minari.dataset.minari_dataset import MinariDataset
    except ImportError:
        raise BadInput(
            f"{KEY} = {dataset!r}: reading a dataset needs the minari extra; install it: {install_hint('minari')}"
        ) from None
    try:
        return MinariDataset(folder / "data")
    except Exception as error:  # Minari's own errors, h5py's, JSON's: the file is not a dataset it reads
        raise BadInput(
            f"{KEY} = {dataset!r}: Minari cannot read {folder} ({type(error).__name__}: {error});"
            " record the dataset again"
        ) from None


def _check_space(what: str, stored: Any, env: Any, dataset: str) -> None:
    if _described(stored) != _described(env):
        raise BadInput(
            f"{KEY} = {dataset!r}: its {what} are {_described(stored)}, the env's are {_described(env)};"
            " record the dataset from this env, or name the env it was recorded from in env.id"
        )


def _described(space: Any) -> str:
    """A space's kind and size, which the dataset's rows must share with the env's."""
    size = f"({int(space.n)})" if hasattr(space, "n") else str(tuple(getattr(space, "shape", ()) or ()))
    return f"{type(space).__name__}{size}"


def _rows(stored: Any, obs_space: Any, action_space: Any) -> Transitions:
    """Every episode's steps, episodes in index order."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in Transitions.__dataclass_fields__}
    for episode in stored.iterate_episodes(sorted(int(i) for i in stored.episode_indices)):
        observations = np.asarray(episode.observations, dtype=obs_space.dtype)
        parts["obs"].append(observations[:-1])
        parts["next_obs"].append(observations[1:])
        parts["action"].append(np.asarray(episode.actions, dtype=action_space.dtype))
        parts["reward"].append(np.asarray(episode.rewards, dtype=np.float64))
        parts["terminated"].append(np.asarray(episode.terminations, dtype=bool))
        parts["truncated"].append(np.asarray(episode.truncations, dtype=bool))
    return Transitions(**{name: np.concatenate(arrays) for name, arrays in parts.items()})
