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

A snapshot holds the rings as two logs, written incrementally (`rlrun.snapshot.logs`), and the
counters. Snapshots of format 1 held `obs`, `next_obs` (float32, flattened), `actions`, `rewards`,
`terminated` as whole arrays; `load_state_dict` still reads them (`_load_format_1`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlrun.spec import MemorySpec

BATCH_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")
LOGS = ("rows", "frames")


class ReplayMemory:
    def __init__(self, spec: MemorySpec, obs_shape: tuple[int, ...], obs_dtype: np.dtype[Any],
                 action_shape: tuple[int, ...], action_dtype: np.dtype[Any], *, num_envs: int = 1,
                 frame_stack: int = 1) -> None:
        self.spec, self.num_envs, self.stack = spec, num_envs, frame_stack
        self.obs_shape = tuple(obs_shape)
        self.frame_shape = self.obs_shape[1:] if frame_stack > 1 else self.obs_shape
        if frame_stack > 1 and self.obs_shape[:1] != (frame_stack,):
            raise ValueError(f"observations of shape {obs_shape} are not stacks of {frame_stack} frames")
        self.capacity = spec.capacity
        self.frame_capacity = self.capacity + self.capacity // 16 + 2 * num_envs * (frame_stack + 1)
        # np.zeros maps untouched pages lazily: a large memory costs RAM as it fills.
        self.frames = np.zeros((self.frame_capacity, *self.frame_shape), dtype=obs_dtype)
        self.rows = np.zeros(self.capacity, dtype=np.dtype([
            ("obs", np.int64, (frame_stack,)), ("next", np.int64), ("action", action_dtype, action_shape),
            ("reward", np.float32), ("terminated", np.float32)]))
        self.rows_end = 0
        """Rows ever added; the next goes to slot rows_end % capacity."""
        self.frames_end = 0
        self.stacks = np.zeros((num_envs, frame_stack), dtype=np.int64)
        """Frame numbers of each copy's current observation (valid where `known`)."""
        self.known = np.zeros(num_envs, dtype=bool)
        """False before a copy's first step and after its episode ended: its observation is new."""
        self.view: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
        """What the learner sees of a batch, set by whoever owns the env's normalisation
        (`rlrun.envs.normalize`): the memory keeps the env's own observations and rewards."""

    @property
    def size(self) -> int:
        return min(self.rows_end, self.capacity)

    # -- adding ---------------------------------------------------------------------------------

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Add one transition per vector-env copy (a batch along the first axis); `next_obs` is
        the true next observation (the final one where an episode ended)."""
        for copy in np.flatnonzero(~self.known):
            self.stacks[copy] = self._add_observation(obs[copy])
        count = len(rewards)
        slots = np.arange(self.rows_end, self.rows_end + count) % self.capacity
        next_frames = self._add_frames(self._newest(next_obs))
        rows = self.rows
        rows["obs"][slots], rows["next"][slots], rows["action"][slots] = self.stacks, next_frames, actions
        rows["reward"][slots], rows["terminated"][slots] = rewards, terminated
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

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """A uniform batch (with replacement) over the rows that can be sampled, drawn with the
        agent's generator: excluded slots are drawn again until none is left."""
        return self.batch(self._draw(batch_size, generator))

    def sample_batches(self, count: int, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """`count` batches stacked along a new first axis: the ones `count` calls of `sample` draw
        (the same draws of the generator, in the same order), gathered in one pass, since the
        memory does not change between them."""
        slots = np.concatenate([self._draw(batch_size, generator) for _ in range(count)])
        return {name: value.reshape(count, batch_size, *value.shape[1:])
                for name, value in self.batch(slots).items()}

    def _draw(self, batch_size: int, generator: torch.Generator) -> np.ndarray:
        slots = torch.randint(self.size, (batch_size,), generator=generator).numpy()
        if self.frames_end <= self.frame_capacity:  # no frame overwritten yet: every row can be sampled
            return slots
        while not (ok := self.sampleable(slots)).all():
            redraw = np.flatnonzero(~ok)
            slots[redraw] = torch.randint(self.size, (len(redraw),), generator=generator).numpy()
        return slots

    def batch(self, slots: np.ndarray) -> dict[str, torch.Tensor]:
        """The transitions in `slots` (which must be sampleable), observations in the env's dtype
        and shape."""
        rows = self.rows[slots]
        frames = rows["obs"]
        following = np.concatenate([frames[:, 1:], rows["next"][:, None]], axis=1)
        shape = (len(slots), *self.obs_shape)
        batch = {
            "obs": self.frames[frames % self.frame_capacity].reshape(shape),
            "actions": np.ascontiguousarray(rows["action"]),
            "rewards": np.ascontiguousarray(rows["reward"]),
            "next_obs": self.frames[following % self.frame_capacity].reshape(shape),
            "terminated": np.ascontiguousarray(rows["terminated"]),
        }
        if self.view is not None:
            batch = self.view(batch)
        return {name: torch.from_numpy(array) for name, array in batch.items()}

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Two entries to merge into the agent's state: "memory", the counters as plain values,
        and "logs", the two rings as `rlrun.snapshot.Log`s, which the snapshot writes (only what
        the previous snapshot lacks). Without `snapshot`, the counters only say it was left out."""
        from rlrun.snapshot import Log

        if not self.spec.snapshot:
            return {"memory": {"included": False}, "logs": {}}
        counters = {"included": True, "rows_end": self.rows_end, "frames_end": self.frames_end,
                    "stacks": self.stacks.tolist(), "known": self.known.tolist()}
        return {"memory": counters, "logs": {"rows": Log(self.rows, self.rows_end),
                                             "frames": Log(self.frames, self.frames_end)}}

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
        for name in LOGS:
            logs[name].fill(getattr(self, name))
        self.rows_end, self.frames_end = counters["rows_end"], counters["frames_end"]
        self.stacks[:] = counters["stacks"]
        self.known[:] = counters["known"]

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
