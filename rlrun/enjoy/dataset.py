"""Trajectory datasets: `rlrun record REF --episodes N --minari NAME` writes the agent's episodes as a
Minari dataset (the offline-RL standard that TorchRL, d3rlpy and AgileRL load).

The agent acts exactly as `rlrun enjoy` plays it (`rlrun.enjoy`: the checkpoint chosen the same way,
verified against the registry's sha256, the same env, the same frozen normalisation, the same episode
seeds for a given `--seed`), and Minari's own `DataCollector` wraps the env and records every step:
the env's own observations, actions, rewards, terminations and truncations (what a dataset holds,
not the normalised observations the agent saw). The same checkpoint, seed and flags give the same
dataset, step for step.

D4RL's recipe for datasets of lesser quality, by the same rules:

- a "medium" policy's data: `--epsilon E` (a discrete action space) takes a uniformly random action
  with probability E instead of the greedy one, as evaluation's `meta.eval_epsilon` does, from the
  generators below each episode's seed; `--noise SIGMA` (a continuous one) adds Gaussian noise of
  standard deviation SIGMA to the greedy action and clips it to the space's bounds, the noise drawn
  from a generator below each episode's seed too (`_Noisy`). The dataset holds the action taken.
- "medium-replay": `--replay` writes the run's own training transitions, the replay memory the
  checkpoint's snapshot holds (oldest row still kept first, each env copy's rows cut into episodes
  where one ended, `_replayed`): what the agent saw while it learnt, nothing played again.

The dataset's metadata names where it came from, under the key `rlrun`: the run (id, name, spec
name), the session, the checkpoint (frame, kind, sha256 of its manifest), the spec revision it was
trained with, the seed and every episode's seed, greedy or sampled, `epsilon`, `noise` and `replay`
(with it, `replay_rows`: the numbers of the memory's rows written, first and end), and this
rlrun's version. Nothing is written to the run or the registry. Minari writes under
`MINARI_DATASETS_PATH` (default `~/.minari/datasets`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from rlrun import __version__, seeding
from rlrun.errors import BadInput, install_hint
from rlrun.refs import RunFilter, RunRef

METADATA_KEY = "rlrun"
"""The key of the dataset's metadata that says which run, checkpoint, spec and seeds it came from."""

DEFAULT_EPISODES = 10
"""Episodes recorded when `episodes` is not given (and a replay is not asked for)."""

NOISE_STREAM = 2
"""`--noise`'s generator: below each episode's seed, in the exploration stream beside the ε-random
actions' (`seeding.EVAL_EXPLORATION`, whose paths 0 and 1 `play` uses)."""


