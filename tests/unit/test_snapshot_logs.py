"""Snapshots of the replay memory: written incrementally as segments that later snapshots share
by hard links, read back exactly, and format-1 snapshots (whole arrays) still read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from memory_reference import NaiveMemory, StackedEnvs, assert_same_batches, squeeze

from rlrun import snapshot
from rlrun.algorithms.replay import ReplayMemory
from rlrun.snapshot import layout, logs
from rlrun.spec import MemorySpec

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
META = snapshot.SnapshotMeta.from_json(
    json.loads((FIXTURES / "snapshot-meta" / "captured-mid-episode.json").read_text())
)
CAPACITY, ENVS, STACK = 300, 2, 4


def new_memory() -> ReplayMemory:
    return ReplayMemory(
        MemorySpec(capacity=CAPACITY),
        (STACK, 3, 2),
        np.dtype(np.uint8),
        (),
        np.dtype(np.int64),
        num_envs=ENVS,
        frame_stack=STACK,
    )


def play(memory: ReplayMemory, naive: NaiveMemory, envs: StackedEnvs, steps: int) -> None:
    for _ in range(steps):
        obs, actions, rewards, true_next, terminated, truncated = envs.step()
        obs, true_next = squeeze(obs, STACK), squeeze(true_next, STACK)
        memory.add(obs, actions, rewards, true_next, terminated, truncated)
        naive.add(obs, actions, rewards, true_next, terminated)


def save(memory: ReplayMemory, path: Path, previous: Path | None = None) -> snapshot.Written:
    state = memory.state_dict()
    return snapshot.write(
        path, snapshot.Snapshot(META, {"memory": state["memory"]}, logs=state["logs"]), previous=previous
    )


def restore(path: Path, sha256: str) -> ReplayMemory:
    saved = snapshot.read(path, sha256)
    memory = new_memory()
    memory.load_state_dict({"memory": saved.tensors["memory"], "logs": saved.logs, "arrays": saved.arrays})
    return memory


def inodes(path: Path) -> dict[int, str]:
    return {p.stat().st_ino: p.name for p in (path / layout.LOGS).iterdir()}


def segments(path: Path, log: str) -> list[list[int]]:
    manifest = json.loads((path / layout.MANIFEST).read_text())
    return [[start, end] for start, end, _ in manifest["logs"][log]["segments"]]


@pytest.fixture
def session(tmp_path: Path) -> tuple[ReplayMemory, NaiveMemory, StackedEnvs]:
    memory, naive, envs = new_memory(), NaiveMemory(CAPACITY, (STACK, 3, 2)), StackedEnvs(ENVS, STACK, 0.05, seed=1)
    play(memory, naive, envs, 260)  # the rows' ring wraps, the frames' does not yet
    return memory, naive, envs


def test_a_second_snapshot_writes_only_the_new_rows_and_links_the_rest(
    session: tuple[ReplayMemory, NaiveMemory, StackedEnvs], tmp_path: Path
) -> None:
    memory, naive, envs = session
    first = save(memory, tmp_path / "f1")
    ends = {"rows": memory.rows_end, "frames": memory.frames_end}
    play(memory, naive, envs, 20)
    second = save(memory, tmp_path / "f2", previous=first.path)
    shared = inodes(first.path).keys() & inodes(second.path).keys()
    assert shared, "the older segments are hard links, not copies"
    for name in ("rows", "frames"):
        fresh = [s for s in segments(second.path, name) if s not in segments(first.path, name)]
        assert fresh and all(start >= ends[name] for start, _ in fresh), "only items added since were written"
    restored = restore(second.path, second.sha256)
    assert_same_batches(restored, naive)
    assert (restored.rows_end, restored.frames_end) == (memory.rows_end, memory.frames_end)
    assert np.array_equal(restored.stacks, memory.stacks) and np.array_equal(restored.known, memory.known)
    snapshot.remove(first.path)  # retention deletes the older one: the shared segments stay with the newer
    snapshot.verify(second.path, second.sha256, deep=True)
    assert_same_batches(restore(second.path, second.sha256), naive)


def test_segments_that_left_the_ring_are_no_longer_used(
    session: tuple[ReplayMemory, NaiveMemory, StackedEnvs], tmp_path: Path
) -> None:
    memory, naive, envs = session
    previous = None
    for k in range(6):
        play(memory, naive, envs, 90)  # each lap of the ring: 180 of its 300 rows
        previous = save(memory, tmp_path / f"f{k}", previous=previous and previous.path)
    assert previous is not None
    first_row = memory.rows_end - CAPACITY
    assert segments(previous.path, "rows")[0][1] > first_row, "a segment older than the window was kept"
    assert_same_batches(restore(previous.path, previous.sha256), naive)


def test_a_resumed_memory_never_links_segments_written_after_its_snapshot(
    session: tuple[ReplayMemory, NaiveMemory, StackedEnvs], tmp_path: Path
) -> None:
    """The rewind: a session continued from snapshot 1 after snapshot 2 was written takes another
    path; its snapshot 3 shares segments with 1 only."""
    memory, _, envs = session
    first = save(memory, tmp_path / "f1")
    play(memory, NaiveMemory(CAPACITY, (STACK, 3, 2)), envs, 20)
    second = save(memory, tmp_path / "f2", previous=first.path)
    rewound = restore(first.path, first.sha256)
    play(rewound, NaiveMemory(CAPACITY, (STACK, 3, 2)), StackedEnvs(ENVS, STACK, 0.05, seed=99), 20)  # another future
    third = save(rewound, tmp_path / "f3", previous=first.path)
    only_second = inodes(second.path).keys() - inodes(first.path).keys()
    assert only_second and not only_second & inodes(third.path).keys()
    assert_same_memory(restore(third.path, third.sha256), rewound)


def assert_same_memory(a: ReplayMemory, b: ReplayMemory) -> None:
    assert (a.rows_end, a.frames_end) == (b.rows_end, b.frames_end)
    slots = np.arange(a.size)
    ok = a.sampleable(slots)
    assert np.array_equal(ok, b.sampleable(slots))
    for key, value in a.batch(slots[ok])._asdict().items():
        assert value is None or torch.equal(value, getattr(b.batch(slots[ok]), key)), key


def test_new_items_are_cut_at_the_segment_size_and_the_ring_wrap(
    session: tuple[ReplayMemory, NaiveMemory, StackedEnvs], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory, naive, _ = session
    monkeypatch.setattr(logs, "SEGMENT_BYTES", 64 * memory.rows.itemsize)
    written = save(memory, tmp_path / "f1")
    rows = segments(written.path, "rows")
    assert all(end - start <= 64 for start, end in rows)
    assert any(end % CAPACITY == 0 for _, end in rows), "cut where the ring wraps"
    assert rows[-1][1] == memory.rows_end and rows[0][0] <= memory.rows_end - CAPACITY
    assert_same_batches(restore(written.path, written.sha256), naive)


def test_a_missing_previous_snapshot_means_writing_everything(
    session: tuple[ReplayMemory, NaiveMemory, StackedEnvs], tmp_path: Path
) -> None:
    memory, naive, _ = session
    written = save(memory, tmp_path / "f1", previous=tmp_path / "gone")
    assert all(p.stat().st_nlink == 1 for p in (written.path / layout.LOGS).iterdir())
    assert_same_batches(restore(written.path, written.sha256), naive)


def test_a_shared_segment_altered_fails_every_snapshot_that_uses_it(
    session: tuple[ReplayMemory, NaiveMemory, StackedEnvs], tmp_path: Path
) -> None:
    memory, naive, envs = session
    first = save(memory, tmp_path / "f1")
    play(memory, naive, envs, 5)
    second = save(memory, tmp_path / "f2", previous=first.path)
    shared = next(p for p in (second.path / layout.LOGS).iterdir() if p.stat().st_nlink == 2)
    with open(shared, "r+b") as file:
        file.seek(-1, 2)
        last = file.read(1)
        file.seek(-1, 2)
        file.write(bytes([last[0] ^ 1]))
    for written in (first, second):
        with pytest.raises(snapshot.SnapshotError, match="missing or altered"):
            snapshot.verify(written.path, written.sha256, deep=True)


def test_a_ring_of_another_capacity_is_refused(
    session: tuple[ReplayMemory, NaiveMemory, StackedEnvs], tmp_path: Path
) -> None:
    memory, _, _ = session
    written = save(memory, tmp_path / "f1")
    saved = snapshot.read(written.path, written.sha256)
    other = ReplayMemory(
        MemorySpec(capacity=CAPACITY + 1),
        (STACK, 3, 2),
        np.dtype(np.uint8),
        (),
        np.dtype(np.int64),
        num_envs=ENVS,
        frame_stack=STACK,
    )
    with pytest.raises(snapshot.SnapshotError, match="capacity"):
        other.load_state_dict({"memory": saved.tensors["memory"], "logs": saved.logs})


# ---------------------------------------------------------------------------------------------
# Format 1


FORMAT_1 = FIXTURES / "format1-run" / "bngd4n8pag" / "s0" / "checkpoints" / "f000000001600"


def test_a_format_1_snapshot_still_verifies_and_its_memory_loads() -> None:
    """The fixture: DQN on CartPole, 2 copies, capacity 1000, 1600 frames (the ring wrapped), as
    rlrun wrote it before format 2: obs and next_obs in full, float32."""
    from rlrun.algorithms import build_agent
    from rlrun.envs import make_vector_env
    from rlrun.spec import validate_spec

    manifest = snapshot.verify(FORMAT_1, layout.sha256(FORMAT_1), deep=True)
    assert manifest["format"] == 1 and "logs" not in manifest
    saved = snapshot.read(FORMAT_1)
    spec = validate_spec(saved.meta.spec)
    env = make_vector_env(spec.env)
    agent = build_agent(spec, env.single_observation_space, env.single_action_space, 0)
    agent.load_state_dict({**saved.tensors["agent"], "arrays": saved.arrays, "logs": saved.logs})
    memory = agent.memory
    old = {name: np.asarray(array) for name, array in saved.arrays.items()}
    counters = saved.tensors["agent"]["memory"]
    assert memory.size == counters["size"] == 1000
    oldest_first = (counters["position"] + np.arange(1000)) % 1000
    slots = np.arange(memory.size)
    ok = memory.sampleable(slots)
    assert ok.mean() > 0.9
    batch = memory.batch(slots[ok])
    for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
        np.testing.assert_array_equal(getattr(batch, name).numpy(), old[name][oldest_first][ok], err_msg=name)
    generator = torch.Generator().manual_seed(0)
    assert memory.sample(32, generator).obs.shape == (32, 4)
