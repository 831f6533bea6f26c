"""TD3+BC and IQL (issue 54): offline from a dataset of continuous actions, then online from
batches mixed by `data.mixing`. One tiny dataset (the built-ins' recipe: a 150-frame sac_pendulum run,
one episode recorded) serves both algorithms. One run per algorithm is SIGKILLed right after its
snapshot mid-offline, then (resumed) at the switch, then (resumed again) mid-online, then SIGTERMed
mid-episode online, and resumed to the end: the final snapshot is the uninterrupted run's bit for
bit, every attempt recorded exact. IQL's run normalises observations by the dataset's statistics
(`data.normalize`, as CORL's IQL does), so that chain covers the fixed statistics too: in every
snapshot, the dataset's mean and variance. A resume that edits `data.mixing` or `data.normalize` is
refused. A PBT population of IQL runs across the switch, stopped online and resumed, is the one never
stopped. The mixing rule itself: tests/unit/test_mixing.py; the normaliser's: tests/unit/test_normalize.py."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import environment, invoke, run_attempts, run_cli, trials
from same_run import assert_same_run, final_state

from rlrun.algorithms import agent_class
from rlrun.session import metrics_log
from rlrun.spec import builtin_document
from rlrun.testhooks import CRASH_ENV, SIGNAL_AT_ENV

pytestmark = pytest.mark.slow  # real trainings

minari = pytest.importorskip("minari", reason="learning from a dataset needs the minari extra")

DATASET = "rlrun/pendulum-sac-tiny-v0"  # this module's own: the built-ins' is bigger
SETTINGS = [
    "--frames",
    "400",
    *("--set", "meta.offline_updates=200"),  # snapshots at 100 (offline), 200 (the switch), 300 (online), 400
    *("--set", "meta.checkpoint_frequency=100"),
    *("--set", "meta.log_frequency=100"),
    *("--set", "meta.eval_frequency=400"),
    *("--set", "meta.num_eval_episodes=1"),
    *("--set", f"data.dataset={DATASET}"),
    *("--set", "data.recipe.frames=150"),
    *("--set", "data.recipe.episodes=1"),
    *("--set", "agent.network.hidden=[16, 16]"),
    *("--set", "agent.batch_size=16"),
]


NORMALIZED = {"td3bc": False, "iql": True}
"""Which algorithm's run learns with `data.normalize`."""


def settings(algorithm: str) -> list[str]:
    return [*SETTINGS, *(("--set", "data.normalize=true") if NORMALIZED[algorithm] else ())]


@pytest.fixture(scope="module", params=list(NORMALIZED))
def straight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The uninterrupted run of each algorithm's built-in (the first records the dataset)."""
    spec = f"{request.param}_pendulum"
    home = tmp_path_factory.mktemp(request.param) / "runs"
    done = run_cli(home, "train", spec, *settings(request.param))
    assert done.code == 0, done.stderr
    return spec, home


def test_kill_9_mid_offline_at_the_switch_and_mid_online_then_sigterm_resumes_bit_exact(
    straight: tuple[str, Path], tmp_path: Path
) -> None:
    spec, reference_home = straight
    home = tmp_path / "runs"
    crash = {CRASH_ENV: "checkpoint-recorded#1"}  # each process dies after its first snapshot
    killed = run_cli(home, "train", spec, *settings(spec.split("_")[0]), env=crash)
    assert killed.code == -signal.SIGKILL, killed.stderr
    for where in ("at the switch", "mid-online"):
        killed = run_cli(home, "resume", "latest", env=crash)
        assert killed.code == -signal.SIGKILL, (where, killed.stderr)
    stopped = run_cli(home, "resume", "latest", env={SIGNAL_AT_ENV: "350"})  # a preemption mid-episode
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    resumed = run_cli(home, "resume", "latest")
    assert resumed.code == 0, resumed.stderr
    attempts = run_attempts(home)
    assert [a.start_frame for a in attempts] == [0, 100, 200, 300, 350], "mid-offline, the switch, online twice"
    assert not any(a.approximate for a in attempts), "recorded exact"
    reference = _state(reference_home)
    assert_same_run(reference, _state(home))
    clock = reference["sessions"][0]["saved"].meta.clock
    assert (clock.frame, clock.opt_step) == (400, 400), "200 offline gradient steps, then one per online frame"