@dataclass(frozen=True)
class Behaviour:
    """How the recorded actions depart from the checkpoint's own (all off: its greedy or sampled
    actions): D4RL's recipe for a "medium" policy's data, or the run's training replayed."""

    epsilon: float | None = None
    """A random action with this probability (a discrete action space)."""
    noise: float | None = None
    """Gaussian noise of this standard deviation on each action, clipped (a continuous one)."""
    replay: bool = False
    """The replay memory's training transitions instead of played episodes."""


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
    episodes: int | None = None,
    home: Path | str | None = None,
    seed: int | None = None,
    stochastic: bool = False,
    checkpoint: str | int | None = None,
    behaviour: Behaviour = Behaviour(),
) -> Recorded:
    """Play `episodes` episodes with the checkpoint `reference` names (as `rlrun enjoy` chooses and
    plays it; `checkpoint`: best, latest or a frame count) and write them as the Minari dataset
    `dataset_id` (`behaviour`: with ε-random or noisy actions, or the run's replay memory instead).
    BadInput, nothing written, when the extra is missing, the id is malformed or taken, the
    reference names no checkpoint, or the behaviour does not fit the run (`_check_behaviour`).

    Args:
        reference: The run, as `rlrun enjoy` takes it.
        filters: Which runs the reference counts among (`RunFilter.of(status="finished")`); None: every run.
        dataset_id: The Minari dataset id to write, `(namespace/)name-v(version)` (`cartpole/dqn-expert-v0`),
            not taken yet.
        episodes: How many episodes to play and write (None: 10); not with a replay.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        seed: The first episode's seed; None: the session's seed, as enjoy plays it.
        stochastic: Sample the actions rather than take the greedy one.
        checkpoint: "best", "latest" or a frame count; None: the reference's own, else the best.
        behaviour: ε-random actions, noisy actions, or the replay memory's transitions.

    Returns:
        The dataset's id, where Minari keeps it, and what it holds.
    """
    from rlrun.enjoy import MAX_EPISODES, locate, with_checkpoint

    minari = _minari()
    _check_options(behaviour, episodes, seed, stochastic)
    episodes = DEFAULT_EPISODES if episodes is None else episodes
    if not 1 <= episodes <= MAX_EPISODES:
        raise BadInput(f"--episodes {episodes}: record from 1 to {MAX_EPISODES:,} episodes at a time")
    _check_dataset_id(dataset_id)
    located = locate(with_checkpoint(reference, checkpoint, "--checkpoint"), filters, home=home)
    target = located.target
    chosen = target.session.seed if seed is None else seed
    played = not behaviour.replay
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
        "seed": chosen if played else None,
        "episode_seeds": seeding.enjoy_episode_seeds(chosen, episodes) if played else [],
        "stochastic": stochastic,
        "epsilon": behaviour.epsilon,
        "noise": behaviour.noise,
        "replay": behaviour.replay,
        "replay_rows": None,
        "rlrun_version": __version__,
    }
    returns, steps, path = _collect(minari, located.root, target, dataset_id, metadata)
    return Recorded(dataset_id, path, len(returns), steps, returns, metadata)


def _check_options(behaviour: Behaviour, episodes: int | None, seed: int | None, stochastic: bool) -> None:
    """BadInput for a behaviour that no run could have: ε outside [0, 1], a negative or infinite
    σ, a replay with options that play episodes."""
    epsilon, noise = behaviour.epsilon, behaviour.noise
    if epsilon is not None and not 0.0 <= epsilon <= 1.0:
        raise BadInput(f"--epsilon {epsilon}: the probability of a random action; give it from 0 to 1")
    if noise is not None and not (math.isfinite(noise) and noise >= 0.0):
        raise BadInput(f"--noise {noise}: the standard deviation of the action noise; give a number ≥ 0")
    if not behaviour.replay:
        return
    playing = {
        "--epsilon": epsilon is not None,
        "--noise": noise is not None,
        "--episodes": episodes is not None,
        "--seed": seed is not None,
        "--stochastic": stochastic,
    }
    clashing = [option for option, given in playing.items() if given]
    if clashing:
        raise BadInput(
            f"--replay writes the run's own training transitions, nothing is played: drop {', '.join(clashing)}"
            " (or drop --replay to play episodes)"
        )


