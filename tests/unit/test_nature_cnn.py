"""The nature_cnn network: built by DQN, PPO and A2C for image observations, refused elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms import build_agent
from rlrun.algorithms.base import (
    KeptFrames,
    NatureCNN,
    ScalingConv2d,
    Step,
    TransposedWeights,
    channels_last_zeros,
    copy_into,
    network,
    take_rows,
)
from rlrun.algorithms.onpolicy import OnPolicyAgent
from rlrun.algorithms.optim import make_optimizer
from rlrun.arithmetic import revision
from rlrun.clock import Clock
from rlrun.spec import NetworkSpec, OptimizerSpec, load_spec
from rlrun.spec.schedules import Constant

FRAMES = spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACTIONS = spaces.Discrete(6)
NATURE = ["agent.network.kind=nature_cnn", "agent.network.hidden=[32]"]


@pytest.mark.parametrize(
    ("name", "edits"),
    [
        (
            "dqn_cartpole",
            [
                "agent.learning_starts=0",
                "agent.train_frequency=1",
                "agent.gradient_steps=1",
                "agent.batch_size=4",
                "agent.memory.capacity=100",
            ],
        ),
        ("ppo_cartpole", ["agent.n_steps=4", "agent.batch_size=4", "agent.n_epochs=1"]),
        ("a2c_cartpole", ["agent.n_steps=4"]),
    ],
)
def test_dqn_ppo_and_a2c_act_and_learn_on_frames(name: str, edits: list[str]) -> None:
    spec = load_spec(name, [*NATURE, *edits, "env.num_envs=2"])
    agent = build_agent(spec, FRAMES, ACTIONS, seed=0)
    before = [p.detach().clone() for p in _parameters(agent)]
    rng = np.random.default_rng(0)
    obs, clock = rng.integers(0, 256, (2, 4, 84, 84), dtype=np.uint8), Clock()
    for _ in range(4):
        actions = agent.act(obs)
        assert actions.shape == (2,) and ((actions >= 0) & (actions < 6)).all()
        next_obs = rng.integers(0, 256, (2, 4, 84, 84), dtype=np.uint8)
        agent.observe(Step(obs, actions, np.ones(2, np.float32), np.zeros(2, bool), np.zeros(2, bool), next_obs))
        clock.frame += 2
        agent.update(clock)
        obs = next_obs
    assert clock.opt_step > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, _parameters(agent), strict=True)), "nothing learned"
    assert agent.act(obs, deterministic=True).shape == (2,)


def _parameters(agent: object) -> list[torch.Tensor]:
    module = getattr(agent, "q", None) or agent.model  # type: ignore[attr-defined]
    return list(module.parameters())


def test_flat_float_rows_and_uint8_frames_give_the_same_values() -> None:
    """A replay memory may hold frames as flat float32 rows: the network reshapes and scales them alike."""
    torch.manual_seed(0)
    net = network(FRAMES, 6, NetworkSpec(kind="nature_cnn"))
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(net(frames), net(frames.reshape(3, -1).float()))


def test_nature_defaults_and_colour_frames() -> None:
    spec = NetworkSpec(kind="nature_cnn")
    assert (spec.hidden, spec.activation) == ([512], "relu")
    colour = NatureCNN(spaces.Box(0, 255, (4, 84, 84, 3), np.uint8), spec)
    assert colour.convolutions[0].in_channels == 12 and colour.width == 512
    assert colour(torch.zeros(2, 4, 84, 84, 3, dtype=torch.uint8)).shape == (2, 512)
    single = NatureCNN(spaces.Box(0, 255, (84, 84), np.uint8), spec)
    assert single(torch.zeros(2, 84, 84, dtype=torch.uint8)).shape == (2, 512)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (spaces.Box(-1, 1, (4,), np.float32), "needs image observations"),
        (spaces.Box(0, 255, (4, 20, 20), np.uint8), "at least 36×36"),
    ],
)
def test_what_is_not_a_frame_is_refused(space: spaces.Box, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        network(space, 2, NetworkSpec(kind="nature_cnn"))


def test_an_algorithm_without_it_says_so() -> None:
    spec = load_spec("reinforce_cartpole", NATURE)
    with pytest.raises(ValueError, match=r'use agent\.network\.kind = "mlp"'):
        build_agent(spec, FRAMES, ACTIONS, seed=0)


def test_the_fast_layouts_change_no_bit() -> None:
    """In-place ReLUs, the last one after Flatten's row-major copy, give the outputs and gradients
    of the plain ReLU → Flatten order over the same convolutions, bit for bit (arithmetic revision 1)."""
    torch.manual_seed(0)
    net = NatureCNN(FRAMES, NetworkSpec(kind="nature_cnn", hidden=[32]), arithmetic=revision(1))
    frames = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    conv1, conv2, conv3 = (net.convolutions[i] for i in (0, 2, 4))

    def plain(x: torch.Tensor) -> torch.Tensor:
        x = x.to(dtype=torch.float32, memory_format=torch.channels_last) * (1.0 / 255.0)
        x = torch.flatten(torch.relu(conv3(torch.relu(conv2(torch.relu(conv1(x)))))), 1)
        out: torch.Tensor = net.dense(x)
        return out

    grads = []
    for forward in (net, plain):
        net.zero_grad()
        out = forward(frames)
        out.square().sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in net.parameters() if p.grad is not None]))
    (fast_out, fast_grads), (plain_out, plain_grads) = grads
    assert torch.equal(fast_out, plain_out)
    assert len(fast_grads) == len(plain_grads) == 8
    assert all(torch.equal(a, b) for a, b in zip(fast_grads, plain_grads, strict=True))


def test_a_ppo_rollout_keeps_frames_as_the_convolutions_read_them() -> None:
    """Frames last in memory, so a minibatch is channels-last without a copy; in its snapshot, the
    same values in the plain row-major layout."""
    spec = load_spec("ppo_cartpole", [*NATURE, "agent.n_steps=4", "env.num_envs=2"])
    agent, again = (build_agent(spec, FRAMES, ACTIONS, seed=seed) for seed in (0, 1))
    assert isinstance(agent, OnPolicyAgent) and isinstance(again, OnPolicyAgent)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 2, 4, 84, 84), dtype=np.uint8)
    for obs in frames:
        agent.act(obs)
        agent.observe(Step(obs, np.zeros(2), np.ones(2, np.float32), np.zeros(2, bool), np.zeros(2, bool), obs))
    stored = torch.from_numpy(agent.rollout.obs).flatten(0, 1)
    assert stored[torch.tensor([5, 0, 3])].is_contiguous(memory_format=torch.channels_last)
    saved = agent.rollout.state_dict()["obs"]
    assert saved.is_contiguous() and np.array_equal(saved.numpy(), frames)
    again.rollout.load_state_dict(agent.rollout.state_dict())
    assert np.array_equal(again.rollout.obs[:3], frames)


@pytest.mark.parametrize("layout", ["channels_last", "row_major", "rows", "flat"])
def test_taking_rows_gathers_what_indexing_does(layout: str) -> None:
    """A minibatch gathered as whole (N, H, W, C) rows: the bytes and the memory layout of
    `batch[index]`, for a rollout's channels-last frames and for anything else; into a kept
    buffer, the same."""
    frames = torch.randint(0, 256, (7, 4, 9, 9), dtype=torch.uint8)
    batch = {
        "channels_last": frames.contiguous(memory_format=torch.channels_last),
        "row_major": frames,
        "rows": frames.flatten(1).float(),
        "flat": torch.arange(7),
    }[layout]
    index = torch.tensor([5, 0, 3, 3, 6])
    taken, indexed = take_rows(batch, index), batch[index]
    assert torch.equal(taken, indexed) and taken.dtype == indexed.dtype
    assert taken.stride() == indexed.stride()
    kept = torch.zeros_like(taken)
    into = take_rows(batch, index.flip(0), out=kept)
    assert into.data_ptr() == kept.data_ptr() and torch.equal(into, batch[index.flip(0)])
    assert into.stride() == indexed.stride()


def test_kept_frames_are_the_forward_passs_scaled_frames_bit_for_bit() -> None:
    """`KeptFrames` gives each minibatch the floats the forward pass would make of its frames (same
    values, same layout), into the same buffers every time, a shorter last minibatch included;
    the features of those floats are the forward pass's."""
    torch.manual_seed(0)
    net = NatureCNN(FRAMES, NetworkSpec(kind="nature_cnn", hidden=[32]))
    rollout = torch.randint(0, 256, (10, 84, 84, 4), dtype=torch.uint8).permute(0, 3, 1, 2)
    kept, buffers = KeptFrames(net), set()
    for index in (torch.tensor([7, 1, 4, 4]), torch.tensor([0, 9, 2, 5]), torch.tensor([3, 8])):
        floats = kept.take(rollout, index)
        made = net.scaled(rollout[index])
        assert torch.equal(floats, made) and floats.stride() == made.stride()
        assert torch.equal(net.of_scaled(floats), net(rollout[index]))
        buffers.add(floats.data_ptr())
    assert len(buffers) == 1, "a fresh tensor each minibatch"


