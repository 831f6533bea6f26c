"""Spec edits at resume time: consistent ones equal a run that had them from frame 0; inconsistent
ones are refused with a table, exit 2 and nothing changed; --fork branches a new run."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import builtin_for, cli_env, invoke, rlrun, snapshot_of
from same_run import (
    ALGORITHMS,
    BUDGET,
    CADENCE,
    assert_same_run,
    assert_same_training,
    final_state,
    reference_state,
    resume_ok,
    train,
)

from rlrun.registry import Registry
from rlrun.spec import builtin_document

pytestmark = pytest.mark.slow  # real trainings in subprocesses

HALF = BUDGET // 2


def initial_lr(spec: str) -> float:
    """The built-in's learning rate at frame 0 (a number, or where its schedule starts)."""
    lr = builtin_document(spec)["agent"]["optimizer"].get("lr", 3e-4)
    return float(lr["start"] if isinstance(lr, dict) else lr)


def piecewise(*points: tuple[int, float]) -> str:
    return "agent.optimizer.lr=" + json.dumps({"kind": "piecewise", "points": [list(p) for p in points]})


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_schedule_segment_after_the_resume_frame(algorithm: str, tmp_path: Path) -> None:
    spec = builtin_for(algorithm)
    lr = initial_lr(spec)
    edited = piecewise((0, lr), (HALF + 2000, lr), (BUDGET, lr / 2))
    from_start, resumed = tmp_path / "from-start", tmp_path / "resumed"
    assert train(from_start, spec, "--frames", str(BUDGET), "--set", edited).code == 0
    assert train(resumed, spec, "--frames", str(HALF), "--set", piecewise((0, lr), (HALF + 2000, lr))).code == 0
    done = resume_ok(resumed, "--frames", str(BUDGET), "--set", edited)
    assert "edit agent.optimizer.lr" in done.stderr and f"equal at every frame up to {HALF:,}" in done.stderr
    assert_same_run(final_state(from_start), final_state(resumed))


EVALUATION = ["--set", "meta.eval_epsilon=0.3", "--set", "meta.eval_max_steps=60"]
"""Evaluations that draw (ε-greedy) and stop early (capped): more for them to change, were they to."""
OVERLAPPED = [*EVALUATION, "--set", "meta.eval_frequency=1500", "--set", "meta.eval_overlap=true"]
"""Every 1,500 frames, on a background thread while training goes on."""


def overlapped_from_start(factory: pytest.TempPathFactory, spec: str) -> dict[str, Any]:
    """The run evaluated OVERLAPPED from frame 0 (shared by the two tests below)."""
    return reference_state(factory, spec, "--frames", str(BUDGET), *OVERLAPPED)


