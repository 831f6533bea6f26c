"""Training metrics: each session's log has the documented columns for every algorithm; a resume
after a kill cuts it (and the TensorBoard files) back so nothing is duplicated; `show --metrics`,
`plot --metric` and `export --metrics` read it. (That an interrupted-and-resumed log equals the
straight one in its training columns is part of `assert_same_run`, for every algorithm and every
way of interrupting, in test_resume.py.)"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import zygote
from helpers import builtin_for, cli_env, fast, rlrun
from same_run import ALGORITHMS, assert_same_run, final_state, newest_checkpoint_frame, wait_for

from rlrun import paths, snapshot, testhooks
from rlrun.algorithms import agent_class
from rlrun.registry import Registry
from rlrun.session import metrics_log, tensorboard_log

pytestmark = pytest.mark.slow  # real trainings in subprocesses

FRAMES = 3000
LOG = 250
CADENCE = [
    "--set",
    f"meta.log_frequency={LOG}",
    "--set",
    "meta.eval_frequency=1000",
    "--set",
    "meta.checkpoint_frequency=1000",
    "--set",
    "meta.num_eval_episodes=2",
]


def train(home: Path, algorithm: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    spec = builtin_for(algorithm)
    return zygote.start(
        ["train", spec, *CADENCE, *fast(spec), *args],
        env={**cli_env(home), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def trained(home: Path, algorithm: str, *args: str) -> Path:
    process = train(home, algorithm, "--frames", str(FRAMES), *args)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return home


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One short training per algorithm, in one home, named after the algorithm."""
    home = tmp_path_factory.mktemp("metrics") / "runs"
    for algorithm in ALGORITHMS:
        trained(home, algorithm, "--name", algorithm)
    return {algorithm: home for algorithm in ALGORITHMS}


def session_log(home: Path, reference: str, index: int = 0) -> Path:
    with Registry.open(home, create=False) as registry:
        run = registry.resolve(reference)
    return metrics_log.path(paths.session_dir(home, run.id, index))


