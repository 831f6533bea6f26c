"""Trajectory datasets: `rlrun record REF --episodes N --minari NAME` writes the agent's episodes as a
Minari dataset (the offline-RL standard that TorchRL, d3rlpy and AgileRL load).

The agent acts exactly as `rlrun enjoy` plays it (`rlrun.enjoy`: the checkpoint chosen the same way,
verified against the registry's sha256, the same env, the same frozen normalisation, the same episode
seeds for a given `--seed`), and Minari's own `DataCollector` wraps the env and records every step:
the env's own observations, actions, rewards, terminations and truncations (what a dataset holds,
not the normalised observations the agent saw). The same checkpoint, seed and `--stochastic` give
the same dataset, step for step.

The dataset's metadata names where it came from, under the key `rlrun`: the run (id, name, spec
name), the session, the checkpoint (frame, kind, sha256 of its manifest), the spec revision it was
trained with, the seed and every episode's seed, greedy or sampled, and this rlrun's version. Nothing
is written to the run or the registry. Minari writes under `MINARI_DATASETS_PATH` (default
`~/.minari/datasets`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym

from rlrun import __version__, seeding
from rlrun.errors import BadInput, install_hint
from rlrun.refs import RunFilter, RunRef

METADATA_KEY = "rlrun"
"""The key of the dataset's metadata that says which run, checkpoint, spec and seeds it came from."""


@dataclass(frozen=True)
class Recorded:
    """A dataset `record` wrote: its id, where Minari keeps it, and what it holds."""

    dataset_id: str
    path: str
    episodes: int
    steps: int
    returns: list[float]
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset_id": self.dataset_id,
            "path": self.path,
            "episodes": self.episodes,
            "steps": self.steps,
            "returns": self.returns,
            METADATA_KEY: self.metadata,
        }


def record(
    reference: RunRef | str = "latest",
    filters: RunFilter | None = None,
    *,
    dataset_id: str,
    episodes: int,
    home: Path | str | None = None,
    seed: int | None = None,
    stochastic: bool = False,
    checkpoint: str | int | None = None,
) -> Recorded:
    """Play `episodes` episodes with the checkpoint `reference` names (as `rlrun enjoy` chooses and
    plays it; `checkpoint`: best, latest or a frame count) and write them as the Minari dataset
    `dataset_id`. BadInput, nothing written, when the extra is missing, the id is malformed or
    taken, or the reference names no checkpoint.

    Args:
        reference: The run, as `rlrun enjoy` takes it.
        filters: Which runs the reference counts among (`RunFilter.of(status="finished")`); None: every run.
        dataset_id: The Minari dataset id to write, `(namespace/)name-v(version)` (`cartpole/dqn-expert-v0`),
            not taken yet.
        episodes: How many episodes to play and write.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        seed: The first episode's seed; None: the session's seed, as enjoy plays it.
        stochastic: Sample the actions rather than take the greedy one.
        checkpoint: "best", "latest" or a frame count; None: the reference's own, else the best.

    Returns:
        The dataset's id, where Minari keeps it, and what it holds.
    """
    from rlrun.enjoy import MAX_EPISODES, locate, with_checkpoint

    minari = _minari()
    if not 1 <= episodes <= MAX_EPISODES:
        raise BadInput(f"--episodes {episodes}: record from 1 to {MAX_EPISODES:,} episodes at a time")
    _check_dataset_id(dataset_id)
    located = locate(with_checkpoint(reference, checkpoint, "--checkpoint"), filters, home=home)
    target = located.target
    chosen = target.session.seed if seed is None else seed
    metadata = {
        "run_id": target.run.id,
        "run_name": target.run.name,
        "spec_name": target.run.spec_name,
        "session": target.session.index,
        "checkpoint": {
            "frame": target.checkpoint.frame,
            "kind": target.checkpoint.kind,
            "sha256": target.checkpoint.sha256,
        },
        "spec": json.loads(target.spec_json),
        "seed": chosen,
        "episode_seeds": seeding.enjoy_episode_seeds(chosen, episodes),
        "stochastic": stochastic,
        "rlrun_version": __version__,
    }
    returns, steps, path = _collect(minari, located.root, target, dataset_id, metadata)
    return Recorded(dataset_id, path, episodes, steps, returns, metadata)


def _minari() -> Any:
    try:
        import minari
    except ImportError:
        raise BadInput(f"--minari needs the minari extra; install it: {install_hint('minari')}") from None
    return minari


def _check_dataset_id(dataset_id: str) -> None:
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.storage import get_dataset_path

    try:
        parse_dataset_id(dataset_id)
    except (ValueError, TypeError):  # TypeError: Minari 0.5 on an id without its -v(version)
        raise BadInput(
            f"--minari {dataset_id!r} is not a Minari dataset id; give (namespace/)name-v(version), e.g."
            " cartpole/dqn-expert-v0"
        ) from None
    where = Path(get_dataset_path(dataset_id))
    if where.exists():
        raise BadInput(
            f"--minari {dataset_id}: a dataset with this id already exists ({where}); choose another"
            " name or version (-v1), or delete it (`minari delete`)"
        )


