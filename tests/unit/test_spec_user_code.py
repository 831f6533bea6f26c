"""The modules of the user's own code a spec names: what every process and every Ray worker imports."""

from __future__ import annotations

import pytest

from rlrun.spec import builtin_document, user_code, validate_spec


def test_a_builtin_spec_names_no_user_code() -> None:
    assert user_code(validate_spec(builtin_document("ppo_cartpole"))) == []


def test_env_wrappers_and_network_modules_each_once_in_order() -> None:
    document = builtin_document("ppo_cartpole")
    document["env"].update(
        id="my_robot.envs:Reach-v0",
        packages=["my_robot.sensors", "my_robot.envs"],
        wrappers=["my_robot.wrappers:Slip", {"class": "gymnasium.wrappers:ClipReward", "kwargs": {"min_reward": -1}}],
    )
    document["agent"]["network"] = {"kind": "my_nets.policies:Wide", "kwargs": {"width": 8}}
    spec = validate_spec(document, check_env_id=False)
    assert user_code(spec) == [
        "my_robot.sensors",
        "my_robot.envs",
        "my_robot.wrappers",
        "gymnasium.wrappers",
        "my_nets.policies",
    ]


@pytest.mark.parametrize(
    ("env_id", "extra"),
    [
        ("LunarLander-v3", "box2d"),
        ("LunarLanderContinuous-v3", "box2d"),
        ("BipedalWalkerHardcore-v3", "box2d"),
        ("Hopper-v5", "mujoco"),
        ("ALE/Pong-v5", "atari"),
        ("CartPole-v1", None),
    ],
)
def test_an_env_id_names_the_extra_its_physics_needs(env_id: str, extra: str | None) -> None:
    """The install hint of a missing package names the extra: a continuous variant's id included."""
    from rlrun.spec.env_ids import extra_for

    assert extra_for(env_id) == extra
