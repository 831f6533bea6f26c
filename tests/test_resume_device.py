"""A snapshot taken on one device continues on another (`meta.device`): a GPU run resumed on a
machine without one loads its snapshot onto the CPU, trains on, and the registry records that
resume as approximate, saying where the snapshot was taken and where it continued.

CI has no GPU, so the GPU snapshot is made as rlrun on a GPU machine writes it: a real snapshot of
a real training, whose meta.json says it was taken on cuda:0 and names the GPU's model, written
through the snapshot API and recorded in the registry like any other. Its tensors were saved from
the CPU; a GPU's carry CUDA storage tags, which `snapshot.read` maps onto the CPU whatever they say
(`torch.load(map_location="cpu", weights_only=True)`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import builtin_for
from same_run import resume_ok, train

from rlrun import snapshot
from rlrun.registry import Registry
from rlrun.snapshot import logs

pytestmark = pytest.mark.slow

GPU = "NVIDIA H100 80GB HBM3"


def as_if_taken_on(home: Path, device: str | None, gpu: str | None) -> int:
    """Rewrite the newest snapshot of the latest run as a GPU session writes it; its frame."""
    with Registry.open(home, create=False) as registry:
        newest = max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
        saved = snapshot.read(home / newest.path, newest.sha256)
        saved.arrays = {name: np.array(array) for name, array in saved.arrays.items()}  # off the files removed next
        saved.logs = {name: logs.load(log) for name, log in saved.logs.items()}
        registry.remove_checkpoint(newest.id)
        snapshot.remove(home / newest.path)
        written = snapshot.write(home / newest.path, replace(saved, meta=replace(saved.meta, device=device, gpu=gpu)))
        registry.add_checkpoint(
            newest.session_id,
            frame=newest.frame,
            kind=newest.kind,
            path=newest.path,
            sha256=written.sha256,
            size_bytes=written.size_bytes,
        )
    return newest.frame


def test_a_gpu_snapshot_resumes_on_the_cpu_and_is_recorded_approximate(home: Path) -> None:
    spec = builtin_for("dqn")  # weights, optimiser and a replay memory to carry across
    assert train(home, spec, "--frames", "2000", "--set", "meta.device=auto").code == 0
    frame = as_if_taken_on(home, "cuda:0", GPU)
    resumed = resume_ok(home, "--frames", "3000", "--set", "meta.device=cpu")
    assert f"from snapshot at frame {frame:,}" in resumed.stderr
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert detail.run.status == "finished" and [s.frame for s in detail.sessions] == [3000]
    first, moved = detail.attempts
    assert not first.approximate and moved.approximate
    assert f"snapshot taken on cuda:0 ({GPU}), resumed on cpu" in (moved.note or ""), moved.note
    assert {d["path"] for d in json.loads(detail.spec_revisions[1].diff_json)} == {"meta.max_frame", "meta.device"}
    final = max(detail.checkpoints, key=lambda c: c.frame)
    meta = snapshot.read_meta(home / final.path)
    assert (final.frame, meta.device, meta.gpu) == (3000, "cpu", None)


def test_a_cpu_snapshot_without_a_recorded_device_resumes_exactly(home: Path) -> None:
    """Snapshots written before devices were recorded were all taken on the CPU."""
    spec = builtin_for("ppo")
    assert train(home, spec, "--frames", "2000").code == 0
    with Registry.open(home, create=False) as registry:
        newest = max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
    assert snapshot.read_meta(home / newest.path).device == "cpu"
    as_if_taken_on(home, None, None)  # as an older file: no device keys at all
    resume_ok(home, "--frames", "3000")
    with Registry.open(home, create=False) as registry:
        attempts = registry.get_run(registry.resolve("latest").id).attempts
    assert [a.approximate for a in attempts] == [False, False]