@pytest.mark.parametrize("batch_size", [3, 8])
def test_ppo_on_kept_frames_learns_the_bits_of_the_forward_pass(batch_size: int) -> None:
    """A PPO update whose minibatches' frames are scaled into kept buffers learns what it learns
    when the network scales each minibatch itself: the same parameters, bit for bit (a rollout of
    8 split in minibatches of 3, the last one shorter; or one minibatch, scaled by the network)."""
    spec = load_spec(
        "ppo_cartpole",
        [*NATURE, "agent.n_steps=4", "env.num_envs=2", "agent.n_epochs=2", f"agent.batch_size={batch_size}"],
    )
    kept, plain = (build_agent(spec, FRAMES, ACTIONS, seed=0) for _ in range(2))
    assert isinstance(kept, OnPolicyAgent) and isinstance(plain, OnPolicyAgent)
    assert kept.frames is not None  # type: ignore[attr-defined]
    plain.frames = None  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (5, 2, 4, 84, 84), dtype=np.uint8)
    rewards = rng.random((4, 2)).astype(np.float32)
    learned = []
    for agent in (kept, plain):
        clock = Clock()
        for obs, next_obs, reward in zip(frames[:-1], frames[1:], rewards, strict=True):
            agent.act(obs)
            agent.observe(Step(obs, np.zeros(2), reward, np.zeros(2, bool), np.zeros(2, bool), next_obs))
            clock.frame += 2
        metrics = agent.update(clock)
        learned.append((metrics, [p.detach().clone() for p in agent.model.parameters()]))
    (metrics_a, params_a), (metrics_b, params_b) = learned
    assert clock.opt_step == (6 if batch_size == 3 else 2)
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b, strict=True))
    assert str(metrics_a) == str(metrics_b)


