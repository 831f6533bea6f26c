"""`rlrun compare` on real runs (issue 41): two specs x three seeds on CartPole, a twin of one of
them (same spec, same seed), and the runs the bad-input rows need. The numbers are held to rliable
called directly on the same score matrices and bootstrap seed; the gate to bit-identity."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import TINY, heavy_modules, invoke, run_cli, search_spec

from rlrun.compare.comparison import NO_GAP_NOTE
from rlrun.registry import Registry
from rlrun.testhooks import SIGNAL_AT_ENV

pytestmark = pytest.mark.slow  # trains

pytest.importorskip("rliable", reason="rlrun compare needs the compare extra")

# Any count holds the numbers to rliable's; few keep the probability of improvement (a Mann-Whitney U
# per repetition) quick.
REPS = "500"
SHORT = [
    "--set",
    "meta.eval_frequency=500",
    "--set",
    "meta.checkpoint_frequency=500",
    "--set",
    "meta.num_eval_episodes=2",
    "--set",
    "meta.log_frequency=500",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """a1 and its twin a2 (reinforce_cartpole, the same seed), b1 (a2c_cartpole): three sessions
    each, three evaluations each; lone (one session), acro (Acrobot), the search sweep (two trials of
    two sessions), a population (two members, two generations), stopped (no evaluation)."""
    home = tmp_path_factory.mktemp("compare") / "runs"
    trainings = [
        ("a1", "reinforce_cartpole", ["--sessions", "3", *TINY]),
        ("a2", "reinforce_cartpole", ["--sessions", "3", *TINY]),
        ("b1", "a2c_cartpole", ["--sessions", "3", *TINY]),
        ("lone", "reinforce_cartpole", ["--frames", "1000", *SHORT]),
        ("acro", "reinforce_cartpole", ["--sessions", "2", "--frames", "1000", "--set", "env.id=Acrobot-v1", *SHORT]),
    ]
    for name, spec, args in trainings:
        done = invoke(home, "train", spec, "--name", name, *args)
        assert done.code == 0, done.stderr
    # A search of two trials, two sessions each: its trials' runs are what `search:sweep` names.
    document = json.loads(search_spec(home.parent).read_text())
    document["meta"].update(sessions=2, max_frame=1000, eval_frequency=500)
    (home.parent / "search.json").write_text(json.dumps(document))
    searched = invoke(home, "search", str(home.parent / "search.json"), "--trials", "2", "--name", "sweep")
    assert searched.code == 0, searched.stderr
    # A population of two members over two generations of 1,000 frames: four trial runs, two members.
    document["meta"].update(max_frame=2000)
    (home.parent / "pbt.json").write_text(json.dumps(document))
    population = invoke(
        home,
        "search",
        str(home.parent / "pbt.json"),
        "--scheduler",
        "pbt",
        "--population",
        "2",
        "--interval",
        "1000",
        "--name",
        "population",
    )
    assert population.code == 0, population.stderr
    # Stopped by SIGTERM before its first evaluation: a run with no evaluation recorded.
    stopped = run_cli(
        home,
        "train",
        "reinforce_cartpole",
        "--name",
        "stopped",
        "--frames",
        "3000",
        "--set",
        "meta.eval_frequency=2000",
        "--set",
        "meta.checkpoint_frequency=500",
        env={SIGNAL_AT_ENV: "600"},
    )
    assert stopped.code == 143, stopped.stderr
    return home


def compare(home: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return invoke(home, "compare", *args, env=env)


def final_scores(home: Path, name: str) -> list[float]:
    """Each session's last training evaluation, read from the registry, session by session."""
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve(name).id)
    return [
        max((e.frame, e.mean) for e in detail.evaluations if e.session_index == s.index and e.kind == "train")[1]
        for s in sorted(detail.sessions, key=lambda s: s.index)
    ]


def rliable_numbers(scores: dict[str, np.ndarray], seed: int, reps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """rliable called directly, as its README does, after `np.random.seed(seed)`."""
    from rliable import library as rly
    from rliable import metrics

    def aggregate(x: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metrics.aggregate_median(x),
                metrics.aggregate_iqm(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_optimality_gap(x),
            ]
        )

    np.random.seed(seed)
    points, intervals = rly.get_interval_estimates(scores, aggregate, reps=reps)
    names = list(scores)
    np.random.seed(seed)
    pairs = {f"{names[0]},{names[1]}": (scores[names[0]], scores[names[1]])}
    probability, probability_ci = rly.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=reps)
    groups = {
        name: {
            "median": points[name][0],
            "iqm": points[name][1],
            "mean": points[name][2],
            "optimality_gap": points[name][3],
            "median_ci": list(intervals[name][:, 0]),
            "iqm_ci": list(intervals[name][:, 1]),
            "mean_ci": list(intervals[name][:, 2]),
            "optimality_gap_ci": list(intervals[name][:, 3]),
        }
        for name in names
    }
    key = next(iter(pairs))
    return groups, {"probability": float(np.ravel(probability[key])[0]), "ci": list(np.ravel(probability_ci[key]))}