def _check_behaviour(behaviour: Behaviour, acting: Any, target: Any) -> None:
    """BadInput for a behaviour this run cannot have: ε on a continuous action space, noise on a
    discrete one, a replay of a run whose checkpoint holds no replay memory."""
    space = acting.env.action_space
    if behaviour.epsilon is not None and not isinstance(space, gym.spaces.Discrete):
        raise BadInput(
            f"--epsilon takes random actions from a discrete action space; run {target.run.id}'s is {space}:"
            " use --noise SIGMA"
        )
    if behaviour.noise is not None and not isinstance(space, gym.spaces.Box):
        raise BadInput(
            f"--noise adds Gaussian noise to continuous actions; run {target.run.id}'s action space is {space}:"
            " use --epsilon E"
        )
    memory = getattr(acting.agent, "memory", None)
    if behaviour.replay and (memory is None or memory.rows_end == 0):
        why = (
            f"its agent ({acting.spec.agent.algorithm}) keeps no replay memory"
            if memory is None
            else f"its checkpoint at frame {target.checkpoint.frame:,} holds no replay memory (memory.snapshot off?)"
        )
        raise BadInput(f"--replay: run {target.run.id} has no training transitions to write, {why}; drop --replay")


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
    """Play the episodes through `_Recorder` (or take them from the replay memory) and write them
    with Minari's `create_dataset_from_buffers` (its `DataCollector` would need jax, which the extra
    does not bring); the returns, steps and dataset's folder. A dataset cut short by an error is
    removed: nothing is left half-written."""
    import shutil

    from minari.storage import get_dataset_path

    from rlrun.enjoy import load_acting

    behaviour = Behaviour(metadata["epsilon"], metadata["noise"], metadata["replay"])
    acting = load_acting(root, target, with_memory=behaviour.replay)
    folder = Path(get_dataset_path(dataset_id))
    created = _first_new_folder(folder, dataset_id)  # the dataset's, or a namespace's Minari makes
    try:
        _check_behaviour(behaviour, acting, target)
        if behaviour.replay:
            episodes = _replayed(acting)
            metadata["replay_rows"] = [min(e["row"] for e in episodes), int(acting.agent.memory.rows_end)]
        else:
            episodes = _played(acting, metadata, behaviour)
        buffers = _buffers(episodes, acting.env.observation_space, acting.env.action_space)
        description = (
            f"the training transitions in the replay memory of rlrun run {target.run.id} ({target.run.spec_name}),"
            if behaviour.replay
            else f"{len(buffers)} episodes of rlrun run {target.run.id} ({target.run.spec_name}),"
        )
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
                    description=f"{description} checkpoint at frame {target.checkpoint.frame:,} (sha256"
                    f" {target.checkpoint.sha256}){_how_acted(metadata)}",
                    data_format="hdf5",
                    jpeg_encoding=False,
                )  # the observations exactly as the env gave them
            dataset.storage.update_metadata({METADATA_KEY: metadata})
        except BaseException:
            shutil.rmtree(created, ignore_errors=True)
            raise
    finally:
        acting.env.close()
    returns = [sum(map(float, episode["rewards"])) for episode in episodes]  # summed in order, as `play` sums
    return returns, sum(len(episode["rewards"]) for episode in episodes), str(folder)


def _how_acted(metadata: dict[str, Any]) -> str:
    """The description's words on the actions: greedy or sampled, ε, σ, the seed; none for a replay."""
    if metadata["replay"]:
        return ""
    words = ["sampled" if metadata["stochastic"] else "greedy"]
    if metadata["epsilon"] is not None:
        words.append(f"ε-random with probability {metadata['epsilon']}")
    if metadata["noise"] is not None:
        words.append(f"Gaussian noise σ={metadata['noise']}")
    return f", {', '.join(words)} actions, seed {metadata['seed']}"


def _played(acting: Any, metadata: dict[str, Any], behaviour: Behaviour) -> list[dict[str, Any]]:
    """The episodes played as enjoy plays them (with ε-random actions through `play`'s own
    generators, noisy ones through `_Noisy`), each as `_Recorder` kept it."""
    from rlrun.enjoy import torch_threads_for
    from rlrun.session.evaluation import play

    recorder = _Recorder(acting.env)
    env: gym.Env[Any, Any] = recorder if behaviour.noise is None else _Noisy(recorder, behaviour.noise)
    with torch_threads_for(acting.spec):  # as enjoy acts
        play(
            acting.agent.actor,
            env,
            metadata["episode_seeds"],
            deterministic=not metadata["stochastic"],
            epsilon=behaviour.epsilon or 0.0,
            normalizer=acting.normalizer,
        )
    return recorder.episodes


def _replayed(acting: Any) -> list[dict[str, Any]]:
    """The replay memory's rows as episodes, oldest first: each env copy's rows (row r,
    r + num_envs, …) from the oldest whose frames are all still kept, cut where an episode ended
    (`_pieces`), each piece as `_Recorder` keeps an episode (`_piece_episode`)."""
    memory = acting.agent.memory
    numbers = np.arange(max(0, memory.rows_end - memory.capacity), memory.rows_end)
    numbers = numbers[memory.sampleable(numbers % memory.capacity)]
    episodes = [
        _piece_episode(acting, piece)
        for copy_index in range(memory.num_envs)
        for piece in _pieces(memory, numbers[numbers % memory.num_envs == copy_index])
    ]
    return sorted(episodes, key=lambda episode: episode["row"])  # oldest first, whichever copy


