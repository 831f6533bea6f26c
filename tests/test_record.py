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


def _record(home: Path, name: str, *args: str) -> dict[str, Any]:
    done = invoke(home, "record", "tiny", "--episodes", "3", "--minari", name, "--json", *args)
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
