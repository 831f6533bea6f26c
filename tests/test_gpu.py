"""On a CUDA GPU, where the machine has one: every algorithm, and the Atari built-ins' convolutions,
train there (`meta.device=cuda`), and a run preempted mid-episode then resumed on the same GPU is the
uninterrupted run, bit for bit, as on the CPU (tests/test_resume.py), with nothing recorded
approximate. CI's machines have no GPU, so the module skips there; a GPU machine runs it with
`python -m pytest tests/test_gpu.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import builtin_for
from same_run import ALGORITHMS, assert_same_run, final_state, preempted_mid_episode, resume_ok, train

from rlrun import snapshot
from rlrun.registry import Registry

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")]

SPECS = [*(builtin_for(algorithm) for algorithm in ALGORITHMS), "ppo_breakout", "dqn_pong"]
ON_THE_GPU = ["--frames", "3000", "--set", "meta.device=cuda"]
SHORT_ATARI_EVALUATIONS = ["--set", "meta.num_eval_episodes=1", "--set", "meta.eval_max_steps=300"]


def newest_snapshot_device(home: Path) -> str | None:
    with Registry.open(home, create=False) as registry:
        run = registry.get_run(registry.resolve("latest").id)
        assert not [attempt.note for attempt in run.attempts if attempt.approximate]
        newest = max(run.checkpoints, key=lambda checkpoint: checkpoint.frame)
    return snapshot.read_meta(home / newest.path).device


@pytest.mark.parametrize("spec", SPECS)
def test_a_run_preempted_on_the_gpu_resumes_there_exactly(tmp_path: Path, spec: str) -> None:
    args = [*ON_THE_GPU, *(SHORT_ATARI_EVALUATIONS if spec in ("ppo_breakout", "dqn_pong") else [])]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    done = train(straight, spec, *args)
    assert done.code == 0, done.stderr
    preempted_mid_episode(stopped, spec, *args)
    resume_ok(stopped, "latest")
    assert_same_run(final_state(straight), final_state(stopped))
    assert (newest_snapshot_device(stopped) or "").startswith("cuda")
