"""Exact resume with `env.wrappers` and `env.normalize` (issue 28): a run interrupted (SIGTERM
mid-episode, kill -9 of its process group) and resumed equals the run that was never interrupted,
bit for bit — wrappers that keep state across episodes (Gymnasium's running statistics, a user's
counter), on a captured env and on a replayed one, and running normalisation on a rollout
algorithm (PPO) and on a replay one (SAC, which samples raw data and normalises the batch).
Evaluation and `rlrun enjoy` read the statistics frozen.

Like `test_resume_envs.py`: run A trains straight to the budget, run B is interrupted and resumed,
and `assert_same_run` compares their final snapshots (the statistics are in state.pt's tensors).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import rlrun
from same_run import (
    assert_same_run,
    final_state,
    killed_after_a_snapshot,
    preempted_mid_episode,
    reference_state,
    resume_ok,
    train,
)

from rlrun.registry import Registry

pytestmark = pytest.mark.slow

BUDGET = 4000
TESTS = Path(__file__).parent
WRAPPERS = json.dumps(
    [
        "gymnasium.wrappers:ClipAction",
        "gymnasium.wrappers:NormalizeObservation",
        {"class": "user_wrappers:EpisodeBonus", "kwargs": {"scale": 0.05}},
    ]
)
NORMALIZE = json.dumps({"observation": True, "reward": True, "gamma": 0.9})
SMALL_PPO = [
    "--set",
    "agent.n_steps=128",
    "--set",
    "agent.batch_size=64",
    "--set",
    "agent.n_epochs=2",
    "--set",
    "agent.network.hidden=[32, 32]",
    "--set",
    "env.num_envs=2",
]
SMALL_SAC = [
    "--set",
    "agent.learning_starts=300",
    "--set",
    "agent.batch_size=32",
    "--set",
    "agent.network.hidden=[32, 32]",
    "--set",
    "agent.memory.capacity=20000",
]

# name: (built-in spec, settings, how every env copy must come back)
CASES: dict[str, tuple[str, list[str], str]] = {
    "ppo-pendulum-wrappers": ("ppo_pendulum", [*SMALL_PPO, "--set", f"env.wrappers={WRAPPERS}"], "captured"),
    "ppo-lunarlander-user-wrapper": (
        "ppo_lunarlander",
        [*SMALL_PPO, "--set", 'env.wrappers=[{"class": "user_wrappers:EpisodeBonus"}]'],
        "replayed",
    ),
    "ppo-pendulum-normalize": ("ppo_pendulum", [*SMALL_PPO, "--set", f"env.normalize={NORMALIZE}"], "captured"),
    "sac-pendulum-normalize": ("sac_pendulum", [*SMALL_SAC, "--set", "env.normalize={}"], "captured"),
}


@pytest.fixture(scope="module", autouse=True)
def _user_wrappers_importable() -> Iterator[None]:
    """Every training process imports `user_wrappers` from this folder, as a user's would from theirs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(TESTS)])))
        yield


def _args(case: str) -> tuple[str, list[str]]:
    spec, settings, _ = CASES[case]
    if "lunarlander" in case:
        pytest.importorskip("Box2D")
    return spec, [*settings, "--frames", str(BUDGET)]


@pytest.fixture(scope="module", params=list(CASES))
def straight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    case = request.param
    spec, args = _args(case)
    return case, reference_state(tmp_path_factory, spec, *args)


def _assert_resumed_exactly(home: Path, case: str) -> None:
    with Registry.open(home, create=False) as registry:
        resumed = registry.get_run(registry.resolve("latest").id).attempts[-1]
    assert not resumed.approximate, resumed.note
    assert resumed.note is not None and resumed.note.startswith(f"env: {CASES[case][2]}"), resumed.note


def _assert_state_is_used(case: str, run: dict[str, Any]) -> None:
    """The statistics and the wrappers' state are really there (a test that cannot fail is none)."""
    saved = run["sessions"][0]["saved"]
    if "normalize" in case:
        stats = saved.tensors["normalize"]
        assert stats["obs_count"].item() > BUDGET / 2 and not torch.equal(stats["obs_var"], torch.ones(3).double())
        assert stats["ret_var"].item() != 1.0
    else:
        assert "normalize" not in saved.tensors
        layers = saved.meta.env["envs"][0].get("layers") or saved.meta.env["envs"][0]["start"]["wrappers"]
        counted = [layer["episodes"] for layer in layers if "episodes" in layer]
        assert counted and counted[0] > 1, "the user wrapper's episode count is not in the snapshot"


def test_sigterm_mid_episode(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    case, a = straight
    _assert_state_is_used(case, a)
    spec, args = _args(case)
    preempted_mid_episode(home, spec, *args)
    resume_ok(home)
    _assert_resumed_exactly(home, case)
    assert_same_run(a, final_state(home))


def test_kill_9_of_the_process_group(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    case, a = straight
    spec, args = _args(case)
    killed_after_a_snapshot(home, spec, *args)
    resume_ok(home, "latest")
    _assert_resumed_exactly(home, case)
    assert_same_run(a, final_state(home))


# ---------------------------------------------------------------------------------------------
# Edits at resume, and the frozen statistics of evaluation and enjoy


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("env.normalize", '{"clip_obs": 5}'),
        ("env.wrappers", '["gymnasium.wrappers:ClipAction"]'),
    ],
)
def test_an_edit_of_wrappers_or_normalisation_is_refused_at_resume(home: Path, setting: str, value: str) -> None:
    spec, args = _args("ppo-pendulum-normalize")
    assert train(home, spec, *args[:-1], "2000").code == 0
    refused = rlrun(home, "resume", "latest", "--frames", str(BUDGET), "--set", f"{setting}={value}")
    assert refused.code == 2, refused.stderr
    assert f"edit refused: {setting}" in refused.stderr
    assert "structural: every observation" in " ".join(refused.stderr.split()), refused.stderr


def test_enjoy_plays_with_the_training_statistics_frozen(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlrun.enjoy import enjoy
    from rlrun.envs import normalize

    spec, args = _args("ppo-pendulum-normalize")
    assert train(home, spec, *args[:-1], "2000").code == 0
    final = final_state(home)["sessions"][0]["saved"]
    before = {k: v.clone() for k, v in final.tensors["normalize"].items()}

    def never(*_: Any) -> None:
        raise AssertionError("frozen statistics were updated")

    monkeypatch.setattr(normalize.Normalizer, "step", never)
    monkeypatch.setattr(normalize.Normalizer, "reset", never)
    seen: list[np.ndarray] = []
    original = normalize.Normalizer.observation
    monkeypatch.setattr(
        normalize.Normalizer, "observation", lambda self, obs: seen.append(self.obs_rms.mean) or original(self, obs)
    )
    played = enjoy("latest@latest", home=home, episodes=2)
    assert len(played.episodes) == 2 and seen, "enjoy did not normalise what the agent saw"
    assert all(np.array_equal(mean, before["obs_mean"].numpy()) for mean in seen), "not the snapshot's statistics"
    after = final_state(home)["sessions"][0]["saved"].tensors["normalize"]
    assert all(torch.equal(before[k], after[k]) for k in before)