def test_a_new_evaluation_cadence(
    half_trained: tuple[str, Path], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The half-trained run "plain" (EVALUATION every 1,000 frames), copied, resumed evaluating
    OVERLAPPED: from there on, the evaluations of the run evaluated so from frame 0."""
    spec, trained = half_trained
    resumed = tmp_path / "resumed"
    shutil.copytree(trained, resumed)  # the fixture's home stays as it was (the tests below check it)
    plain = _plain_run(resumed)
    resume_ok(resumed, plain, "--more", str(BUDGET - HALF), *OVERLAPPED[4:])
    assert_same_run(overlapped_from_start(tmp_path_factory, spec), final_state(resumed, plain), evaluated_after=HALF)


def _plain_run(home: Path) -> str:
    """The id of the run "plain" (not of a fork of it: `--fork` names its run after its parent's)."""
    with Registry.open(home, create=False) as registry:
        (run,) = [
            r.id
            for r in registry.list_runs(limit=None)
            if r.name == "plain" and registry.get_run(r.id).run.parent_id is None
        ]
    return run


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_evaluations_never_change_training(
    algorithm: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Evaluations added, removed and moved (every 1000 frames, every 1500, or only at the end),
    plain or ε-greedy and capped, run inline or on a background thread: training is the same, bit
    for bit, and so is the one evaluation the two ε-greedy runs both make, at the end."""
    spec = builtin_for(algorithm)
    at_end = tmp_path / "at-end"
    done = train(at_end, spec, "--frames", str(BUDGET), *EVALUATION, "--set", f"meta.eval_frequency={BUDGET}")
    assert done.code == 0, done.stderr
    only_at_end = final_state(at_end)
    assert_same_run(overlapped_from_start(tmp_path_factory, spec), only_at_end, evaluated_after=BUDGET - 1)
    every_1000 = reference_state(tmp_path_factory, spec, "--frames", str(BUDGET))  # tests/test_resume.py's
    assert_same_training(every_1000, only_at_end)


@pytest.fixture(scope="module", params=ALGORITHMS)
def half_trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Two runs trained to HALF: "tied" (its learning rate a schedule tied to max_frame) and "plain"
    (evaluating EVALUATION, which the refusals below never touch, and the start of
    test_a_new_evaluation_cadence's run)."""
    spec = builtin_for(request.param)
    home = tmp_path_factory.mktemp(f"half-{request.param}") / "runs"
    tied = "agent.optimizer.lr=" + json.dumps({"kind": "linear", "start": initial_lr(spec), "end": 0})
    assert train(home, spec, "--frames", str(HALF), "--name", "tied", "--set", tied).code == 0
    assert train(home, spec, "--frames", str(HALF), "--name", "plain", *EVALUATION).code == 0
    return spec, home


@pytest.mark.parametrize(
    ("reference", "edit", "setting"),
    [
        ("plain", ["--set", "agent.optimizer.lr=0.0001"], "agent.optimizer.lr"),
        ("plain", ["--set", "agent.network.hidden=[32]"], "agent.network.hidden"),
        ("plain", ["--set", "env.id=Acrobot-v1"], "env.id"),
        ("plain", ["--set", "meta.seed=7"], "meta.seed"),
        ("tied", ["--frames", str(BUDGET)], "meta.max_frame"),
    ],
)
def test_inconsistent_edits_are_refused_and_change_nothing(
    half_trained: tuple[str, Path], reference: str, edit: list[str], setting: str
) -> None:
    _, home = half_trained
    before = snapshot_of(home)
    refused = invoke(home, "resume", reference, "--frames", str(BUDGET), *edit)
    assert refused.code == 2, refused.stderr
    assert "edit refused" in refused.stderr and setting in refused.stderr and "Traceback" not in refused.stderr
    for header in ("setting", "old value", "new value", "why"):
        assert header in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: edit refused: {setting}")
    assert snapshot_of(home) == before


def test_the_tied_schedule_refusal_says_why(half_trained: tuple[str, Path]) -> None:
    _, home = half_trained
    refused = invoke(home, "resume", "tied", "--frames", str(BUDGET))
    assert "agent.optimizer.lr is tied to max_frame" in refused.stderr


def test_resume_with_nothing_to_do_or_contradictory_targets(half_trained: tuple[str, Path]) -> None:
    _, home = half_trained
    before = snapshot_of(home)
    done = invoke(home, "resume", "plain")  # requeue-safe: nothing to do is success, and writes nothing
    assert done.code == 0, done.stderr
    assert "nothing to do: run " in done.stderr and f"has trained {HALF:,} of its {HALF:,} frames" in done.stderr
    as_json = invoke(home, "resume", "plain", "--json")
    assert as_json.code == 0 and as_json.json()["nothing_to_do"] is True
    both = invoke(home, "resume", "plain", "--frames", "20k", "--more", "1k")
    assert both.code == 2 and "not both" in both.stderr
    lower = invoke(home, "resume", "plain", "--frames", "1000")
    assert lower.code == 2 and "meta.max_frame" in lower.stderr and "below the" in lower.stderr
    unknown = invoke(home, "resume", "nosuch")
    assert unknown.code == 2 and "no run matches" in unknown.stderr
    assert snapshot_of(home) == before


def test_fork_branches_a_new_run_and_leaves_the_parent_untouched(half_trained: tuple[str, Path]) -> None:
    spec, home = half_trained
    before = snapshot_of(home)
    parent = rlrun(home, "show", "plain", "--json").json()["run"]["id"]
    forked = invoke(
        home,
        "resume",
        "plain",
        "--fork",
        "--frames",
        str(BUDGET),
        "--set",
        f"agent.optimizer.lr={initial_lr(spec) / 2}",
        "--json",
    )
    assert forked.code == 0, forked.stderr
    child = forked.json()["run_id"]
    assert child != parent and forked.json()["status"] == "finished"
    with Registry.open(home, create=False) as registry:
        fork, original = registry.get_run(child), registry.get_run(parent)
    assert fork.run.parent_id == parent and original.forks == [child]
    assert [(r.revision, r.frame) for r in fork.spec_revisions] == [(0, 0), (1, HALF)]
    assert json.loads(fork.spec_revisions[1].diff_json)[0]["path"] == "agent.optimizer.lr"
    assert [(a.kind, a.start_frame) for a in fork.attempts] == [("fork", HALF)]
    assert {s.frame for s in fork.sessions} == {BUDGET}
    rows, files = snapshot_of(home)
    old_rows, old_files = before
    assert [f for f in files if not f[0].startswith(child)] == old_files
    runs = [r for r in rows["runs"] if r[0] != child]
    assert runs == old_rows["runs"]
    refused = invoke(home, "resume", "plain", "--fork", "--set", "agent.network.hidden=[8]")
    assert refused.code == 2 and "agent.network.hidden" in refused.stderr


def test_a_live_run_is_refused_naming_host_and_pid(tmp_path: Path) -> None:
    home = tmp_path / "live"
    process = zygote.start(
        ["train", builtin_for(ALGORITHMS[0]), *CADENCE, "--frames", "10M"],
        env=cli_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            rlrun(home, "ls", "--json").stdout.strip() in ("", "[]")
            or rlrun(home, "ls", "--json").json()[0]["frames_done"] == 0
        ):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        refused = invoke(home, "resume", "latest", "--more", "1k")
        assert refused.code == 2 and f"pid {process.pid}" in refused.stderr and "still running" in refused.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 128 + signal.SIGTERM
    assert rlrun(home, "ls", "--json").json()[0]["status"] == "preempted"
