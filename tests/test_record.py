"""Trajectory datasets (`rlrun record --minari`, rlrun.enjoy.dataset): the agent's episodes, played as
`rlrun enjoy` plays them, written as a Minari dataset that `minari.load_dataset` reads back, whose
metadata names the run, the checkpoint's sha256, the spec and the seeds; the same checkpoint and
seed give the same data."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import Result, invoke

from rlrun.registry import Registry

pytestmark = pytest.mark.slow  # a trained home (one tiny training per test session)

minari = pytest.importorskip("minari", reason="the dataset tests need the minari extra")


@pytest.fixture(autouse=True)
def _datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "datasets"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(folder))
    return folder


def _record(home: Path, name: str, *args: str, run: str = "tiny") -> dict[str, Any]:
    episodes = [] if "--replay" in args else ["--episodes", "3"]
    done = invoke(home, "record", run, *episodes, "--minari", name, "--json", *args)
    assert done.code == 0, done.stderr
    return dict(done.json())


def _episodes(name: str) -> list[dict[str, Any]]:
    dataset = minari.load_dataset(name)
    return [
        {
            "id": e.id,
            "observations": e.observations,
            "actions": e.actions,
            "rewards": e.rewards,
            "terminations": e.terminations,
            "truncations": e.truncations,
        }
        for e in dataset.iterate_episodes()
    ]


def _same_data(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert np.array_equal(x[key], y[key]) and np.asarray(x[key]).dtype == np.asarray(y[key]).dtype, key


def test_a_dataset_round_trips_with_its_source_and_re_records_identically(trained_copy: Path) -> None:
    recorded = _record(trained_copy, "cartpole/tiny-v0")
    dataset = minari.load_dataset("cartpole/tiny-v0")
    assert dataset.total_episodes == 3 and dataset.total_steps == recorded["steps"]
    source = dataset.storage.metadata["rlrun"]
    with Registry.open(trained_copy, create=False) as registry:
        run = registry.resolve("tiny")
        checkpoints = {c.frame: c for c in registry.get_run(run.id).checkpoints}
    assert source["run_id"] == run.id and source["spec"]["name"] == "reinforce_cartpole"
    assert source["checkpoint"]["sha256"] == checkpoints[source["checkpoint"]["frame"]].sha256
    assert source["seed"] == 0 and len(source["episode_seeds"]) == 3 and source["stochastic"] is False
    episodes = _episodes("cartpole/tiny-v0")
    seeds = [m["seed"] for m in dataset.storage.get_episode_metadata(range(3))]
    assert seeds == source["episode_seeds"]
    for episode in episodes:
        assert len(episode["observations"]) == len(episode["actions"]) + 1
        assert episode["terminations"][-1] or episode["truncations"][-1]
    # The agent acts as enjoy plays it: the same returns on the same seed.
    enjoyed = invoke(trained_copy, "enjoy", "tiny", "--episodes", "3", "--json")
    assert enjoyed.code == 0, enjoyed.stderr
    assert [e["return"] for e in enjoyed.json()["episodes"]] == [float(np.sum(e["rewards"])) for e in episodes]
    # Twice from the same checkpoint and seed: the same data, greedy or sampled.
    _record(trained_copy, "cartpole/tiny-v1")
    _same_data(episodes, _episodes("cartpole/tiny-v1"))
    _record(trained_copy, "cartpole/sampled-v0", "--stochastic", "--seed", "7", "--checkpoint", "latest")
    _record(trained_copy, "cartpole/sampled-v1", "--stochastic", "--seed", "7", "--checkpoint", "latest")
    sampled = _episodes("cartpole/sampled-v0")
    _same_data(sampled, _episodes("cartpole/sampled-v1"))
    latest = minari.load_dataset("cartpole/sampled-v0").storage.metadata["rlrun"]["checkpoint"]
    assert latest["frame"] == max(checkpoints)


def _one_line(done: Result, *words: str) -> None:
    assert done.code == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_bad_input_is_one_line_and_writes_nothing(
    trained_home: Path, _datasets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_line(invoke(trained_home, "record", "tiny", "--minari", "no_version"), "not a Minari dataset id")
    _one_line(invoke(trained_home, "record", "tiny"), "--minari NAME")
    _one_line(invoke(trained_home, "record", "tiny", "--minari", "cp/y-v0", "--checkpoint", "soon"), "soon")
    _one_line(invoke(trained_home, "record", "nosuchrun", "--minari", "cp/y-v0"), "nosuchrun")
    assert not list(_datasets.glob("*/*")), "nothing written"
    _record(trained_home, "cp/taken-v0")
    _one_line(invoke(trained_home, "record", "tiny", "--minari", "cp/taken-v0"), "already exists")
    monkeypatch.setitem(sys.modules, "minari", None)  # the extra not installed
    _one_line(invoke(trained_home, "record", "tiny", "--minari", "cp/other-v0"), "[minari]", "pip install")
    assert not (_datasets / "cp" / "other-v0").exists()


def test_an_env_registered_with_a_class_records_and_loads_back(
    trained_home: Path, _datasets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered as docs/tutorials/own-environment.md does, `entry_point=Reach` (a class, not a
    "module:Class" string): Gymnasium cannot write such a spec as JSON, and Minari stored it."""
    import dataclasses

    import gymnasium as gym
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    from rlrun.enjoy import dataset

    by_class = dataclasses.replace(gym.registry["CartPole-v1"], entry_point=CartPoleEnv)
    monkeypatch.setitem(gym.registry, "CartPole-v1", by_class)
    recorded = _record(trained_home, "cp/byclass-v0")
    loaded = minari.load_dataset("cp/byclass-v0")
    assert loaded.total_episodes == 3 and loaded.total_steps == recorded["steps"]
    assert loaded.spec.env_spec is not None
    assert loaded.spec.env_spec.entry_point == "gymnasium.envs.classic_control.cartpole:CartPoleEnv"
    assert isinstance(loaded.recover_environment().unwrapped, CartPoleEnv)
    # A write that fails leaves nothing behind: not the dataset, not the namespace Minari began.
    monkeypatch.setattr(dataset, "_json_spec", lambda spec: spec)  # as before: the class as it is
    with pytest.raises(ValueError, match="Callable found"):  # in this process the error is raised
        invoke(trained_home, "record", "tiny", "--episodes", "1", "--minari", "fresh/byclass-v0")
    assert not (_datasets / "fresh").exists()


