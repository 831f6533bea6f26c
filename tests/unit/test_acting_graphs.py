"""Every built-in's acting graph (`ActingGraph`, what `rlrun export` writes and `export --check`
replays) without training: one tensor per name in `outputs`, as a tuple, the action first, for a
batch of observations; and that action is the actor's greedy one, row for row. (TD3+BC's and IQL's
graph once gave its action bare, so the exports, which take the first output, took the first row.)"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlrun.algorithms import build_agent
from rlrun.enjoy.graph import acting_graph
from rlrun.spec import builtin_document, builtin_names, validate_spec

CLASSIC = ("CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCarContinuous-v0")
NAMES = [name for name in builtin_names() if builtin_document(name)["env"]["id"] in CLASSIC]


@pytest.mark.parametrize("name", NAMES)
def test_the_graph_gives_each_output_for_a_batch_the_action_first(name: str) -> None:
    spec = validate_spec(builtin_document(name))
    env = gym.make(spec.env.id)
    agent = build_agent(spec, env.observation_space, env.action_space, seed=3)
    actor = agent.actor
    if actor.state_shape is not None:
        pytest.skip("a graph with a memory takes a state too (tests/test_policy_export.py)")
    observations = np.stack([env.observation_space.sample() for _ in range(3)]).astype(env.observation_space.dtype)
    graph = acting_graph(actor, None).eval()
    with torch.no_grad():
        out = graph(torch.from_numpy(observations))
    assert isinstance(out, tuple) and len(out) == len(graph.outputs) and graph.outputs[0] == "action"
    assert all(len(tensor) == 3 for tensor in out)
    greedy = actor.step(observations, None, deterministic=True)[0]
    assert np.allclose(out[0].numpy().reshape(greedy.shape), greedy, atol=1e-6), name
