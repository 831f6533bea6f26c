"""`meta.kernels`: every registered kernel (`rlrun.algorithms.kernels.KERNELS`, `"auto"`) is held to
autograd's bits (`"autograd"`) over whole tiny trainings of its examples, in this process: PPO's and
A2C's actor-critic kernel, DQN's Q-network kernel, and SAC's at arithmetic revision 1 (from
revision 2 SAC's kernel rounds its products another way, by design: tests/unit/test_sac_hand.py
holds it to autograd up to that rounding). The comparison can fail: one
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
from rlrun.algorithms.kernels import KERNELS
from rlrun.arithmetic import REVISIONS
from rlrun.envs import make_env
from rlrun.spec import Spec
from rlrun.spec.consistency import check_edit

SHORT = ["meta.eval_frequency=10k", "meta.num_eval_episodes=1", "meta.seed=4", "meta.torch_threads=1"]


def frames(edits: tuple[str, ...]) -> int:
    return next(int(edit.split("=")[1]) for edit in edits if edit.startswith("meta.max_frame="))


EXAMPLES = {
    f"{kernel.name}-{spec}": (spec, [*edits, f"meta.log_frequency={frames(edits) // 2}"])
    for kernel in KERNELS
    for spec, edits in kernel.examples
}


def spec_of(example: str, kernels: str) -> Spec:
    spec, edits = EXAMPLES[example]
    return load_spec(spec, [*SHORT, *edits, f"meta.kernels={kernels}"])


def trained(home: Path, spec: Spec) -> dict:
    assert train(spec, home=home, handle_signals=False).status == "finished"
    return final_state(home)


def kernel_of(spec: Spec) -> object:
    env = make_env(spec.env)
    try:
        agent = build_agent(spec, env.observation_space, env.action_space, spec.meta.seed)
    finally:
        env.close()
    learner = agent.learner  # type: ignore[attr-defined]
    return learner if type(learner).__module__.startswith("rlrun.algorithms.kernels.") else None


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_each_kernel_learns_autograds_bits(tmp_path: Path, example: str) -> None:
    assert kernel_of(spec_of(example, "auto")) is not None, "the kernel serves its example"
    assert kernel_of(spec_of(example, "autograd")) is None
    assert_same_training(
        trained(tmp_path / "auto", spec_of(example, "auto")),
        trained(tmp_path / "autograd", spec_of(example, "autograd")),
    )


def test_the_declared_flags_are_the_exactness_rule() -> None:
    """A kernel that reads an arithmetic flag rounds differently where a revision sets it: what
    `Arithmetic.kernel_is_autograd` says, and so what the consistency rule reads."""
    for arithmetic in REVISIONS.values():
        for kernel in KERNELS:
            for algorithm in kernel.algorithms:
                assert arithmetic.kernel_is_autograd(algorithm) == (
                    not any(getattr(arithmetic, flag) for flag in kernel.flags)
                )


def test_the_comparison_catches_one_gradient_one_ulp_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlrun.algorithms.kernels import q_network

    example = next(name for name in EXAMPLES if name.startswith("q_network-"))
    reference = trained(tmp_path / "autograd", spec_of(example, "autograd"))
    stepped = q_network.apply_gradients

    def one_ulp_off(optimizer, grads, *args, **kwargs):
        flat = grads[0].view(-1)
        flat[0] = torch.from_numpy(np.nextafter(flat[0:1].numpy(), np.float32(np.inf)))[0]
        return stepped(optimizer, grads, *args, **kwargs)

    monkeypatch.setattr(q_network, "apply_gradients", one_ulp_off)
    perturbed = trained(tmp_path / "auto", spec_of(example, "auto"))
    with pytest.raises(AssertionError):
        assert_same_training(reference, perturbed)


@pytest.mark.parametrize(
    ("name", "arithmetic", "allowed"),
    [
        ("ppo_cartpole", 3, True),
        ("dqn_cartpole", 3, True),
        ("sac_pendulum", 1, True),
        ("sac_pendulum", 2, False),
        ("sac_pendulum", 3, False),
    ],
)
def test_switching_is_record_only_where_every_kernel_is_exact(name: str, arithmetic: int, allowed: bool) -> None:
    old = load_spec(name, [f"meta.arithmetic={arithmetic}"])
    new = load_spec(name, [f"meta.arithmetic={arithmetic}", "meta.kernels=autograd"])
    (change,) = check_edit(old, new, frame=1000)
    assert (change.path, change.allowed, change.kind) == (
        "meta.kernels",
        allowed,
        "record-only" if allowed else "structural",
    )