@pytest.mark.parametrize(("normalize", "scale"), [("none", 1.0), ("minmax", 500.0)])
def test_numbers_are_rliables_on_the_same_scores(runs: Path, normalize: str, scale: float) -> None:
    done = compare(runs, "a1", "b1", "--json", "--reps", REPS, "--seed", "7", "--normalize", normalize)
    assert done.code == 0, done.stderr
    report = done.json()
    matrices = {
        "reinforce_cartpole": np.array(final_scores(runs, "a1"))[:, None] / scale,
        "a2c_cartpole": np.array(final_scores(runs, "b1"))[:, None] / scale,
    }
    groups, improvement = rliable_numbers(matrices, 7, int(REPS))
    assert [g["name"] for g in report["groups"]] == list(matrices)
    for group in report["groups"]:
        assert group["seeds"] == 3 and group["runs"] == (["a1"] if group["name"] == "reinforce_cartpole" else ["b1"])
        for key, value in groups[group["name"]].items():
            if normalize == "none" and key.startswith("optimality_gap"):
                continue
            assert group[key] == (list(map(float, value)) if isinstance(value, list) else float(value)), key
    assert report["improvement"] == [{"a": "reinforce_cartpole", "b": "a2c_cartpole", **improvement}]
    assert "verdict" not in report and report["tasks"] == ["CartPole-v1"]
    if normalize == "none":  # issue 53: no optimality gap on raw returns, and a note that says why
        for group in report["groups"]:
            assert "optimality_gap" not in group and "optimality_gap_ci" not in group
        assert report["notes"] == [NO_GAP_NOTE]
    else:
        assert report["notes"] == []


def test_same_command_same_bytes_and_a_figure(runs: Path, tmp_path: Path) -> None:
    outputs = []
    for attempt in ("one", "two"):
        image = tmp_path / f"{attempt}.png"
        done = compare(runs, "a1", "b1", "--json", "--reps", REPS, "-o", str(image))
        assert done.code == 0, done.stderr
        assert f"wrote {image}" in done.stderr
        outputs.append((done.stdout, hashlib.sha256(image.read_bytes()).hexdigest()))
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.stat().st_size > 10_000
    assert outputs[0] == outputs[1]
    table = compare(runs, "a1", "b1", "--reps", REPS)
    assert table.code == 0 and "IQM" in table.stdout and "P(reinforce_cartpole > a2c_cartpole)" in table.stdout
    assert "IQM" not in table.stderr  # the table is the answer (stdout); stderr has the notes
    said = table.stdout + table.stderr  # wherever the table goes
    header = next(line for line in said.splitlines() if line.startswith("group "))
    assert "optimality gap" not in header and f"note: {NO_GAP_NOTE}" in said  # issue 53: raw returns
    normalised = compare(runs, "a1", "b1", "--reps", REPS, "--normalize", "minmax")
    said = normalised.stdout + normalised.stderr
    assert "optimality gap" in next(line for line in said.splitlines() if line.startswith("group "))


def test_a_retrained_twin_is_identical(runs: Path) -> None:
    done = compare(runs, "a2", "--baseline", "a1", "--gate", "--json")
    assert done.code == 0, done.stderr
    assert done.json()["verdict"] == "identical"
    said = compare(runs, "a2", "--baseline", "a1", "--gate", "-o", str(runs.parent / "twins.png"))
    assert said.code == 0 and "verdict: identical" in said.stdout and "nothing drawn" in said.stderr


def test_the_gate_on_different_specs(runs: Path) -> None:
    from rlrun.cli.compare import GATE_EXIT_CODES

    done = compare(runs, "b1", "--baseline", "a1", "--gate", "--json", "--reps", REPS)
    report = done.json()
    low, high = report["improvement"][0]["ci"]
    expected = "improved" if low > 0.5 else "regressed" if high < 0.5 else "inconclusive"
    assert report["verdict"] == expected and done.code == GATE_EXIT_CODES[expected], done.stderr
    assert [g["name"] for g in report["groups"]] == ["new", "baseline"]
    without_gate = compare(runs, "b1", "--baseline", "a1", "--json", "--reps", REPS)
    assert without_gate.code == 0 and without_gate.json()["verdict"] == expected


