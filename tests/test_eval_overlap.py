"""Evaluation beside training (`meta.eval_overlap`): the same evaluations, the same best snapshot and
the same snapshots as inline evaluation, bit for bit; and an overlapped run interrupted (kill -9,
SIGTERM) and resumed is the uninterrupted one.

Every evaluation is slowed down (`RLRUN_TEST_SLOW_EVALUATION_SECONDS`, a sleep that changes
nothing) so training is well past an evaluation's frame when it ends: snapshots due meanwhile are
held and put in place later, a stop waits for it, and a kill -9 leaves held snapshots unfinished.
Tests marked `any_home` also run with the home in object storage (S3 on a loopback server), where a
held snapshot, once released, is uploaded in the background: still equal to the local inline run
(for DQN, whose replay memory's segments make the most uploads: the store's paths do not depend on
the algorithm).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import fast
from same_run import (
    BUDGET,
    assert_same_run,
    assert_snapshots_sound,
    final_state,
    killed_after_a_snapshot,
    preempted_mid_episode,
    reference,
    resume_ok,
    train,
)

from rlrun import snapshot
from rlrun.registry import Registry
from rlrun.session import events
from rlrun.spec import load_spec
from rlrun.testhooks import SLOW_EVALUATION_ENV

pytestmark = pytest.mark.slow  # real trainings

# ε-greedy evaluation with a cap: the evaluation's own random actions and cut episodes are compared too
EVALUATION = ["--set", "meta.eval_epsilon=0.2", "--set", "meta.eval_max_steps=120"]
OVERLAP = [*EVALUATION, "--set", "meta.eval_overlap=true"]
INLINE = [*EVALUATION, "--set", "meta.eval_overlap=false"]
SLOW = {SLOW_EVALUATION_ENV: "0.4"}
SPECS = ["ppo_cartpole", "dqn_cartpole"]  # a rollout cut mid-way; a replay memory shared by segments


def snapshots(home: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """Every snapshot the run kept: frame, kind and meta (less what names the run or the wall clock)."""
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    kept = []
    for checkpoint in sorted(detail.checkpoints, key=lambda c: c.frame):
        meta = snapshot.read_meta(home / checkpoint.path).to_json()
        meta.pop("run_id")
        meta["clock"].pop("wall_time")
        meta["spec"]["meta"].pop("eval_overlap")
        kept.append((checkpoint.frame, checkpoint.kind, meta))
    return kept


@pytest.fixture(scope="module", params=SPECS)
def inline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The run evaluated inline, trained once per spec."""
    return request.param, reference(tmp_path_factory, request.param, "--frames", str(BUDGET), *INLINE)


@pytest.mark.any_home(store_only={"inline": "dqn_cartpole"})  # the store's paths: one spec
def test_overlapped_evaluation_records_what_inline_evaluation_does(
    inline: tuple[str, Path], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, inline_home = inline
    monkeypatch.delenv("RLRUN_DB", raising=False)  # each home's registry is its own file (an S3 home's too)
    done = train(home, spec, "--frames", str(BUDGET), *OVERLAP, env=SLOW)
    assert done.code == 0, done.stderr
    assert_same_run(final_state(inline_home), final_state(home))
    kept = snapshots(home)
    assert kept == snapshots(inline_home)  # the same frames, kinds (best included) and contents
    assert any("best" in kind.split("+") for _, kind, _ in kept)
    if spec == "ppo_cartpole":  # it learns to balance past the cap
        assert any(any(e["truncated"]) for e in kept[-1][2]["evaluations"]), "no episode was cut by the cap"
    assert_snapshots_sound(home)


@pytest.mark.any_home(store_only={"inline": "dqn_cartpole"})
@pytest.mark.parametrize("interruption", ["kill-9", "sigterm"])
def test_an_interrupted_overlapped_run_is_the_uninterrupted_one(
    inline: tuple[str, Path], home: Path, interruption: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, inline_home = inline
    monkeypatch.delenv("RLRUN_DB", raising=False)
    monkeypatch.setenv(SLOW_EVALUATION_ENV, SLOW[SLOW_EVALUATION_ENV])  # for the killed run and the resume
    if interruption == "kill-9":
        killed_after_a_snapshot(home, spec, "--frames", str(BUDGET), *OVERLAP, frame=3000, hold=False)
    else:
        preempted_mid_episode(home, spec, "--frames", str(BUDGET), *OVERLAP)
    resume_ok(home)
    assert_same_run(final_state(inline_home), final_state(home))
    assert_snapshots_sound(home)  # no held snapshot left half-done, none listed that is not complete


def test_training_goes_on_while_an_evaluation_runs(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The evidence that evaluations overlap: the session reports frames past an evaluation's frame
    before that evaluation's result, and a snapshot due meanwhile comes after it."""
    from rlrun.training.api import train as train_here

    monkeypatch.setenv(SLOW_EVALUATION_ENV, "1")
    spec = load_spec(
        "ppo_cartpole",
        [
            "meta.max_frame=6000",
            "meta.eval_frequency=2000",
            "meta.log_frequency=256",
            "meta.checkpoint_frequency=3000",
            "meta.eval_overlap=true",
            *fast("ppo_cartpole")[1::2],
        ],
    )
    seen: list[events.Event] = []
    assert train_here(spec, home=home, on_event=seen.append, handle_signals=False).status == "finished"
    evaluated = [i for i, e in enumerate(seen) if isinstance(e, events.Evaluated) and e.frame == 2000]
    later = [i for i, e in enumerate(seen) if isinstance(e, events.Progress) and e.frame > 2000]
    assert evaluated and later and later[0] < evaluated[0], "training waited for the evaluation"
    periodic = [i for i, e in enumerate(seen) if isinstance(e, events.Checkpointed) and 3000 <= e.frame < 4000]
    assert periodic and periodic[0] > evaluated[0], "a snapshot was put in place before the evaluations it holds"
    saved = [e.frame for e in seen if isinstance(e, events.Checkpointed)]
    assert saved == sorted(saved)
