"""Spaces and user networks without training: the discrete policies' log-probabilities and entropies
against torch.distributions, structured observations flattened as Gymnasium flattens them and handed
back in their structure, which spaces are refused and how, and building a user's network."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlrun.algorithms.distributions import Bernoulli, Categorical, MultiCategorical, policy_for
from rlrun.algorithms.user_network import structured
from rlrun.envs.spaces import Flattened, FlattenStructured, observations_as_arrays
from rlrun.errors import BadInput, SpecError
from rlrun.spec import NetworkSpec, builtin_document, validate_spec
from rlrun.spec.consistency import check_edit
from rlrun.spec.spaces import check_action_space, observation_handling

USERNETS = Path(__file__).parents[1] / "usernets"

# -- policies ------------------------------------------------------------------------------------------

ACTION_SPACES = {
    "discrete": spaces.Discrete(4),
    "multidiscrete": spaces.MultiDiscrete([3, 2, 4], start=[1, 0, -2]),
    "multidiscrete-2d": spaces.MultiDiscrete([[2, 3], [4, 2]]),
    "multibinary": spaces.MultiBinary(5),
    "multibinary-2d": spaces.MultiBinary([2, 3]),
}


def reference(policy: Any, logits: torch.Tensor) -> list[torch.distributions.Distribution]:
    """The same policy as independent torch.distributions, one per component."""
    if isinstance(policy, Categorical):
        return [torch.distributions.Categorical(logits=logits)]
    if isinstance(policy, MultiCategorical):
        return [torch.distributions.Categorical(logits=part) for part in logits.split(policy.sizes, dim=-1)]
    return [torch.distributions.Bernoulli(logits=logits[:, i]) for i in range(logits.shape[-1])]


@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_log_probs_and_entropy_are_the_sums_over_independent_components(name: str) -> None:
    policy = policy_for(ACTION_SPACES[name])
    logits = torch.randn(64, policy.outputs, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    actions, sampled_log_probs = policy.sample(logits.numpy(), torch.Generator().manual_seed(2))
    assert actions.shape == (64, *policy.shape) and actions.dtype == np.int64

    log_probs, entropy = policy.evaluate(logits, torch.from_numpy(actions), entropy=True)
    parts = reference(policy, logits)
    columns = torch.from_numpy(actions).reshape(64, -1)
    expected = sum(
        d.log_prob(columns[:, i].to(logits.dtype) if isinstance(d, torch.distributions.Bernoulli) else columns[:, i])
        for i, d in enumerate(parts)
    )
    assert torch.allclose(log_probs, expected, atol=1e-12)
    assert entropy is not None and torch.allclose(entropy, sum(d.entropy() for d in parts), atol=1e-12)
    np.testing.assert_allclose(sampled_log_probs, expected.numpy(), atol=1e-9)  # acting agrees with learning


@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_sampling_follows_the_probabilities_and_only_the_generator(name: str) -> None:
    policy = policy_for(ACTION_SPACES[name])
    logits = np.tile(np.random.default_rng(3).normal(size=policy.outputs), (20_000, 1))
    first, _ = policy.sample(logits, torch.Generator().manual_seed(4))
    again, _ = policy.sample(logits, torch.Generator().manual_seed(4))
    assert np.array_equal(first, again)
    parts = reference(policy, torch.from_numpy(logits[:1]))
    columns = first.reshape(len(first), -1)
    for i, d in enumerate(parts):
        if isinstance(d, torch.distributions.Bernoulli):
            assert abs(columns[:, i].mean() - float(d.probs[0])) < 0.015
        else:
            frequencies = np.bincount(columns[:, i], minlength=d.probs.shape[-1]) / len(columns)
            np.testing.assert_allclose(frequencies, d.probs[0].numpy(), atol=0.015)


@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_actions_reach_the_env_in_its_space_and_come_back(name: str) -> None:
    space = ACTION_SPACES[name]
    policy = policy_for(space)
    logits = np.random.default_rng(5).normal(size=(8, policy.outputs))
    for drawn in (policy.sample(logits, torch.Generator().manual_seed(6))[0], policy.greedy(logits)):
        for action in policy.to_env(drawn):
            assert space.contains(action), (action, space)
        assert np.array_equal(policy.from_env(policy.to_env(drawn)), drawn)


def test_bernoulli_greedy_is_the_likelier_bit() -> None:
    policy = Bernoulli(spaces.MultiBinary(3))
    assert policy.greedy(np.array([[-1.0, 0.5, 2.0]])).tolist() == [[0, 1, 1]]


# -- observations --------------------------------------------------------------------------------------

STRUCTURED = spaces.Dict(
    {
        "position": spaces.Box(-1.0, 1.0, (2, 2), np.float32),
        "goal": spaces.Discrete(3, start=1),
        "keys": spaces.MultiBinary(2),
        "doors": spaces.MultiDiscrete([2, 3]),
        "nested": spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 255, (3,), np.uint8))),
    }
)


class StructuredEnv(gym.Env[Any, int]):
    observation_space = STRUCTURED
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), {}


def test_structured_observations_are_flattened_as_gymnasium_flattens_them() -> None:
    env = observations_as_arrays(StructuredEnv(), "Structured-v0")
    assert isinstance(env, FlattenStructured)
    assert isinstance(env.observation_space, Flattened) and env.observation_space.structure is STRUCTURED
    assert env.observation_space == spaces.flatten_space(STRUCTURED)
    obs, _ = env.reset(seed=7)
    raw, _ = StructuredEnv().reset(seed=7)
    assert np.array_equal(obs, spaces.flatten(STRUCTURED, raw)) and obs.dtype == env.observation_space.dtype


def test_a_user_network_gets_the_observations_in_their_structure() -> None:
    STRUCTURED.seed(8)
    samples = [STRUCTURED.sample() for _ in range(4)]
    rows = torch.from_numpy(np.stack([spaces.flatten(STRUCTURED, s) for s in samples])).float()
    batch = structured(Flattened(STRUCTURED), rows, flattened=True)
    for i, sample in enumerate(samples):
        assert batch["goal"][i].item() == sample["goal"] and batch["goal"].dtype == torch.int64
        assert torch.equal(batch["position"][i], torch.from_numpy(sample["position"]))
        assert batch["keys"][i].tolist() == sample["keys"].tolist() and batch["keys"].dtype == torch.float32
        assert batch["doors"][i].tolist() == sample["doors"].tolist()
        assert batch["nested"][0][i].item() == sample["nested"][0]
        assert batch["nested"][1][i].tolist() == sample["nested"][1].tolist()


def test_array_observations_keep_their_shape_for_a_user_network() -> None:
    rows = torch.arange(12.0).reshape(2, 6)
    assert structured(spaces.Box(0, 255, (2, 3), np.uint8), rows, flattened=False).shape == (2, 2, 3)
    assert structured(spaces.Discrete(9), torch.tensor([[3.0], [8.0]]), flattened=False).tolist() == [3, 8]


def test_which_observation_spaces_a_network_takes() -> None:
    assert observation_handling(spaces.Box(0, 1, (3,)), "E") == "as is"
    assert observation_handling(spaces.Discrete(3), "E") == "as is"
    assert observation_handling(STRUCTURED, "E") == "flattened"
    assert observation_handling(Flattened(STRUCTURED), "E") == "as is"
    with pytest.raises(BadInput, match=r"^E observes Text\(.*which rlrun cannot give a network"):
        observation_handling(spaces.Text(5), "E")
    with pytest.raises(BadInput, match="observes Dict"):  # a Dict with a Sequence inside has no fixed size
        observation_handling(spaces.Dict({"s": spaces.Sequence(spaces.Discrete(2))}), "E")


@pytest.mark.parametrize(
    ("algorithm", "space", "message"),
    [
        (
            "dqn",
            spaces.MultiDiscrete([3, 2]),
            "dqn cannot train on E: it acts in Discrete action spaces, "
            "not MultiDiscrete([3 2]); use a2c, ppo or reinforce",
        ),
        (
            "sac",
            spaces.MultiBinary(2),
            "sac cannot train on E: it acts in Box action spaces, not MultiBinary(2); use a2c, ppo or reinforce",
        ),
        ("reinforce", spaces.Box(-1, 1, (1,)), "use a2c, ppo or sac"),
        ("ppo", spaces.Text(3), "wrap the env so it acts in a Box, Discrete, MultiDiscrete or MultiBinary space"),
    ],
)
def test_an_action_space_an_algorithm_cannot_act_in_is_refused_naming_the_ones_that_can(
    algorithm: str, space: Any, message: str
) -> None:
    with pytest.raises(BadInput) as refused:
        check_action_space(algorithm, space, "E")
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("algorithm", "space"),
    [
        ("ppo", spaces.MultiBinary(3)),
        ("a2c", spaces.MultiDiscrete([2])),
        ("reinforce", spaces.MultiBinary(1)),
        ("dqn", spaces.Discrete(2)),
        ("sac", spaces.Box(-1, 1, (2,))),
    ],
)
def test_the_action_spaces_each_algorithm_acts_in(algorithm: str, space: Any) -> None:
    check_action_space(algorithm, space, "E")


# -- networks from the user's code ----------------------------------------------------------------------


@pytest.fixture
def my_nets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(USERNETS))
    yield
    sys.modules.pop("my_nets", None)


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("cnn", 'not a network; use "mlp", "nature_cnn", or "module:factory"'),
        ("my_nets.Net", "not a network"),
        ("my_nets:", "not a network"),
    ],
)
def test_a_network_kind_is_built_in_or_an_import_path(kind: str, problem: str) -> None:
    document = builtin_document("ppo_cartpole")
    document["agent"]["network"] = {"kind": kind}
    with pytest.raises(SpecError, match=problem):
        validate_spec(document)


def test_kwargs_are_for_user_networks_only() -> None:
    assert NetworkSpec(kind="pkg.mod:Net", kwargs={"width": 3}).user
    with pytest.raises(ValueError, match='kwargs: are for a "module:factory" network, not mlp'):
        NetworkSpec(kwargs={"width": 3})


def _build(kind: str, seed: int = 0, **kwargs: Any) -> Any:
    from rlrun.algorithms import build_agent

    document = builtin_document("ppo_cartpole")
    document["agent"]["network"] = {"kind": kind, "kwargs": kwargs}
    spec = validate_spec(document)
    return build_agent(spec, spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), seed)


def test_a_user_network_is_built_from_the_seed_and_saved_as_weights_only(my_nets: None) -> None:
    agent = _build("my_nets:small_mlp", width=8)
    weights = agent.state_dict()["model"]
    assert weights["actor.module.1.weight"].shape == (8, 4) and weights["critic.module.3.weight"].shape == (1, 8)
    assert all(isinstance(value, torch.Tensor) for value in weights.values())
    again, other = _build("my_nets:small_mlp", width=8), _build("my_nets:small_mlp", seed=1, width=8)
    assert all(torch.equal(weights[k], again.state_dict()["model"][k]) for k in weights)
    assert not torch.equal(weights["actor.module.1.weight"], other.state_dict()["model"]["actor.module.1.weight"])
    assert agent.act(np.zeros((3, 4), np.float32)).shape == (3,)


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("no_such_module_xyz:Net", "cannot import no_such_module_xyz (ModuleNotFoundError"),
        ("my_nets:small_mpl", 'module my_nets has no small_mpl; did you mean "my_nets:small_mlp"'),
        ("my_nets:NotANetwork", "made a NotANetwork, not a torch nn.Module"),
        ("my_nets:WIDTH", "WIDTH = 16 is not a torch nn.Module class or a function that returns one"),
        (
            "my_nets:one_too_many",
            "returned a tensor of shape (2, 3) (torch.float32); it must return a float tensor of shape (2, 2)",
        ),
        ("my_nets:GoalNet", "calling it with (observation_space, 2, **agent.network.kwargs) raised TypeError"),
    ],
)
def test_a_user_network_that_cannot_serve_is_one_line(my_nets: None, kind: str, problem: str) -> None:
    with pytest.raises(BadInput) as refused:
        _build(kind)
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_changing_the_network_at_resume_is_refused() -> None:
    document = builtin_document("ppo_cartpole")
    document["agent"]["network"] = {"kind": "my_nets:GoalNet", "kwargs": {"width": 16}}
    old = validate_spec(document)
    for edit in ({"kind": "my_nets:small_mlp", "kwargs": {"width": 16}}, {"kind": "my_nets:GoalNet", "kwargs": {}}):
        document["agent"]["network"] = edit
        changes = check_edit(old, validate_spec(document), frame=1000)
        assert changes and all(not c.allowed and c.kind == "structural" for c in changes), changes
        assert {c.path for c in changes} <= {"agent.network.kind", "agent.network.kwargs"}
