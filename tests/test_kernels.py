"""`meta.kernels`: every kernel (`"auto"`) is held to autograd's bits (`"autograd"`) over whole tiny
trainings, in this process: PPO's and A2C's actor-critic kernel, DQN's MLP kernel, and SAC's at
arithmetic revision 1 (from revision 2 SAC's kernel rounds its products another way, by design:
tests/unit/test_sac_hand.py holds it to autograd up to that rounding). The comparison can fail: one
gradient one ulp off is caught. And the switch is record-only where the kernels are exact,
structural where one is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from same_run import assert_same_training, final_state

from rlrun import load_spec, train
from rlrun.algorithms import build_agent
from rlrun.envs import make_env
from rlrun.spec import Spec
from rlrun.spec.consistency import check_edit

SHORT = ["meta.eval_frequency=10k", "meta.num_eval_episodes=1", "meta.seed=4", "meta.torch_threads=1"]
CASES = {  # built-in: tiny settings that still take several gradient steps
    "ppo_cartpole": ["meta.max_frame=512", "meta.log_frequency=256", "agent.n_epochs=2", "agent.batch_size=64"],
    "a2c_cartpole": ["meta.max_frame=400", "meta.log_frequency=200"],
    "dqn_cartpole": ["meta.max_frame=400", "meta.log_frequency=200", "agent.learning_starts=100",
                     "agent.train_frequency=16", "agent.gradient_steps=4", "agent.batch_size=32"],
    "sac_pendulum": ["meta.max_frame=300", "meta.log_frequency=100", "agent.learning_starts=100",
                     "agent.batch_size=32", "agent.network.hidden=[32, 32]", "meta.arithmetic=1"],
}


def spec_of(name: str, kernels: str) -> Spec:
    return load_spec(name, [*SHORT, *CASES[name], f"meta.kernels={kernels}"])


def trained(home: Path, spec: Spec) -> dict:
    assert train(spec, home=home, handle_signals=False).status == "finished"
    return final_state(home)


def kernel_of(spec: Spec) -> object:
    env = make_env(spec.env)
    try:
        agent = build_agent(spec, env.observation_space, env.action_space, spec.meta.seed)
    finally:
        env.close()
    return getattr(agent, "hand", None) or getattr(agent, "hand_q", None)


@pytest.mark.parametrize("name", list(CASES))
def test_each_kernel_learns_autograds_bits(tmp_path: Path, name: str) -> None:
    assert kernel_of(spec_of(name, "auto")) is not None, "the kernel serves this built-in"
    assert kernel_of(spec_of(name, "autograd")) is None
    assert_same_training(trained(tmp_path / "auto", spec_of(name, "auto")),
                         trained(tmp_path / "autograd", spec_of(name, "autograd")))


def test_the_comparison_catches_one_gradient_one_ulp_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlrun.algorithms import dqn

    reference = trained(tmp_path / "autograd", spec_of("dqn_cartpole", "autograd"))
    stepped = dqn.apply_gradients

    def one_ulp_off(optimizer, grads, *args, **kwargs):  # type: ignore[no-untyped-def]
        flat = grads[0].view(-1)
        flat[0] = torch.from_numpy(np.nextafter(flat[0:1].numpy(), np.float32(np.inf)))[0]
        return stepped(optimizer, grads, *args, **kwargs)

    monkeypatch.setattr(dqn, "apply_gradients", one_ulp_off)
    perturbed = trained(tmp_path / "auto", spec_of("dqn_cartpole", "auto"))
    with pytest.raises(AssertionError):
        assert_same_training(reference, perturbed)


@pytest.mark.parametrize(("name", "arithmetic", "allowed"),
                         [("ppo_cartpole", 3, True), ("dqn_cartpole", 3, True), ("sac_pendulum", 1, True),
                          ("sac_pendulum", 2, False), ("sac_pendulum", 3, False)])
def test_switching_is_record_only_where_every_kernel_is_exact(name: str, arithmetic: int, allowed: bool) -> None:
    old = load_spec(name, [f"meta.arithmetic={arithmetic}"])
    new = load_spec(name, [f"meta.arithmetic={arithmetic}", "meta.kernels=autograd"])
    (change,) = check_edit(old, new, frame=1000)
    assert (change.path, change.allowed, change.kind) == \
        ("meta.kernels", allowed, "record-only" if allowed else "structural")