def test_acting_features_are_the_forward_pass_bit_for_bit() -> None:
    """`act` (inference mode, row-major frames transposed as bytes) gives the features of the
    plain forward pass (autograd on, the frames converted and transposed in one pass), in
    arithmetic revision 1."""
    torch.manual_seed(0)
    net = NatureCNN(FRAMES, NetworkSpec(kind="nature_cnn"), arithmetic=revision(1))
    frames = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    scaled = frames.to(dtype=torch.float32, memory_format=torch.channels_last) * (1.0 / 255.0)
    plain = net.dense(net.convolutions(scaled))
    acted = net.act(frames)
    assert acted.is_inference() and not acted.requires_grad
    assert torch.equal(acted, plain.detach())
    assert torch.equal(net.act(frames.contiguous(memory_format=torch.channels_last)), acted)


def test_revision_2_computes_revision_1s_function_rounded_otherwise() -> None:
    """Arithmetic revision 2 folds the frames' scaling into the first convolution and acts with
    transposed dense weights: the same parameters (names, layouts, initial values) as revision 1,
    the same outputs and gradients up to rounding. Whether the rounding shows depends on the CPU's
    kernels, so only the structure says the revisions differ (no test asserts that bits differ)."""
    spec = NetworkSpec(kind="nature_cnn")
    frames = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    nets = []
    for arithmetic in (1, 2):
        torch.manual_seed(0)
        nets.append(NatureCNN(FRAMES, spec, arithmetic=revision(arithmetic)))
    old, new = nets
    assert (type(old.convolutions[0]), type(new.convolutions[0])) == (nn.Conv2d, ScalingConv2d)
    assert old.acting_dense is None and isinstance(new.acting_dense, TransposedWeights)
    assert old.state_dict().keys() == new.state_dict().keys()
    assert all(
        torch.equal(a, b) and a.stride() == b.stride()
        for a, b in zip(old.state_dict().values(), new.state_dict().values(), strict=True)
    )
    outputs, grads = [], []
    for net in nets:
        out = net(frames)
        out.square().sum().backward()
        outputs.append(out.detach())
        grads.append([p.grad for p in net.parameters()])
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(grads[0], grads[1], strict=True):
        assert a is not None and b is not None
        # Sums of thousands of products in another order: an element near zero can differ by
        # more than any fixed elementwise tolerance, so the gradient is compared as a whole.
        assert torch.linalg.vector_norm(b - a) <= 1e-4 * torch.linalg.vector_norm(a)
    torch.testing.assert_close(new.act(frames), outputs[1], rtol=1e-5, atol=1e-6)


