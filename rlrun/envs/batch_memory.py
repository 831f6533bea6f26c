"""The batch of a `BlockVectorEnv` in shared memory: what its workers and the session exchange at
every step without pickling it.

One segment holds, in copy order, what a `SyncVectorEnv` over the same copies keeps of a step: the
observations laid out as the batch (an array per leaf of the observation space, a row per copy), the
rewards (float64), the terminated and truncated flags, and the actions the session hands the copies.
Each worker reads its block's rows of actions and writes its block's rows of the rest in place, so
a step moves no observation through a pipe and the session's batch is one copy of a view.

Infos: an info of plain numbers (Atari's lives and frame numbers, MuJoCo's positions and reward
terms: Python and NumPy bools, ints and floats) travels as packed bytes in its copy's slot, with the
keys and each value's exact type (its "schema") sent once through the pipe, so the session rebuilds
the same dict, value for value and type for type. Anything else (a nested dict, an array, an end
of episode's `final_obs`) is pickled, on the steps that have one only.

The segment is unlinked once every worker has mapped it: the memory goes with the last process that
maps it, however they end (kill -9 included), and nothing is left in /dev/shm.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np
from gymnasium import spaces

ALIGN = 64
INFO_BYTES = 512
"""Room for one copy's info of plain numbers (64 float64s); a larger one is pickled."""

EMPTY, PACKED, PICKLED = 0, 1, 2
"""What a copy's info is this step: empty, packed in its slot, or pickled in the worker's extras."""

# each plain number's type and how it packs: exact both ways (struct's standard sizes, no padding)
_FORMATS: dict[type, str] = {
    bool: "?",
    int: "q",
    float: "d",
    np.bool_: "?",
    np.float64: "d",
    np.float32: "f",
    np.float16: "e",
    np.int64: "q",
    np.int32: "i",
    np.int16: "h",
    np.int8: "b",
    np.uint64: "Q",
    np.uint32: "I",
    np.uint16: "H",
    np.uint8: "B",
}
_NATIVE = (bool, int, float)


@dataclass(frozen=True)
class Field:
    """An array in the segment: where it starts, its shape and dtype."""

    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


Tree = Field | dict[str, "Tree"] | tuple["Tree", ...]
"""An observation space's leaves as fields, in its structure (Dict: a dict, Tuple: a tuple)."""


@dataclass(frozen=True)
class Layout:
    """Where everything is in the segment; computed by the session, sent to the workers."""

    observations: Tree
    actions: Field | None
    """None: the actions are not one array (a Dict or Tuple action space): pickled each step."""
    rewards: Field
    terminated: Field
    truncated: Field
    info_modes: Field
    info_slots: Field
    progress: Field
    """Per worker, the copy it is stepping (or capturing...), -1 between commands."""
    size: int


def _leaf(space: spaces.Space[Any]) -> bool:
    return isinstance(space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary)