def _pieces(memory: Any, numbers: np.ndarray) -> list[np.ndarray]:
    """One env copy's row numbers cut where the next row's observation does not end with this
    row's next frame: an episode ended there (the rule of the memory's n-step windows,
    `ReplayMemory._windows`)."""
    if not len(numbers):
        return []
    rows = memory.rows[numbers % memory.capacity]
    goes_on = rows["obs"][1:, -1] == rows["next"][:-1]
    return np.split(numbers, np.flatnonzero(~goes_on) + 1)


def _piece_episode(acting: Any, numbers: np.ndarray) -> dict[str, Any]:
    """The rows `numbers` (one episode, or its part the memory kept) as an episode: the env's own
    observations and rewards, as the memory keeps them, actions in the env's space (a continuous
    action scaled back from the memory's [-1, 1] by the actor, `to_env`); terminated where its last
    row is, truncated otherwise (by the env's limit, or cut by the snapshot while it ran)."""
    memory, space = acting.agent.memory, acting.env.action_space
    rows = memory.rows[numbers % memory.capacity]
    frames = np.concatenate([rows["obs"], np.concatenate([rows["obs"][-1, 1:], rows["next"][-1:]])[None]])
    actions = acting.agent.actor.to_env(rows["action"]) if isinstance(space, gym.spaces.Box) else rows["action"]
    terminations = rows["terminated"] > 0
    return {
        "row": int(numbers[0]),
        "seed": None,
        "observations": memory.frames[frames % memory.frame_capacity].reshape(-1, *memory.obs_shape),
        "actions": np.asarray(actions, dtype=space.dtype),
        "rewards": rows["reward"].astype(np.float64),
        "terminations": terminations,
        "truncations": np.concatenate([np.zeros(len(rows) - 1, dtype=bool), [not terminations[-1]]]),
    }


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


def _buffers(
    episodes: list[dict[str, Any]], observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> list[Any]:
    """Minari's episode buffers, a Dict or Tuple space's items as dicts or tuples of lists."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    return [
        EpisodeBuffer(
            id=index,
            seed=episode["seed"],
            observations=_columns(episode["observations"], observation_space),
            actions=_columns(episode["actions"], action_space),
            rewards=list(episode["rewards"]),
            terminations=list(episode["terminations"]),
            truncations=list(episode["truncations"]),
        )
        for index, episode in enumerate(episodes)
    ]


class _Noisy(gym.ActionWrapper[Any, Any, Any]):
    """Gaussian noise of standard deviation `sigma` on every action, clipped to the space's bounds,
    from a generator seeded below each episode's seed (`NOISE_STREAM`): the same seeds, the same
    noise. Outside `_Recorder`, which keeps the action the env was given."""

    def __init__(self, env: gym.Env[Any, Any], sigma: float) -> None:
        super().__init__(env)
        self.sigma = sigma
        self.noise = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.noise = np.random.default_rng(seeding.derive(seed, seeding.EVAL_EXPLORATION, NOISE_STREAM))
        return self.env.reset(seed=seed, options=options)

    def action(self, action: Any) -> Any:
        space = self.action_space
        assert isinstance(space, gym.spaces.Box)
        noisy = np.asarray(action, dtype=np.float64) + self.sigma * self.noise.standard_normal(space.shape)
        return np.clip(noisy, space.low, space.high).astype(space.dtype)


def _columns(items: list[Any], space: gym.Space[Any]) -> Any:
    """A list of a Dict or Tuple space's values as a dict or tuple of lists (what Minari stores);
    any other space's values as they are."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _columns([item[key] for item in items], sub) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_columns([item[i] for item in items], sub) for i, sub in enumerate(space.spaces))
    return items