def test_acting_on_transposed_weights_follows_every_change_of_the_weights() -> None:
    """Revision 2's acting copies of the dense weights are made again after an in-place step (an
    optimiser's: rlrun's fused Adam) and after `load_state_dict`: acting always reads the current weights."""
    spec, frames = (
        NetworkSpec(kind="nature_cnn", hidden=[32, 16]),
        torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8),
    )
    torch.manual_seed(0)
    net, other = NatureCNN(FRAMES, spec, arithmetic=revision(2)), NatureCNN(FRAMES, spec, arithmetic=revision(2))

    def fresh_act() -> torch.Tensor:  # a network that never acted before: copies made now
        again = NatureCNN(FRAMES, spec, arithmetic=revision(2))
        again.load_state_dict(net.state_dict())
        return again.act(frames)

    before = net.act(frames)
    optimizer = make_optimizer(OptimizerSpec(lr=Constant(value=0.1)), list(net.parameters()), 100)  # fused Adam
    net(frames).sum().backward()
    optimizer.step()
    stepped = net.act(frames)
    assert not torch.equal(stepped, before) and torch.equal(stepped, fresh_act())
    net.load_state_dict(other.state_dict())
    assert torch.equal(net.act(frames), other.act(frames)) and torch.equal(net.act(frames), fresh_act())


@pytest.mark.parametrize("writeable", [True, False])
def test_copying_frames_into_a_rollout_is_numpys_assignment(writeable: bool) -> None:
    """Row-major frames copied into a channels-last rollout by torch: the bytes NumPy's assignment
    writes (and NumPy's own assignment for what torch cannot take: a read-only array, other dtypes)."""
    frames = np.random.default_rng(0).integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    frames.flags.writeable = writeable
    by_copy, by_numpy = (channels_last_zeros((2, 3), (4, 84, 84), np.uint8) for _ in range(2))
    copy_into(by_copy[1], frames)
    by_numpy[1] = frames
    assert np.array_equal(by_copy, by_numpy) and by_copy.strides == by_numpy.strides
    values = np.zeros((2, 3), np.float32)
    copy_into(values[1], np.array([1, 2, 3], np.float32))
    assert values[1].tolist() == [1, 2, 3] and not values[0].any()