def test_the_log_has_the_algorithm_columns_and_a_mixing_edit_is_refused(
    straight: tuple[str, Path], tmp_path: Path
) -> None:
    spec, reference_home = straight
    algorithm = spec.split("_")[0]
    declared = agent_class(algorithm).METRICS
    with environment(reference_home):
        from rlrun import paths
        from rlrun.registry import Registry

        with Registry.open(reference_home, create=False) as registry:
            run = registry.resolve("latest")
    log = metrics_log.read(metrics_log.path(paths.session_dir(reference_home, run.id, 0)))
    assert tuple(log) == metrics_log.columns(declared)
    for name in declared:
        assert any(value is not None for value in log[name][2:]), f"{name} never logged online"
    home = tmp_path / "runs"
    shutil.copytree(reference_home, home)
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    for key, value in (("data.mixing", "0.25"), ("data.normalize", str(not NORMALIZED[algorithm]).lower())):
        refused = invoke(home, "resume", "latest", "--frames", "500", "--set", f"{key}={value}")
        assert refused.code == 2, refused.stderr
        assert refused.stderr.strip().splitlines()[-1].startswith(f"error: edit refused: {key}"), refused.stderr
        assert sorted(p.relative_to(home) for p in home.rglob("*")) == before, "nothing written"
    saved = _state(reference_home)["sessions"][0]["saved"]
    assert ("normalize" in saved.tensors) == NORMALIZED[algorithm]
    if NORMALIZED[algorithm]:  # the dataset's statistics, fixed: what 400 frames of training left them
        import gymnasium as gym
        import numpy as np

        from rlrun import data
        from rlrun.spec import recorded_spec

        with environment(reference_home):
            dataset = recorded_spec(saved.meta.spec).data
            assert dataset is not None
            env = gym.make("Pendulum-v1")
            rows = data.load(dataset, env.observation_space, env.action_space)
        stats = saved.tensors["normalize"]
        observations = rows.obs.astype(np.float64)
        assert np.array_equal(stats["obs_mean"].numpy(), observations.mean(axis=0))
        assert np.array_equal(stats["obs_var"].numpy(), observations.var(axis=0))


def _state(home: Path) -> dict[str, Any]:
    with environment(home):
        return final_state(home)


PBT = ["--scheduler", "pbt", "--population", "2", "--interval", "200"]


def population_spec(folder: Path) -> Path:
    """iql_pendulum as the runs above (data.normalize too), its learning rate searched: two
    generations, the first offline, the second online, the exploit at the switch."""
    document = builtin_document("iql_pendulum")
    document["meta"].update(
        max_frame=400, offline_updates=200, checkpoint_frequency=100, log_frequency=100, eval_frequency=100
    )
    document["meta"]["num_eval_episodes"] = 1
    recipe = {**document["data"]["recipe"], "frames": 150, "episodes": 1}
    document["data"].update(dataset=DATASET, normalize=True, recipe=recipe)
    document["agent"]["batch_size"] = 16
    document["agent"]["network"]["hidden"] = [16, 16]
    document["search"] = {"agent.optimizer.lr": {"loguniform": [1e-4, 1e-3]}}
    path = folder / "population.json"
    path.write_text(json.dumps(document))
    return path


def test_a_population_across_the_switch_stopped_online_then_resumed_is_the_same_population(tmp_path: Path) -> None:
    """PBT on an offline run: the first generation learns offline, the exploit forks at the switch,
    the second learns online. SIGTERM mid-online, `resume search:latest`: the same population as the
    one never stopped, segment for segment, each run bit for bit."""
    spec = population_spec(tmp_path)
    homes = {name: tmp_path / name / "runs" for name in ("straight", "stopped")}
    done = run_cli(homes["straight"], "search", str(spec), *PBT)
    assert done.code == 0, done.stderr
    stopped = run_cli(homes["stopped"], "search", str(spec), *PBT, env={SIGNAL_AT_ENV: "300"})
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    resumed = run_cli(homes["stopped"], "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    a, b = trials(homes["straight"]), trials(homes["stopped"])
    assert [t.number for t in a] == [t.number for t in b] == [0, 1, 2, 3]
    for x, y in zip(a, b, strict=True):
        assert (x.params, x.state, x.value, x.intermediate) == (y.params, y.state, y.value, y.intermediate)
        assert x.state == "complete" and x.run_id is not None and y.run_id is not None
        assert_same_run(final_state(homes["straight"], x.run_id), final_state(homes["stopped"], y.run_id))
