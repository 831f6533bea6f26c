"""The pure parts of envs from the user's code: how `env.id` and `env.packages` are read and imported
(and where from), which files Ray ships, which spaces rlrun trains on, and the env state protocol
(`get_rlrun_state`/`set_rlrun_state`) as the capture ladder's first rung. No training."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlrun.envs.state import EpisodeRecorder, NotCapturable, capture_env, restore_env
from rlrun.errors import BadInput
from rlrun.spec.env_ids import env_id_problems, split_env_id, user_modules
from rlrun.training.ray.preflight import shipped_modules

USERENVS = Path(__file__).parents[1] / "userenvs"


@pytest.fixture
def user_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USERENVS))


def test_an_env_id_names_its_module_before_one_colon() -> None:
    assert split_env_id("my_robot.envs:Reach-v0") == ("my_robot.envs", "Reach-v0")
    assert split_env_id("CartPole-v1") == (None, "CartPole-v1")
    assert split_env_id("ALE/Pong-v5") == (None, "ALE/Pong-v5")
    assert user_modules("my_robot.envs:Reach-v0", ["extra_envs"]) == ["extra_envs", "my_robot.envs"]
    assert user_modules("CartPole-v1") == []


def test_a_user_env_is_known_by_its_module_or_by_a_package_imported_first(user_code: None) -> None:
    assert env_id_problems("my_robot.envs:Reach-v0") == []
    assert env_id_problems("Push-v0", ["my_robot.envs"]) == []
    assert env_id_problems("CartPole-v1") == []
    assert "did you mean" in env_id_problems("my_robot.envs:Rech-v0")[0]


def test_the_current_folder_holds_user_modules_searched_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd_robot.py").write_text(
        "import gymnasium as gym\ngym.register('CwdRobot-v0', entry_point='my_robot.envs:Reach')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))] + [str(USERENVS)])
    try:
        assert env_id_problems("cwd_robot:CwdRobot-v0") == []
        assert sys.path[-1] == str(tmp_path), "appended last: an installed module of the same name wins"
    finally:  # gymnasium's registry is the process's: other tests list what my_robot.envs registers
        import gymnasium

        gymnasium.registry.pop("CwdRobot-v0", None)
        sys.modules.pop("cwd_robot", None)


def test_ray_ships_the_users_packages_and_files_not_what_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "shipped_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "envs.py").write_text("")
    (tmp_path / "shipped_file.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert shipped_modules(["shipped_pkg.envs", "shipped_file", "numpy", "json", "shipped_pkg"]) == [
        str(package),
        str(tmp_path / "shipped_file.py"),
    ]


def test_ray_cannot_ship_a_namespace_package_spread_over_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for side in ("a", "b"):
        (tmp_path / side / "spread_robot").mkdir(parents=True)
        monkeypatch.syspath_prepend(str(tmp_path / side))
    with pytest.raises(BadInput, match="namespace package spread over 2 folders"):
        shipped_modules(["spread_robot"])


# -- the state protocol -----------------------------------------------------------------------------


def through_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def walk(env: gym.Env[Any, Any], steps: int) -> list[np.ndarray]:
    return [env.step(env.action_space.sample())[0] for _ in range(steps)]


def test_an_env_with_the_protocol_hands_over_its_state_and_continues_bit_for_bit(user_code: None) -> None:
    from my_robot.envs import Push  # noqa: F401  registers the envs

    env = EpisodeRecorder(gym.make("Push-v0"))
    env.reset(seed=3)
    env.action_space.seed(4)
    walk(env, 17)
    state = through_json(env.rlrun_capture())
    assert state["method"] == "captured" and "protocol" in state
    after = walk(env, 30)

    other = EpisodeRecorder(gym.make("Push-v0"))
    other.reset(seed=99)  # somewhere else entirely
    assert other.rlrun_restore(state) == "captured by set_rlrun_state"
    assert other.env._elapsed_steps == 17, "the wrappers' state is rlrun's to keep"  # the time limit's
    assert all(np.array_equal(a, b) for a, b in zip(after, walk(other, 30), strict=True))


def test_an_env_without_the_protocol_holding_an_object_is_replayed(user_code: None) -> None:
    from my_robot.envs import Reach  # noqa: F401  registers the envs

    env = EpisodeRecorder(gym.make("Reach-v0"))
    env.reset(seed=3)
    env.action_space.seed(4)
    walk(env, 17)
    with pytest.raises(NotCapturable, match="Arm"):
        capture_env(env.env)
    state = through_json(env.rlrun_capture())
    assert state["method"] == "replayed"
    after = walk(env, 30)
    other = EpisodeRecorder(gym.make("Reach-v0"))
    assert other.rlrun_restore(state) == "replayed 17 steps"
    assert all(np.array_equal(a, b) for a, b in zip(after, walk(other, 30), strict=True))


class Leaky(gym.Env[np.ndarray, int]):
    """Its protocol hands over an object: not plain data, so the env is replayed instead."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def get_rlrun_state(self) -> dict[str, Any]:
        return {"world": object()}

    def set_rlrun_state(self, state: dict[str, Any]) -> None:
        raise AssertionError("never given a state it could not hand over")


def test_a_protocol_state_that_is_not_plain_data_falls_back_to_replay() -> None:
    env = EpisodeRecorder(Leaky())
    env.reset(seed=0)
    env.step(1)
    with pytest.raises(NotCapturable, match=r"get_rlrun_state\(\)\.world is a object"):
        capture_env(env.env)
    assert env.rlrun_capture()["method"] == "replayed"


def test_a_snapshot_with_a_protocol_state_refuses_an_env_without_the_protocol(user_code: None) -> None:
    from my_robot.envs import Push  # noqa: F401  registers the envs

    push = gym.make("Push-v0")
    push.reset(seed=0)
    state = capture_env(push)
    reach = gym.make("Reach-v0")
    reach.reset(seed=0)
    with pytest.raises(NotCapturable, match="no set_rlrun_state"):
        restore_env(reach, state)