# D4RL's recipe: a "medium" policy's data (ε-random or noisy actions) and "medium-replay" (the
# run's own training transitions). One tiny DQN and one tiny SAC run for the module (~3 s each).
SMALL = [
    "--set",
    "meta.num_eval_episodes=1",
    "--set",
    "agent.memory.capacity=1000",
    "--set",
    "agent.network.hidden=[16]",
]


@pytest.fixture(scope="module")
def off_policy_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DQN run `d` on CartPole and a SAC run `s` on Pendulum, each a few hundred frames past
    learning_starts, checkpoints every 500 frames (replay memory included: `memory.snapshot`)."""
    home = tmp_path_factory.mktemp("off_policy") / "runs"
    runs = {
        "d": ["dqn_cartpole", "--frames", "1500", "--set", "agent.learning_starts=500", "--set", "agent.batch_size=32"],
        "s": ["sac_pendulum", "--frames", "600", "--set", "agent.learning_starts=200", "--set", "agent.batch_size=32"],
    }
    for name, (spec, *args) in runs.items():
        every = ["--set", "meta.eval_frequency=300", "--set", "meta.checkpoint_frequency=300"]
        done = invoke(home, "train", spec, "--name", name, *args, *every, *SMALL, "--set", "agent.train_frequency=16")
        assert done.code == 0, done.stderr
    return home


def test_epsilon_records_the_same_medium_data_twice_and_says_so(off_policy_home: Path) -> None:
    first = _record(
        off_policy_home, "cp/medium-v0", "--checkpoint", "latest", "--epsilon", "0.3", "--seed", "5", run="d"
    )
    _record(off_policy_home, "cp/medium-v1", "--checkpoint", "latest", "--epsilon", "0.3", "--seed", "5", run="d")
    _same_data(_episodes("cp/medium-v0"), _episodes("cp/medium-v1"))
    source = minari.load_dataset("cp/medium-v0").storage.metadata["rlrun"]
    assert source["epsilon"] == 0.3 and source["noise"] is None and source["replay"] is False
    assert source == first["rlrun"] and source["seed"] == 5
    assert "ε-random with probability 0.3" in minari.load_dataset("cp/medium-v0").storage.metadata["description"]


def test_noise_records_the_same_clipped_actions_twice(off_policy_home: Path) -> None:
    _record(off_policy_home, "pd/medium-v0", "--noise", "0.5", run="s")
    _record(off_policy_home, "pd/medium-v1", "--noise", "0.5", run="s")
    episodes = _episodes("pd/medium-v0")
    _same_data(episodes, _episodes("pd/medium-v1"))
    actions = np.concatenate([e["actions"] for e in episodes])
    assert actions.dtype == np.float32 and np.all(np.abs(actions) <= 2.0)  # Pendulum's bounds
    assert minari.load_dataset("pd/medium-v0").storage.metadata["rlrun"]["noise"] == 0.5


def test_replay_writes_the_memory_s_transitions_as_its_batches_give_them(off_policy_home: Path) -> None:
    """Each transition of the "medium-replay" dataset (observation, action, reward, next
    observation, terminated) is the row the replay memory's own `batch` gives, oldest first."""
    from rlrun.enjoy import load_acting, locate

    recorded = _record(off_policy_home, "cp/replay-v0", "--replay", "--checkpoint", "latest", run="d")
    _record(off_policy_home, "cp/replay-v1", "--replay", "--checkpoint", "latest", run="d")
    episodes = _episodes("cp/replay-v0")
    _same_data(episodes, _episodes("cp/replay-v1"))
    located = locate("d@latest", home=off_policy_home)
    acting = load_acting(located.root, located.target, with_memory=True)
    acting.env.close()
    memory = acting.agent.memory
    assert recorded["rlrun"]["replay"] is True and recorded["rlrun"]["replay_rows"] == [500, 1500]
    assert recorded["steps"] == memory.capacity == sum(len(e["actions"]) for e in episodes)
    batch = memory.batch(np.arange(500, 1500) % memory.capacity)
    steps = {
        "obs": np.concatenate([e["observations"][:-1] for e in episodes]),
        "actions": np.concatenate([e["actions"] for e in episodes]),
        "rewards": np.concatenate([e["rewards"] for e in episodes]),
        "next_obs": np.concatenate([e["observations"][1:] for e in episodes]),
        "terminated": np.concatenate([e["terminations"] for e in episodes]),
    }
    for name, column in steps.items():
        assert np.array_equal(column, getattr(batch, name).numpy()), name
    ends = np.concatenate([e["terminations"] | e["truncations"] for e in episodes])
    assert all(e["terminations"][-1] or e["truncations"][-1] for e in episodes) and ends.sum() == len(episodes)
    # SAC's memory keeps actions in [-1, 1]: the dataset holds the env's, within Pendulum's bounds.
    continuous = _record(off_policy_home, "pd/replay-v0", "--replay", run="s")
    actions = np.concatenate([e["actions"] for e in _episodes("pd/replay-v0")])
    assert continuous["steps"] == len(actions) and np.all(np.abs(actions) <= 2.0) and np.abs(actions).max() > 1.0


def test_a_behaviour_the_run_cannot_have_is_one_line_and_writes_nothing(
    off_policy_home: Path, trained_home: Path, _datasets: Path
) -> None:
    home = off_policy_home
    _one_line(invoke(home, "record", "d", "--minari", "cp/bad-v0", "--epsilon", "1.5"), "--epsilon 1.5", "0 to 1")
    _one_line(invoke(home, "record", "d", "--minari", "cp/bad-v0", "--noise", "0.1"), "--noise", "--epsilon E")
    _one_line(invoke(home, "record", "s", "--minari", "cp/bad-v0", "--epsilon", "0.1"), "--epsilon", "--noise SIGMA")
    _one_line(invoke(home, "record", "s", "--minari", "cp/bad-v0", "--noise", "-1"), "--noise -1")
    _one_line(invoke(home, "record", "d", "--minari", "cp/bad-v0", "--replay", "--episodes", "3"), "drop --episodes")
    _one_line(invoke(trained_home, "record", "tiny", "--minari", "cp/bad-v0", "--replay"), "no replay memory")
    assert not list(_datasets.glob("*/*")), "nothing written"