def test_a_search_compares_its_trials_and_a_population_its_members(runs: Path) -> None:
    from rlrun.catalog import lookup_search

    trial_runs = [t.run_id for t in lookup_search("search:sweep", home=runs).detail.trials]
    by_name = compare(runs, "search:sweep", "a1", "--by", "name", "--json", "--reps", "200")
    assert by_name.code == 0, by_name.stderr
    assert [(g["name"], g["seeds"]) for g in by_name.json()["groups"]] == [(r, 2) for r in trial_runs] + [("a1", 3)]
    by_spec = compare(runs, "search:sweep", "b1", "--json", "--reps", "200")  # both trials: one spec, four seeds
    assert [(g["name"], g["seeds"]) for g in by_spec.json()["groups"]] == [
        ("reinforce_cartpole", 4),
        ("a2c_cartpole", 3),
    ]
    # A population's members: each member's newest segment, not every segment.
    found = lookup_search("search:population", home=runs)
    trial_run = {t.id: t.run_id for t in found.detail.trials}
    newest = {line.member: trial_run[line.trial_id] for line in sorted(found.lineage, key=lambda line: line.generation)}
    assert len(found.detail.trials) == 4 and len(newest) == 2
    members = compare(runs, "search:population", "a1", "--by", "name", "--json", "--reps", "200")
    assert members.code == 0, members.stderr
    expected = [run for run in trial_run.values() if run in newest.values()]  # in trial order
    assert [g["name"] for g in members.json()["groups"]] == [*expected, "a1"]
    missing = compare(runs, "search:nothing", "a1")
    assert missing.code == 2 and missing.stderr.count("error:") == 1, missing.stderr


def test_an_env_without_a_reference_keeps_raw_scores_and_says_so(runs: Path) -> None:
    done = compare(runs, "a1", "b1", "--json", "--reps", "200", "--normalize", "human")
    assert done.code == 0, done.stderr
    assert "no published human" in done.json()["notes"][0] and "note: CartPole-v1" in done.stderr
    raw = compare(runs, "a1", "b1", "--json", "--reps", "200")
    assert raw.json()["groups"] == [
        {key: value for key, value in group.items() if not key.startswith("optimality_gap")}
        for group in done.json()["groups"]
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["a1", "lone", "--by", "name"], "group lone has 1 seed on CartPole-v1"),
        (["a1", "stopped", "--by", "name"], "session s0 has no evaluation recorded"),
        (["a1", "acro", "b1", "--by", "algo"], "whose raw returns are on different scales"),
        (["a1", "acro", "--by", "name", "--normalize", "minmax"], "group a1 has no runs on Acrobot-v1"),
        (["a1", "a2"], "are one group (reinforce_cartpole)"),
        (["a1", "b1", "--gate"], "add --baseline"),
        (["a1", "b1", "--by", "colour"], "--by 'colour' is not one of spec, algo, name"),
        (["a1", "b1", "-o", "report.gif"], "cannot write a .gif"),
        (["a1", "--baseline", "a1"], "both compared and the baseline"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs: Path, args: list[str], says: str) -> None:
    done = compare(runs, *args)
    assert done.code == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert done.stdout == ""