def _collect(
    minari: Any, root: Path, target: Any, dataset_id: str, metadata: dict[str, Any]
) -> tuple[list[float], int, str]:
    """Play the episodes through `_Recorder` and write them with Minari's `create_dataset_from_buffers`
    (its `DataCollector` would need jax, which the extra does not bring); the returns, steps and
    dataset's folder. A dataset cut short by an error is removed: nothing is left half-written."""
    import shutil

    from minari.storage import get_dataset_path

    from rlrun.enjoy import load_acting, torch_threads_for
    from rlrun.session.evaluation import play

    acting = load_acting(root, target)
    recorder = _Recorder(acting.env)
    folder = Path(get_dataset_path(dataset_id))
    created = _first_new_folder(folder, dataset_id)  # the dataset's, or a namespace's Minari makes
    try:
        with torch_threads_for(acting.spec):  # as enjoy acts
            played = play(
                acting.agent.actor,
                recorder,
                metadata["episode_seeds"],
                deterministic=not metadata["stochastic"],
                normalizer=acting.normalizer,
            )
        buffers = recorder.buffers()
        try:
            with warnings.catch_warnings():  # its advice to name an author, an e-mail, a code permalink
                warnings.simplefilter("ignore", UserWarning)
                spec = _json_spec(acting.env.spec)
                dataset = minari.create_dataset_from_buffers(
                    dataset_id,
                    buffers,
                    env=_Described(acting.env, spec) if spec is not None else None,
                    observation_space=acting.env.observation_space,
                    action_space=acting.env.action_space,
                    algorithm_name=f"rlrun {acting.spec.agent.algorithm}",
                    description=f"{len(buffers)} episodes of rlrun run {target.run.id} ({target.run.spec_name}),"
                    f" checkpoint at frame {target.checkpoint.frame:,} (sha256"
                    f" {target.checkpoint.sha256}), {'sampled' if metadata['stochastic'] else 'greedy'}"
                    f" actions, seed {metadata['seed']}",
                    data_format="hdf5",
                    jpeg_encoding=False,
                )  # the observations exactly as the env gave them
            dataset.storage.update_metadata({METADATA_KEY: metadata})
        except BaseException:
            shutil.rmtree(created, ignore_errors=True)
            raise
    finally:
        acting.env.close()
    return played.returns, int(sum(played.lengths)), str(folder)


def _first_new_folder(folder: Path, dataset_id: str) -> Path:
    """The outermost folder of `folder`'s namespaces (and itself) that does not exist yet: what a
    failed write must remove so that nothing is left (Minari writes a new namespace's
    namespace_metadata.json before the dataset)."""
    depth = dataset_id.count("/")  # the namespaces' folders above the dataset's
    created = folder
    for parent in list(folder.parents)[:depth]:
        if parent.exists():
            break
        created = parent
    return created


def _json_spec(spec: Any) -> Any:
    """The env's spec as Minari can store it: a class or function `entry_point` (as
    `gym.register("Reach-v0", entry_point=Reach)` gives) named by its `module:name`, which Gymnasium
    imports back; None when the spec still cannot be written (kwargs that are not JSON, no spec at
    all): the dataset then holds the spaces, not the spec."""
    if spec is None:
        return None
    entry = spec.entry_point
    if callable(entry):
        entry = f"{entry.__module__}:{entry.__qualname__}"
    described = dataclasses.replace(spec, entry_point=entry)
    try:
        described.to_json()
    except (ValueError, TypeError):
        return None
    return described


class _Described(gym.Wrapper[Any, Any, Any, Any]):
    """The env, as Minari reads it, with the spec it can store."""

    def __init__(self, env: gym.Env[Any, Any], spec: Any) -> None:
        super().__init__(env)
        self._described = spec

    @property
    def spec(self) -> Any:  # type: ignore[override]  # read-only here: what Minari stores
        return self._described


class _Recorder(gym.Wrapper[Any, Any, Any, Any]):
    """The env, recording every episode as it is played: its seed, observations (the first and one
    per step), actions, rewards, terminations and truncations."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.episodes: list[dict[str, Any]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.episodes.append(
            {
                "seed": seed,
                "observations": [copy.deepcopy(observation)],
                "actions": [],
                "rewards": [],
                "terminations": [],
                "truncations": [],
            }
        )
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        episode = self.episodes[-1]
        episode["observations"].append(copy.deepcopy(observation))
        episode["actions"].append(copy.deepcopy(action))
        episode["rewards"].append(float(reward))
        episode["terminations"].append(bool(terminated))
        episode["truncations"].append(bool(truncated))
        return observation, reward, terminated, truncated, info

    def buffers(self) -> list[Any]:
        """Minari's episode buffers, a Dict or Tuple space's items as dicts or tuples of lists."""
        from minari.data_collector.episode_buffer import EpisodeBuffer

        return [
            EpisodeBuffer(
                id=index,
                seed=episode["seed"],
                observations=_columns(episode["observations"], self.observation_space),
                actions=_columns(episode["actions"], self.action_space),
                rewards=episode["rewards"],
                terminations=episode["terminations"],
                truncations=episode["truncations"],
            )
            for index, episode in enumerate(self.episodes)
        ]


def _columns(items: list[Any], space: gym.Space[Any]) -> Any:
    """A list of a Dict or Tuple space's values as a dict or tuple of lists (what Minari stores);
    any other space's values as they are."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _columns([item[key] for item in items], sub) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_columns([item[i] for item in items], sub) for i, sub in enumerate(space.spaces))
    return items
