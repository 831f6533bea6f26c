"""What a PBT exploit costs: an exact fork of a DQN member whose replay memory holds a million CartPole
transitions, against copying the checkpoint (what a checkpoint-copying PBT does), in one run on one disk.

    python tests/benchmarks/pbt_fork_cost.py [--frames 1M] [--folder /tmp]

1. A DQN run on CartPole trains `--frames` frames into a memory of that capacity (learning starts
   only after it: the memory's size, not the learning, is what is measured), one snapshot at the end.
2. The exploit, as `rlrun search --scheduler pbt` makes it: `rlrun.training.resume(parent, fork=True)`
   with a learning-rate switch, training 2 more rollouts' worth of frames (64) and writing the fork's
   first snapshot. Timed to the fork's record (`on_start`: the plan, the deep check of the parent's
   snapshot, the new run) and to the end (its sessions loaded the parent's memory, trained 64 frames
   and wrote a snapshot).
3. The same continuation as a plain resume of the parent (the cost of loading the memory and writing
   a snapshot, fork or not), in a copy of the home made by hard links.
4. The peer: `shutil.copytree` of the parent's snapshot folder (a copy, fsync'd).

Disk: `du` of the parent's and the fork's folders together minus the parent's alone (du counts a
hard-linked file once): what the fork wrote, its first snapshot's weights, optimiser state and 64 new
memory rows included; minus what the plain resume wrote for the same continuation: the fork's own
extra (its run record and copied logs). Both against the parent's snapshot's size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rlrun.registry import Registry
from rlrun.sizes import parse_size
from rlrun.spec import builtin_document, validate_spec
from rlrun.training import resume, train


def du(*folders: Path) -> int:
    """Bytes on disk of the folders together, each hard-linked file counted once."""
    done = subprocess.run(["du", "-s", "-B1", "-c", *map(str, folders)], capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1].split()[0])


def parent_spec(frames: int) -> Any:
    document = builtin_document("dqn_cartpole")
    document["agent"].update(learning_starts=frames, batch_size=32)
    document["agent"]["memory"]["capacity"] = frames
    document["meta"].update(
        max_frame=frames,
        eval_frequency=frames,
        num_eval_episodes=1,
        checkpoint_frequency=frames,
        log_frequency=frames // 10,
    )
    return validate_spec(document)


def fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as file:
                os.fsync(file.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", default="1M")
    parser.add_argument("--folder", default=tempfile.gettempdir())
    args = parser.parse_args()
    frames = parse_size(args.frames)
    work = Path(tempfile.mkdtemp(prefix="pbt-fork-", dir=args.folder))
    try:
        results = measure(work, frames)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))
    print(
        f"fork: {results['fork_recorded_s']:.3f} s to record, {results['fork_total_s']:.2f} s with its 64 frames"
        f" and first snapshot (a plain resume doing the same: {results['resume_total_s']:.2f} s, ratio"
        f" {results['fork_total_s'] / results['resume_total_s']:.2f}); copying the checkpoint instead:"
        f" {results['copy_s']:.2f} s"
    )
    print(
        f"disk: the fork wrote {results['fork_new_bytes'] / 2**20:.2f} MiB ({results['fork_new_percent']:.2f}% of the"
        f" parent's {results['parent_snapshot_bytes'] / 2**20:.1f} MiB snapshot), its first snapshot included; the"
        f" plain resume {results['resume_new_bytes'] / 2**20:.2f} MiB; the fork's own extra"
        f" {results['fork_extra_bytes'] / 2**10:.1f} KiB = {results['fork_extra_percent']:.3f}%; the copy"
        f" {results['copy_bytes'] / 2**20:.1f} MiB"
    )


def measure(work: Path, frames: int) -> dict[str, Any]:
    home = work / "runs"
    started = time.perf_counter()
    parent = train(parent_spec(frames), home=home, handle_signals=False)
    trained_s = time.perf_counter() - started
    with Registry.open(home, create=False) as registry:
        (checkpoint,) = [c for c in registry.get_run(parent.run_id).checkpoints if c.frame >= frames]
    snapshot = home / checkpoint.path
    parent_bytes = du(snapshot)
    parent_run_bytes = du(home / parent.run_id)

    twin = work / "twin"  # the same home, by hard links, for the plain resume
    subprocess.run(["cp", "-al", str(home), str(twin)], check=True)

    recorded: dict[str, float] = {}
    fork_started = started = time.perf_counter()
    lr = builtin_document("dqn_cartpole")["agent"]["optimizer"]["lr"]
    switch = {"kind": "piecewise", "points": [[0, lr], [checkpoint.frame + 1, lr * 1.2]], "interpolation": "step"}
    forked = resume(
        parent.run_id,
        home=home,
        fork=True,
        more=64,
        handle_signals=False,
        overrides=[f"agent.optimizer.lr={json.dumps(switch)}"],
        on_start=lambda run: recorded.setdefault("at", time.perf_counter()),
    )
    fork_total = time.perf_counter() - started
    fork_new = du(home / parent.run_id, home / forked.run_id) - parent_run_bytes

    started = time.perf_counter()
    resume(parent.run_id, home=twin, more=64, handle_signals=False)
    resume_total = time.perf_counter() - started
    resume_new = du(twin / parent.run_id) - parent_run_bytes

    started = time.perf_counter()
    copy = work / "copy"
    shutil.copytree(snapshot, copy)
    fsync_tree(copy)
    copy_s = time.perf_counter() - started
    return {
        "frames": frames,
        "train_s": trained_s,
        "parent_snapshot_bytes": parent_bytes,
        "fork_recorded_s": recorded["at"] - fork_started,
        "fork_total_s": fork_total,
        "fork_new_bytes": fork_new,
        "resume_new_bytes": resume_new,
        "fork_extra_bytes": fork_new - resume_new,
        "fork_extra_percent": 100 * (fork_new - resume_new) / parent_bytes,
        "fork_new_percent": 100 * fork_new / parent_bytes,
        "resume_total_s": resume_total,
        "copy_s": copy_s,
        "copy_bytes": du(copy),
    }


if __name__ == "__main__":
    main()