def test_without_rliable_it_says_how_to_install_it(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rliable", None)  # what an environment without the extra imports
    done = compare(runs, "a1", "b1")
    assert done.code == 2 and "rlrun compare needs rliable: pip install" in done.stderr and "[compare]" in done.stderr


def test_compare_imports_neither_torch_nor_gymnasium(runs: Path, tmp_path: Path) -> None:
    for args in (["a1", "b1", "--reps", "100", "-o", str(tmp_path / "r.png")], ["a2", "--baseline", "a1", "--gate"]):
        loaded = heavy_modules(runs, "compare", *args)
        assert "torch" not in loaded and "gymnasium" not in loaded, (args, loaded)


def still_training(runs: Path, tmp_path: Path, name: str) -> Path:
    """A copy of the home in which run `name` is still running, at frame 3k of 30k: its row and its
    sessions' stored running, its sessions heartbeating (a heartbeat a day ahead), its budget ten
    times what it has trained. What the registry holds for a run in training, with no training."""
    home = tmp_path / "home"
    shutil.copytree(runs, home)
    with sqlite3.connect(home / "registry.sqlite") as db:
        (run_id,) = db.execute("SELECT id FROM runs WHERE name = ?", (name,)).fetchone()
        db.execute("UPDATE runs SET status = 'running', max_frame = 30000, finished_at = NULL WHERE id = ?", (run_id,))
        db.execute(
            "UPDATE sessions SET status = 'running', heartbeat_at = ?, host = NULL, pid = NULL, finished_at = NULL"
            " WHERE run_id = ?",
            (time.time() + 86_400, run_id),
        )
    return home


def test_the_gate_refuses_a_run_still_running_unless_allowed(runs: Path, tmp_path: Path) -> None:
    """Issue 53: a gate that judged a run in training against a finished baseline said "regressed"."""
    from rlrun.cli.compare import GATE_EXIT_CODES

    home = still_training(runs, tmp_path, "b1")
    image = tmp_path / "report.png"
    refused = compare(home, "b1", "--baseline", "a1", "--gate", "--reps", REPS, "-o", str(image))
    assert refused.code == 2, refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "run b1 (at frame 3k of 30k) is still running" in errors[0], refused.stderr
    assert "--allow-running" in errors[0] and refused.stdout == "" and not image.exists()
    assert compare(home, "a1", "--baseline", "b1", "--gate", "--reps", REPS).code == 2  # on either side
    allowed = compare(home, "b1", "--baseline", "a1", "--gate", "--allow-running", "--json", "--reps", REPS)
    report = allowed.json()
    assert allowed.code == GATE_EXIT_CODES[report["verdict"]], allowed.stderr
    assert "note: run b1 (at frame 3k of 30k) is still running" in allowed.stderr
    assert any("still running" in note for note in report["notes"])
    plain = compare(home, "a1", "b1", "--json", "--reps", REPS)  # no gate: compared, with the note
    assert plain.code == 0 and "note: run b1 (at frame 3k of 30k) is still running" in plain.stderr
    alone = compare(home, "a1", "b1", "--allow-running")
    assert alone.code == 2 and "--allow-running is for --gate" in alone.stderr


def readme_gate_lines() -> list[list[str]]:
    """The README's gate, as its lines would be typed: each `rlrun` command of the code block that
    holds `--gate`, in order, comments dropped."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.split(r"\n\s*\n", readme)
    block = next(b for b in blocks if "rlrun compare" in b and "--gate" in b and b.startswith("    "))
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip().startswith("rlrun")]


def test_the_readmes_gate_lines_are_a_sequence_a_user_types(runs: Path) -> None:
    """Issue 53: the README gated a run `new` it never trained against `first`, one seed, so every
    pair but an identical one was bad input. Each run its gate names is trained above it, with two
    seeds at least; trained as written (at the fixture's tiny budget: a1 and a2 are those two
    commands), the gate passes: identical, bit for bit."""
    lines = readme_gate_lines()
    gate = lines[-1]
    assert gate[:2] == ["rlrun", "compare"] and "--gate" in gate, gate
    new, baseline = gate[2], gate[gate.index("--baseline") + 1]
    trained: dict[str, list[str]] = {}
    for line in lines[:-1]:
        if line[:2] == ["rlrun", "train"]:
            trained[line[line.index("--name") + 1]] = line
    for name in (new, baseline):
        assert name in trained, f"the README gates {name} but never trains it"
        line = trained[name]
        assert "--sessions" in line and int(line[line.index("--sessions") + 1]) >= 2, line
        assert line[2] == "reinforce_cartpole" and line[line.index("--sessions") + 1] == "3"  # as a1 and a2 were
    typed = [{new: "a2", baseline: "a1"}.get(word, word) for word in gate[2:]]
    done = compare(runs, *typed)
    assert done.code == 0 and "verdict: identical" in done.stdout + done.stderr, done.stderr


def test_the_default_bootstrap_is_a_first_look_and_shows_its_progress(runs: Path) -> None:
    """Issue 53: 50,000 repetitions by default took minutes with nothing shown. The default is 2,000
    (rliable's for performance profiles, the RL Zoo's), `--reps 50000` the paper's; on a terminal a
    progress bar runs over the bootstrap (on stderr; a pipe gets the result alone)."""
    from rlrun.compare import DEFAULT_REPS

    done = compare(runs, "a1", "b1", "--json")
    assert done.code == 0 and done.json()["reps"] == DEFAULT_REPS == 2000, done.stderr
    assert "bootstrap" not in done.stderr  # not a terminal: no bar
    shown = compare(runs, "a1", "b1", "--reps", "300", env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"})
    assert shown.code == 0 and "bootstrap" in shown.stderr and "906/906" in shown.stderr, shown.stderr
    helped = compare(runs, "--help")
    assert "2000" in helped.stdout and "50000" in helped.stdout and "rliable" in helped.stdout