class _Allocator:
    def __init__(self) -> None:
        self.end = 0

    def field(self, shape: tuple[int, ...], dtype: Any) -> Field:
        offset = -(-self.end // ALIGN) * ALIGN
        field = Field(offset, shape, np.dtype(dtype).str)
        self.end = offset + field.size
        return field

    def tree(self, space: spaces.Space[Any], n: int) -> Tree | None:
        if _leaf(space):
            assert space.dtype is not None and space.shape is not None
            return self.field((n, *space.shape), space.dtype)
        if isinstance(space, spaces.Dict):
            children = {key: self.tree(child, n) for key, child in space.spaces.items()}
            return None if any(c is None for c in children.values()) else children  # type: ignore[return-value]
        if isinstance(space, spaces.Tuple):
            items = tuple(self.tree(child, n) for child in space.spaces)
            return None if any(c is None for c in items) else items  # type: ignore[return-value]
        return None


def layout(
    observation_space: spaces.Space[Any], action_space: spaces.Space[Any], n: int, workers: int
) -> Layout | None:
    """The segment for `n` copies of these single-copy spaces, or None when an observation is not
    made of arrays (a Text, Graph or Sequence space): such copies step through the pipes."""
    allocate = _Allocator()
    observations = allocate.tree(observation_space, n)
    if observations is None:
        return None
    actions = None
    if _leaf(action_space):
        assert action_space.dtype is not None and action_space.shape is not None
        actions = allocate.field((n, *action_space.shape), action_space.dtype)
    return Layout(
        observations=observations,
        actions=actions,
        rewards=allocate.field((n,), np.float64),
        terminated=allocate.field((n,), np.bool_),
        truncated=allocate.field((n,), np.bool_),
        info_modes=allocate.field((n,), np.uint8),
        info_slots=allocate.field((n, INFO_BYTES), np.uint8),
        progress=allocate.field((workers,), np.int64),
        size=max(allocate.end, 1),
    )


class Batch:
    """The segment mapped into this process, with a NumPy view of each field."""

    def __init__(self, layout: Layout, name: str | None = None) -> None:
        self.layout = layout
        if name is None:
            self.memory = shared_memory.SharedMemory(create=True, size=layout.size)
        else:
            self.memory = shared_memory.SharedMemory(name=name)
        self.name = self.memory.name
        self.observations = self._tree(layout.observations)
        self.actions = None if layout.actions is None else self._view(layout.actions)
        self.rewards = self._view(layout.rewards)
        self.terminated = self._view(layout.terminated)
        self.truncated = self._view(layout.truncated)
        self.info_modes = self._view(layout.info_modes)
        self.progress = self._view(layout.progress)
        slots = layout.info_slots
        assert self.memory.buf is not None
        self.slots = self.memory.buf[slots.offset : slots.offset + slots.size]

    def _view(self, field: Field) -> np.ndarray:
        return np.ndarray(field.shape, dtype=np.dtype(field.dtype), buffer=self.memory.buf, offset=field.offset)

    def _tree(self, tree: Tree) -> Any:
        if isinstance(tree, Field):
            return self._view(tree)
        if isinstance(tree, dict):
            return {key: self._tree(child) for key, child in tree.items()}
        return tuple(self._tree(child) for child in tree)

    def unlink(self) -> None:
        """Remove the segment's name: it lives on while a process maps it."""
        with contextlib.suppress(FileNotFoundError):
            self.memory.unlink()

    def close(self) -> None:
        self.observations = self.actions = self.rewards = self.terminated = self.truncated = None  # type: ignore[assignment]
        self.info_modes = self.progress = None  # type: ignore[assignment]
        self.slots.release()
        with contextlib.suppress(BufferError):  # a view still held somewhere: the exit unmaps it
            self.memory.close()

    # -- observations ---------------------------------------------------------------------------

    def write_observation(self, index: int, observation: Any) -> None:
        _write(self.observations, index, observation)

    def read_observations(self) -> Any:
        """The batch, copied out of the segment (the next step overwrites it): what a
        SyncVectorEnv returns, a fresh array per leaf in the space's structure."""
        return _copy(self.observations)


def _write(views: Any, index: int, observation: Any) -> None:
    if isinstance(views, np.ndarray):
        views[index] = observation
    elif isinstance(views, dict):
        for key, child in views.items():
            _write(child, index, observation[key])
    else:
        for position, child in enumerate(views):
            _write(child, index, observation[position])


def _copy(views: Any) -> Any:
    if isinstance(views, np.ndarray):
        return views.copy()
    if isinstance(views, dict):
        return {key: _copy(child) for key, child in views.items()}
    return tuple(_copy(child) for child in views)


# -- infos of plain numbers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Schema:
    """An info's keys and each value's exact type, and how they pack."""

    keys: tuple[str, ...]
    types: tuple[type, ...]

    @property
    def packing(self) -> struct.Struct:
        return struct.Struct("=" + "".join(_FORMATS[t] for t in self.types))


class Packer:
    """A worker's side: packs each copy's info into its slot when it is plain numbers."""

    def __init__(self, slots: memoryview) -> None:
        self.slots = slots
        self.schemas: dict[int, tuple[Schema, struct.Struct]] = {}

    def pack(self, index: int, info: dict[str, Any], new: dict[int, Schema]) -> bool:
        """Pack copy `index`'s info into its slot (True), or say it must be pickled (False); a
        schema the session does not know yet is added to `new`."""
        known = self.schemas.get(index)
        types = tuple(map(type, info.values()))
        if known is None or known[0].types != types or known[0].keys != tuple(info):
            if not all(t in _FORMATS for t in types) or not all(isinstance(k, str) for k in info):
                return False
            schema = Schema(tuple(info), types)
            packing = schema.packing
            if packing.size > INFO_BYTES:
                return False
            known = self.schemas[index] = (schema, packing)
            new[index] = schema
        try:
            known[1].pack_into(self.slots, index * INFO_BYTES, *info.values())
        except (struct.error, OverflowError):  # an int beyond 64 bits, a float beyond a float32's range
            return False
        return True


class Unpacker:
    """The session's side: rebuilds a copy's info from its slot, value for value, type for type."""

    def __init__(self, slots: memoryview) -> None:
        self.slots = slots
        self.schemas: dict[int, tuple[Schema, struct.Struct]] = {}

    def learn(self, schemas: dict[int, Schema]) -> None:
        for index, schema in schemas.items():
            self.schemas[index] = (schema, schema.packing)

    def unpack(self, index: int) -> dict[str, Any]:
        schema, packing = self.schemas[index]
        values = packing.unpack_from(self.slots, index * INFO_BYTES)
        return {
            key: value if kind in _NATIVE else kind(value)
            for key, kind, value in zip(schema.keys, schema.types, values, strict=True)
        }