def newest_meta(home: Path, reference: str) -> snapshot.SnapshotMeta:
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve(reference).id)
    return snapshot.read_meta(home / max(detail.checkpoints, key=lambda c: c.frame).path)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_log_has_the_documented_columns(homes: dict[str, Path], algorithm: str) -> None:
    home = homes[algorithm]
    declared = agent_class(algorithm).METRICS
    log = metrics_log.read(session_log(home, algorithm))
    assert tuple(log) == metrics_log.columns(declared)
    frames = log["frame"]
    assert [int(f or 0) // LOG for f in frames] == list(range(1, FRAMES // LOG + 1)), "one row per log period"
    for name in (*metrics_log.COMMON, *declared):
        assert any(value is not None for value in log[name]), f"{name} never logged"
    meta = newest_meta(home, algorithm)
    assert set(meta.last_losses) <= set(declared), "the algorithm reports a scalar it does not declare"
    raw = json.loads((home / next(iter(_checkpoint_paths(home, algorithm))) / "meta.json").read_text())
    assert "metrics" not in raw and "recent_lengths" in raw


def _checkpoint_paths(home: Path, reference: str) -> list[str]:
    with Registry.open(home, create=False) as registry:
        return [c.path for c in registry.get_run(registry.resolve(reference).id).checkpoints]


def test_show_metrics_is_torch_free_and_shows_the_headline_scalars(homes: dict[str, Path]) -> None:
    home = homes["ppo"]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rlrun", "show", "ppo", "--metrics"],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "gymnasium", "sqlalchemy", "tensorboard"}
    shown = done.stdout.splitlines()
    assert f"metrics of s0: {FRAMES // LOG} rows" in "\n".join(shown)
    approx_kl = next(line for line in shown if line.split()[:1] == ["approx_kl"])
    latest = metrics_log.latest(metrics_log.read(session_log(home, "ppo"))["approx_kl"])
    assert approx_kl.split()[1] == f"{latest:.4g}"
    as_json = rlrun(home, "show", "ppo", "--metrics", "--json").json()
    assert as_json["session"] == [0] * (FRAMES // LOG) and "approx_kl" in as_json


def test_plot_a_metric_and_refuse_an_unknown_one(homes: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    home, image = homes["ppo"], tmp_path / "kl.png"
    done = rlrun(home, "plot", "ppo", "a2c", "--metric", "approx_kl", "-o", str(image))
    assert done.code == 0, done.stderr
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    wrong = tmp_path / "wrong.png"
    refused = rlrun(home, "plot", "ppo", "--metric", "aprox_kl", "-o", str(wrong))
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.code == 2 and len(errors) == 1 and "did you mean 'approx_kl'?" in errors[0], refused.stderr
    assert "Traceback" not in refused.stderr and not wrong.exists()


def test_export_every_session_with_run_and_session_columns(homes: dict[str, Path], tmp_path: Path) -> None:
    home, out = homes["dqn"], tmp_path / "metrics.csv"
    done = rlrun(home, "export", "dqn", "sac", "--metrics", "-o", str(out))
    assert done.code == 0, done.stderr
    with open(out, newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 2 * FRAMES // LOG and {r["run"] for r in rows} == {
        session_log(home, name).parent.parent.name for name in ("dqn", "sac")
    }
    assert {r["session"] for r in rows} == {"0"} and {"q_mean", "alpha", "td_error"} <= set(rows[0])
    assert rlrun(home, "export", "dqn", "-o", str(tmp_path / "x.csv")).code == 2  # what to export?
    piped = rlrun(home, "export", "dqn", "--metrics")
    assert piped.code == 0 and piped.stdout.count("\n") == FRAMES // LOG + 1


def test_the_python_api_gives_columns(homes: dict[str, Path]) -> None:
    from rlrun import metrics

    columns = metrics("reinforce", home=homes["reinforce"])
    assert columns["session"] == [0] * (FRAMES // LOG) and len(columns["entropy"]) == FRAMES // LOG


# ---------------------------------------------------------------------------------------------
# A kill after the log ran ahead of the newest snapshot


def test_a_resume_after_a_kill_cuts_back_the_log_and_the_tensorboard_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process hangs writing its snapshot at frame 5000, after flushing rows (and events) up
    to there, and is killed: the newest complete snapshot is at 4000. The resume must drop what
    was logged after it, in the log and in TensorBoard, and go on exactly."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator", reason="the tensorboard extra is not installed"
    )
    monkeypatch.setenv(tensorboard_log.ENABLE_ENV, "1")  # the suite's default is off (tests/conftest.py)
    frames = ["--frames", "6000"]
    straight = tmp_path / "straight"
    process = train(straight, "ppo", *frames)
    assert process.wait(timeout=600) == 0
    home = tmp_path / "killed"
    process = train(home, "ppo", *frames, env={testhooks.HANG_ENV: snapshot.snapshot_name(5000)})
    wait_for(lambda: any(home.glob("*/s0/checkpoints/.f000000005000.tmp-*/state.pt")), process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert newest_checkpoint_frame(home) == 4000
    log = session_log(home, "latest")
    assert max(f for f in metrics_log.read(log)["frame"] if f is not None) == 5000, "the log did not run ahead"
    resumed = rlrun(home, "resume")
    assert resumed.code == 0, resumed.stderr
    assert_same_run(final_state(straight), final_state(home))

    def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
        accumulator = event_accumulator.EventAccumulator(str(folder / "tb"))
        accumulator.Reload()
        return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}

    a, b = scalars(session_log(straight, "latest").parent), scalars(log.parent)
    assert set(a) == set(b) and {"train/approx_kl", "rollout/return_mean", "eval/return_mean"} <= set(b)
    for tag, points in b.items():
        steps = [step for step, _ in points]
        assert steps == sorted(set(steps)), f"{tag}: duplicated or out-of-order steps {steps}"
        assert steps == [step for step, _ in a[tag]], tag
        if tag != "time/fps":
            assert points == a[tag], tag
    assert [s for s, _ in b["rollout/return_mean"]] == metrics_log.read(log)["frame"]


def test_a_fork_starts_its_log_with_its_parents_rows(tmp_path: Path) -> None:
    """A fork's sessions begin at the parent's snapshot, and so do their logs: the parent's rows up
    to the fork frame, then the fork's own."""
    home = trained(tmp_path / "runs", "reinforce")
    forked = rlrun(home, "resume", "latest", "--fork", "--frames", str(2 * FRAMES))
    assert forked.code == 0, forked.stderr
    parent, child = metrics_log.read(session_log(home, "latest~1")), metrics_log.read(session_log(home, "latest"))
    assert child["frame"] == [LOG * i for i in range(1, 2 * FRAMES // LOG + 1)]
    assert {name: values[: FRAMES // LOG] for name, values in child.items()} == parent
