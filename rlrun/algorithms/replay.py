"""Replay memory for off-policy algorithms: each observation frame stored once, in the env's dtype.

Two rings, both append-only logs (`rlrun.snapshot.Log`): items are numbered from the first ever
added, item i lives at slot i % capacity, and an item never changes once added.

- `frames`: single frames in the env's own dtype (uint8 pixels stay uint8). With `frame_stack` N > 1
  (the env stacks its last N observations on a new first axis) a frame is one slice of that axis.
- `rows`: one per transition, vector-env copies interleaved (row k·num_envs + e is copy e's k-th
  step): the action, reward, `terminated`, and the *numbers* of the frames it is made of: its
  observation's N frames, and the newest frame of the observation it led to. The next observation
  is the observation's frames shifted by one plus that newest frame; for a transition that ended
  an episode (terminated or truncated) that frame is the final observation's, which the env
  replaced by the next episode's first (`envs.true_next_obs`), so it is added as a frame of its own.

Per step each copy adds one frame (its next observation's newest); a copy whose episode just ended
adds its new first observation too (its frames, an equal run stored once: the stack repeats the
reset observation). So the frame ring holds `capacity + capacity // 16 + 2·num_envs·(N + 1)`
frames, room for one episode end every 16 steps on average beyond one frame per row.

Which rows may be sampled: a row whose oldest frame has been overwritten (its number is below
`frames_end - frame_capacity`) is never returned; with episodes shorter than ~16 steps on average
a few of the oldest rows are excluded. `sample` draws slots uniformly with the agent's generator
and redraws, with the same generator, the ones that are excluded, so a batch is uniform over the
rows that can be sampled and depends only on the generator's state and the memory's contents.

n-step returns (`n_step` > 1) are formed when a batch is drawn, by one rule for transitions and
sequences alike (`_windows`): a drawn row's window runs over the rows that follow it for its copy
(row r + k·num_envs) and stops after n rows, at an episode's end (where the next row's observation
is not this one's next: a termination or a truncation), at the newest row added (a window still open
is cut there and bootstraps from the newest row's next observation, as Stable-Baselines3's n-step
buffer does), or at a sequence's end. A batch carries each window's discounted rewards, its
bootstrap's discount and its last row's `terminated`: a learner's TD target is
`rewards + discounts · (1 − terminated) · V(last next observation)` whatever drew it. Nothing n-step
is stored: the rows and their snapshots are the one-step memory's (so they stay append-only and
incremental, and the agent holds no queue of pending steps to snapshot), and a batch is a function
of the memory's contents. The sums keep the rounding each batch has always had (`_returns`):
transitions' in float64, sequences' accumulated in float32 (R2D2's), so old runs keep their bits.

Batches are typed (as Stable-Baselines3's `ReplayBufferSamples`): `Transitions` (`batch`,
`sample_batches`, `draw_prioritized`) and `Sequences` (`sequences`). `sample` hands SAC the same
transitions as a dict of tensors.

Prioritised replay (`spec.prioritized`, Schaul et al., 2016, proportional) keeps p^alpha for each
slot in a `SumTree`; a new row gets the largest priority seen so far, and the agent sets the
priorities of the rows it learnt from (`set_priorities`). A batch is drawn stratified: one number
from the agent's generator in each of batch_size equal parts of the total.

A recurrent agent's memory (`state_shape`) keeps a third ring, `states`, row for row with `rows`:
the hidden state the agent acted from at each row, float32, itself an append-only log. `sequences`
draws R2D2's batches from it: consecutive rows of one env copy (row r + k·num_envs, the windows of
n-step returns made longer) with the state stored at the first.

A snapshot holds the rings as two logs (three with `states`), written incrementally (`rlrun.snapshot.logs`), and the
counters; with prioritised replay, the priorities too, whole (capacity × 8 bytes: old rows'
priorities change, so they are no log). Snapshots of format 1 held `obs`, `next_obs` (float32,
flattened), `actions`, `rewards`, `terminated` as whole arrays; `load_state_dict` still reads them (`_load_format_1`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from rlrun.spec import MemorySpec

BATCH_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")
LOGS = ("rows", "frames")

BatchView = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
"""What a learner sees of a batch's arrays ("obs", "next_obs", "rewards": the env's own, per row;
elementwise): the env's normalisation's (`rlrun.envs.normalize.Normalizer.batch`)."""


class Transitions(NamedTuple):
    """A batch of transitions, row for row (a leading (count, batch) with `sample_batches`).
    With n-step returns, "rewards" are each window's discounted sum, "next_obs" and "terminated"
    its last row's, and "discounts" gamma^(rows in the window); at n_step 1, "discounts" is None
    (the learner's gamma: the number, as it always was)."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    discounts: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    """Prioritised replay's importance-sampling weights, (N·P(i))^−beta over their largest."""

    def to(self, device: torch.device) -> Transitions:
        """The batch on the device the networks learn on (on the CPU: itself, not a copy)."""
        return self if device.type == "cpu" else self.map(lambda value: value.to(device))

    def map(self, function: Callable[[torch.Tensor], torch.Tensor]) -> Transitions:
        """`function` of every tensor (None stays None)."""
        return Transitions._make(None if value is None else function(value) for value in self)


class Sequences(NamedTuple):
    """A recurrent agent's batch (R2D2's), step-major: `batch` sequences of `length` consecutive
    rows of one env copy, the first `burn_in` steps only warming the state up. The fields from
    "actions" on are the learning steps' (the `length − burn_in` after the burn-in): their n-step
    windows (the memory's one rule) and which are learnt from."""

    obs: torch.Tensor
    """(length + 1, batch, *obs): position k + 1 is what row k led to (the next row's observation
    or, after the last valid row, that row's next observation)."""
    starts: torch.Tensor
    """(length + 1, batch) float32: 1 where a position's observation is a new episode's first."""
    valid: torch.Tensor
    """(length, batch): False past the copy's newest row (the last valid row repeated)."""
    states: torch.Tensor
    """(parts, batch, size): the memory the agent acted from at each first row."""
    actions: torch.Tensor
    rewards: torch.Tensor
    """Each learning step's window's discounted rewards."""
    discounts: torch.Tensor
    """gamma^(steps in the window), float32."""
    terminated: torch.Tensor
    """The window's last step's."""
    last: torch.Tensor
    """int64: the learning step each window ends at, whose next observation it bootstraps from."""
    learnt: torch.Tensor
    """Valid steps whose bootstrap is known (not a truncation the sequence runs past)."""
    weights: torch.Tensor | None = None
    """(batch,): prioritised replay's importance-sampling weights."""

    def to(self, device: torch.device) -> Sequences:
        if device.type == "cpu":
            return self
        return Sequences._make(None if value is None else value.to(device) for value in self)


class SumTree:
    """Non-negative priorities of `capacity` slots, each inner node the sum of its two children,
    for drawing a slot with probability proportional to its priority (Schaul et al., 2016).

    Every inner node is always recomputed as left + right (never adjusted by a difference), so the
    tree is a function of its leaves alone: rebuilt from the leaves a snapshot holds, it has the
    same bits. float64 throughout."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.base = 1 << max(capacity - 1, 0).bit_length()
        """Leaves' offset: slot i is node base + i (node 1 the root)."""
        self.nodes = np.zeros(2 * self.base, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        return self.nodes[self.base : self.base + self.capacity]

    def set(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Set `slots`' priorities (a slot given twice takes its last), and their ancestors' sums."""
        slots = np.asarray(slots, dtype=np.int64)
        last = len(slots) - 1 - np.unique(slots[::-1], return_index=True)[1]
        nodes = slots[last] + self.base
        self.nodes[nodes] = np.asarray(priorities, dtype=np.float64)[last]
        while nodes[0] > 1:
            nodes = np.unique(nodes // 2)
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def load(self, leaves: np.ndarray) -> None:
        """All priorities at once (a snapshot's), every sum recomputed as `set` forms it."""
        self.nodes[:] = 0.0
        self.leaves[:] = leaves
        level = self.base
        while level > 1:
            parents = np.arange(level // 2, level)
            self.nodes[parents] = self.nodes[2 * parents] + self.nodes[2 * parents + 1]
            level //= 2

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each number in [0, total), the slot where the running sum of priorities passes it.
        One that rounding carries past the last non-zero leaf lands on an empty slot (the caller
        moves it to the last one filled: `ReplayMemory._proportional`)."""
        mass = np.array(mass, dtype=np.float64)
        nodes = np.ones(len(mass), dtype=np.int64)
        while nodes[0] < self.base:
            left = 2 * nodes
            left_sum = self.nodes[left]
            right = mass >= left_sum
            mass = np.where(right, mass - left_sum, mass)
            nodes = np.where(right, left + 1, left)
        return nodes - self.base


class ReplayMemory:
    def __init__(
        self,
        spec: MemorySpec,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype[Any],
        action_shape: tuple[int, ...],
        action_dtype: np.dtype[Any],
        *,
        num_envs: int = 1,
        frame_stack: int = 1,
        n_step: int = 1,
        gamma: float = 1.0,
        state_shape: tuple[int, ...] | None = None,
    ) -> None:
        self.spec, self.num_envs, self.stack = spec, num_envs, frame_stack
        self.n_step, self.gamma = n_step, gamma
        """Rewards each drawn transition sums (and their discount): a batch's n-step returns."""
        self.obs_shape = tuple(obs_shape)
        self.frame_shape = self.obs_shape[1:] if frame_stack > 1 else self.obs_shape
        if frame_stack > 1 and self.obs_shape[:1] != (frame_stack,):
            raise ValueError(f"observations of shape {obs_shape} are not stacks of {frame_stack} frames")
        self.capacity = spec.capacity
        self.frame_capacity = self.capacity + self.capacity // 16 + 2 * num_envs * (frame_stack + 1)
        # np.zeros maps untouched pages lazily: a large memory costs RAM as it fills.
        self.frames = np.zeros((self.frame_capacity, *self.frame_shape), dtype=obs_dtype)
        self.rows = np.zeros(
            self.capacity,
            dtype=np.dtype(
                [
                    ("obs", np.int64, (frame_stack,)),
                    ("next", np.int64),
                    ("action", action_dtype, action_shape),
                    ("reward", np.float32),
                    ("terminated", np.float32),
                ]
            ),
        )
        self.states = None if state_shape is None else np.zeros((self.capacity, *state_shape), dtype=np.float32)
        """A recurrent agent's: the hidden state it acted from at each row (a third log, row for row
        with `rows`); None for an agent without a memory."""
        self.rows_end = 0
        """Rows ever added; the next goes to slot rows_end % capacity."""
        self.frames_end = 0
        self.stacks = np.zeros((num_envs, frame_stack), dtype=np.int64)
        """Frame numbers of each copy's current observation (valid where `known`)."""
        self.known = np.zeros(num_envs, dtype=bool)
        """False before a copy's first step and after its episode ended: its observation is new."""
        self.view: BatchView | None = None
        """What the learner sees of a batch (`BatchView`), set by whoever owns the env's
        normalisation (the session loop, `rlrun.envs.normalize`): the memory keeps the env's own
        observations and rewards; None: the learner sees them as they are."""
        self.priorities = SumTree(self.capacity) if spec.prioritized is not None else None
        """p^alpha of each slot, for prioritised replay; None: uniform."""
        self.max_priority = 1.0
        """The largest p^alpha set so far: a new row's (Schaul et al.: 1 before any)."""

    @property
    def size(self) -> int:
        return min(self.rows_end, self.capacity)

    # -- adding ---------------------------------------------------------------------------------

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        states: np.ndarray | None = None,
    ) -> None:
        """Add one transition per vector-env copy (a batch along the first axis); `next_obs` is
        the true next observation (the final one where an episode ended); `states`, a recurrent
        agent's memory it acted from (parts, copies, size)."""
        for copy in np.flatnonzero(~self.known):
            self.stacks[copy] = self._add_observation(obs[copy])
        count = len(rewards)
        slots = np.arange(self.rows_end, self.rows_end + count) % self.capacity
        next_frames = self._add_frames(self._newest(next_obs))
        rows = self.rows
        rows["obs"][slots], rows["next"][slots], rows["action"][slots] = self.stacks, next_frames, actions
        rows["reward"][slots], rows["terminated"][slots] = rewards, terminated
        if self.states is not None:
            assert states is not None
            self.states[slots] = np.swapaxes(states, 0, 1)
        if self.priorities is not None:
            self.priorities.set(slots, np.full(count, self.max_priority))
        self.rows_end += count
        self.stacks[:, :-1] = self.stacks[:, 1:]
        self.stacks[:, -1] = next_frames
        self.known = ~(np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool))

    def _newest(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, -1] if self.stack > 1 else obs

    def _add_frames(self, frames: np.ndarray) -> np.ndarray:
        numbers = np.arange(self.frames_end, self.frames_end + len(frames))
        self.frames[numbers % self.frame_capacity] = frames
        self.frames_end += len(frames)
        return numbers

    def _add_observation(self, obs: np.ndarray) -> np.ndarray:
        """Add a copy's new observation (an episode's first, or the first this memory sees) and
        return its frame numbers; a run of equal frames (a reset stack) is stored once."""
        if self.stack == 1:
            return self._add_frames(obs[None])
        numbers = np.empty(self.stack, dtype=np.int64)
        for k in range(self.stack):
            same = k > 0 and np.array_equal(obs[k], obs[k - 1])
            numbers[k] = numbers[k - 1] if same else self._add_frames(obs[k : k + 1])[0]
        return numbers

    # -- sampling -------------------------------------------------------------------------------

    def sampleable(self, slots: np.ndarray) -> np.ndarray:
        """Which slots hold a row whose frames are all still in the frame ring."""
        return self.rows["obs"][slots, 0] >= self.frames_end - self.frame_capacity

    def sample(self, batch_size: int, generator: torch.Generator) -> Transitions:
        """A uniform batch (with replacement) over the rows that can be sampled, drawn with the
        agent's generator: excluded slots are drawn again until none is left (SAC's)."""
        return self.batch(self._draw(batch_size, generator))

    def sample_batches(self, count: int, batch_size: int, generator: torch.Generator) -> Transitions:
        """`count` batches stacked along a new first axis: the ones `count` calls of `sample` draw
        (the same draws of the generator, in the same order), gathered in one pass, since the
        memory does not change between them."""
        slots = np.concatenate([self._draw(batch_size, generator) for _ in range(count)])
        return self.batch(slots).map(lambda value: value.reshape(count, batch_size, *value.shape[1:]))

    def draw(self, batch_size: int, generator: torch.Generator) -> np.ndarray:
        """`sample`'s slots alone."""
        return self._draw(batch_size, generator)

    def _draw(self, batch_size: int, generator: torch.Generator) -> np.ndarray:
        slots = torch.randint(self.size, (batch_size,), generator=generator).numpy()
        if self.frames_end <= self.frame_capacity:  # no frame overwritten yet: every row can be sampled
            return slots
        while not (ok := self.sampleable(slots)).all():
            redraw = np.flatnonzero(~ok)
            slots[redraw] = torch.randint(self.size, (len(redraw),), generator=generator).numpy()
        return slots

    def draw_prioritized(
        self, batch_size: int, generator: torch.Generator, beta: float
    ) -> tuple[np.ndarray, Transitions]:
        """A prioritised batch and the slots it holds: slot i drawn with probability P(i) = p_i^alpha /
        Σ p^alpha, stratified (one uniform number from the agent's generator in each of batch_size
        equal parts of the total); excluded slots are drawn again, each from the whole total. The
        batch's `weights` are the importance-sampling weights (N·P(i))^−beta over their largest."""
        slots, weights = self.draw_prioritized_slots(batch_size, generator, beta)
        return slots, self.batch(slots)._replace(weights=torch.from_numpy(weights))

    def draw_prioritized_slots(
        self, batch_size: int, generator: torch.Generator, beta: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """`draw_prioritized`'s slots and importance-sampling weights (float32) alone."""
        assert self.priorities is not None
        total = self.priorities.total
        uniform = torch.rand(batch_size, generator=generator, dtype=torch.float64).numpy()
        slots = self._proportional((np.arange(batch_size) + uniform) * (total / batch_size))
        if self.frames_end > self.frame_capacity:
            while not (ok := self.sampleable(slots)).all():
                redraw = np.flatnonzero(~ok)
                again = torch.rand(len(redraw), generator=generator, dtype=torch.float64).numpy()
                slots[redraw] = self._proportional(again * total)
        weights = (self.size * (self.priorities.leaves[slots] / total)) ** -beta
        return slots, (weights / weights.max()).astype(np.float32)

    def _proportional(self, mass: np.ndarray) -> np.ndarray:
        """The slots where the priorities' running sum passes each of `mass` (one rounded past the
        last row filled gets that row)."""
        assert self.priorities is not None
        return np.minimum(self.priorities.find(mass), self.size - 1)

    def set_priorities(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """The rows in `slots` were learnt from with these TD errors: their priorities become
        (|δ| + epsilon)^alpha."""
        assert self.priorities is not None and self.spec.prioritized is not None
        spec = self.spec.prioritized
        priorities = (np.abs(np.asarray(td_errors, dtype=np.float64)) + spec.epsilon) ** spec.alpha
        self.priorities.set(slots, priorities)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def batch(self, slots: np.ndarray) -> Transitions:
        """The transitions in `slots` (which must be sampleable), observations in the env's dtype
        and shape, n-step windows made (`Transitions`)."""
        rows = self.rows[slots]
        if self.n_step == 1:
            last, rewards, steps = rows, rows["reward"], None
        else:
            ends, steps = self._windows(self.row_numbers(slots), self.rows_end)
            last, rewards = self.rows[ends % self.capacity], self._window_rewards(ends, steps)
        frames = rows["obs"]
        following = np.concatenate([last["obs"][:, 1:], last["next"][:, None]], axis=1)
        shape = (len(slots), *self.obs_shape)
        batch = {
            "obs": self.frames[frames % self.frame_capacity].reshape(shape),
            "actions": np.ascontiguousarray(rows["action"]),
            "rewards": np.ascontiguousarray(rewards),
            "next_obs": self.frames[following % self.frame_capacity].reshape(shape),
            "terminated": np.ascontiguousarray(last["terminated"]),
        }
        if self.view is not None:
            batch = self.view(batch)  # elementwise on rewards: each of a window's, before the sum
        discounts = None
        if steps is not None:
            batch["rewards"], discounts = self._returns(batch["rewards"], steps)
        fields = [torch.from_numpy(batch[name]) for name in BATCH_FIELDS]
        return Transitions._make([*fields, None if discounts is None else torch.from_numpy(discounts), None])

    def sequences(
        self, slots: np.ndarray, length: int, burn_in: int = 0, weights: np.ndarray | None = None
    ) -> Sequences:
        """A recurrent agent's batch (R2D2's, `Sequences`): from each of `slots` (which must be
        sampleable), `length` consecutive rows of its env copy (rows r, r + num_envs, …) and the
        memory the agent acted from at the first. A sequence runs on across an episode's end
        ("starts": where the learner zeroes its state, as the agent did) and stops at its copy's
        newest row. A learning step whose episode was truncated while the sequence goes on into
        the next is not learnt from: its final observation is in no position. `weights`:
        prioritised replay's, carried along."""
        rows, n = self.rows, self.num_envs
        first = self.row_numbers(slots)
        numbers = first[None] + n * np.arange(length)[:, None]
        valid = numbers < self.rows_end
        numbers = np.minimum(numbers, first + n * (valid.sum(axis=0) - 1))  # valid rows are a prefix
        seq = rows[numbers % self.capacity]
        following = np.concatenate([seq["obs"][..., 1:], seq["next"][..., None]], axis=-1)
        frames = np.empty((length + 1, len(slots), self.stack), dtype=np.int64)
        frames[0], frames[-1] = seq["obs"][0], following[-1]
        frames[1:-1] = np.where(valid[1:, :, None], seq["obs"][1:], following[:-1])
        starts = np.zeros((length + 1, len(slots)), dtype=np.float32)
        starts[1:-1] = valid[1:] & (seq["obs"][1:, :, -1] != seq["next"][:-1])
        obs = self.frames[frames % self.frame_capacity].reshape(-1, *self.obs_shape)
        batch = {"obs": obs, "next_obs": obs[:0], "rewards": np.ascontiguousarray(seq["reward"])}
        if self.view is not None:
            batch = self.view(batch)
        # the learning steps' windows, by the transitions' rule, bounded by the sequence's end too
        learning = numbers[burn_in:]
        _, steps = self._windows(learning, np.minimum(self.rows_end, first + n * length)[None])
        position = np.arange(burn_in, length)[:, None]
        last = position + steps - 1  # the learning step each window ends at (itself past the newest row)
        column = np.arange(len(slots))[None]
        cut = (starts[1:] == 1) & (seq["terminated"] == 0)
        returns, discounts = self._running_returns(batch["rewards"], position, steps)
        assert self.states is not None
        fields = (
            batch["obs"].reshape(length + 1, len(slots), *self.obs_shape),
            starts,
            valid,
            np.swapaxes(self.states[slots], 0, 1),
            seq["action"][burn_in:],
            returns,
            discounts,
            seq["terminated"][last, column],
            last - burn_in,
            valid[burn_in:] & ~cut[last, column],
        )
        tensors = [torch.from_numpy(np.ascontiguousarray(value)) for value in fields]
        return Sequences._make([*tensors, None if weights is None else torch.from_numpy(weights)])

    def _windows(self, numbers: np.ndarray, limit: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        """The n-step rule: each window's last row number and its length in rows, from rows
        `numbers` (counted from the first ever added). A window continues into its copy's next row
        (row r + num_envs) while that row is below `limit` (the rows added; a sequence's end) and
        its observation ends with this one's next frame: a copy whose episode ended (terminated or
        truncated) starts its next row from a new observation."""
        capacity, rows = self.capacity, self.rows
        current = numbers
        going = np.ones(numbers.shape, dtype=bool)
        steps = np.ones(numbers.shape, dtype=np.int64)
        for _ in range(1, self.n_step):
            following = current + self.num_envs
            going &= following < limit
            there = np.where(going, following, current) % capacity
            going &= rows["obs"][there, -1] == rows["next"][current % capacity]
            current = np.where(going, following, current)
            steps += going
        return current, steps

    def _window_rewards(self, ends: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Each window's rewards (batch × n_step, 0 past its end), from its last row and length."""
        k = np.arange(self.n_step)
        numbers = ends[:, None] - self.num_envs * (steps[:, None] - 1 - k)
        return np.where(k < steps[:, None], self.rows["reward"][numbers % self.capacity], 0.0).astype(np.float32)

    def row_numbers(self, slots: np.ndarray) -> np.ndarray:
        """The number (counted from the first ever added) of the row each slot holds."""
        if self.rows_end <= self.capacity:
            return np.asarray(slots, dtype=np.int64)
        return self.rows_end - self.capacity + (np.asarray(slots, dtype=np.int64) - self.rows_end) % self.capacity

    def _returns(self, rewards: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Transitions' windows' rewards (batch × n_step) summed, discounted (float64 sums, float32
        results), and the discount of their bootstrap, gamma^length."""
        window = np.arange(self.n_step) < steps[:, None]
        powers = self.gamma ** np.arange(self.n_step, dtype=np.float64)
        returns = (np.where(window, rewards, 0.0).astype(np.float64) * powers).sum(axis=1)
        return returns.astype(np.float32), (self.gamma ** steps.astype(np.float64)).astype(np.float32)

    def _running_returns(
        self, rewards: np.ndarray, position: np.ndarray, steps: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sequences' windows' discounted rewards and bootstrap discounts, accumulated step by step
        in float32 (R2D2's rounding): the window of the learning step at `position` sums the
        sequence's `rewards` (length, batch) over `steps` positions."""
        gamma = np.float32(self.gamma)
        total = rewards[position[:, 0]].copy()
        discount = np.full_like(total, gamma)
        for k in range(1, self.n_step):
            going = k < steps
            ahead = rewards[np.minimum(position + k, len(rewards) - 1), np.arange(rewards.shape[1])[None]]
            total = np.where(going, total + discount * ahead, total)
            discount = np.where(going, discount * gamma, discount)
        return total, discount

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Two entries to merge into the agent's state: "memory", the counters as plain values,
        and "logs", the two rings (three with a recurrent agent's states) as `rlrun.snapshot.Log`s,
        which the snapshot writes (only what the previous snapshot lacks). Without `snapshot`, the
        counters only say it was left out."""
        from rlrun.snapshot import Log

        if not self.spec.snapshot:
            return {"memory": {"included": False}, "logs": {}}
        counters: dict[str, Any] = {
            "included": True,
            "rows_end": self.rows_end,
            "frames_end": self.frames_end,
            "stacks": self.stacks.tolist(),
            "known": self.known.tolist(),
        }
        if self.priorities is not None:
            counters["priorities"] = torch.from_numpy(self.priorities.leaves.copy())
            counters["max_priority"] = self.max_priority
        logs = {"rows": Log(self.rows, self.rows_end), "frames": Log(self.frames, self.frames_end)}
        if self.states is not None:
            logs["states"] = Log(self.states, self.rows_end)
        return {"memory": counters, "logs": logs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from the agent's state, which holds the "memory" entry above and the snapshot's
        "logs" (`rlrun.snapshot.StoredLog`s), or, from a format-1 snapshot, its "arrays"."""
        counters = state["memory"]
        if not counters["included"]:
            return  # starts empty and refills; the session records the resume as approximate
        if "rows_end" not in counters:
            self._load_format_1(counters, state["arrays"])
            return
        logs = state["logs"]
        for name in (*LOGS, "states") if self.states is not None else LOGS:
            logs[name].fill(getattr(self, name))
        self.rows_end, self.frames_end = counters["rows_end"], counters["frames_end"]
        self.stacks[:] = counters["stacks"]
        self.known[:] = counters["known"]
        if self.priorities is not None and "priorities" in counters:
            self.priorities.load(counters["priorities"].numpy())
            self.max_priority = counters["max_priority"]
        elif self.priorities is not None:  # a fork that turns prioritised replay on: as if each row were new
            self.priorities.set(np.arange(self.size), np.full(self.size, self.max_priority))

    def _load_format_1(self, counters: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Rebuild frames and rows from a format-1 memory (each row's obs and next_obs in full),
        oldest row first: a row whose observation is its copy's previous next observation shares
        its frames, any other adds its own."""
        size, position = counters["size"], counters["position"]
        if size > self.capacity:
            raise ValueError(f"a format-1 replay memory of {size} rows does not fit a capacity of {self.capacity}")
        order = (position + np.arange(size)) % max(size, 1)  # oldest first (position: the oldest, once full)
        shape = (size, *self.obs_shape)
        dtype = self.frames.dtype
        obs = np.asarray(arrays["obs"])[order].reshape(shape).astype(dtype)
        next_obs = np.asarray(arrays["next_obs"])[order].reshape(shape).astype(dtype)
        following = np.zeros((size, self.stack), dtype=np.int64)
        n = self.num_envs
        for row in range(size):
            before = row - n
            if before >= 0 and np.array_equal(next_obs[before], obs[row]):
                frames = following[before]
            else:
                frames = self._add_observation(obs[row])
            if self.stack > 1 and not np.array_equal(next_obs[row][:-1], obs[row][1:]):
                raise ValueError("a format-1 replay memory whose next observations are not its stacks shifted")
            following[row] = [*frames[1:], self._add_frames(self._newest(next_obs[row : row + 1]))[0]]
            self.rows["obs"][row] = frames
        self.rows["next"][:size] = following[:, -1]
        self.rows["action"][:size] = np.asarray(arrays["actions"])[order]
        self.rows["reward"][:size] = np.asarray(arrays["rewards"])[order]
        self.rows["terminated"][:size] = np.asarray(arrays["terminated"])[order]
        self.rows_end = size
        self.known[:] = False  # each copy's next observation is added afresh
