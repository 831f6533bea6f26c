"""A real training through the command line: registry rows, checkpoint files and their hashes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY, cli_env, invoke, popen, rlrun

from rlrun import snapshot
from rlrun.errors import install_hint
from rlrun.registry import Registry

pytestmark = pytest.mark.slow  # real trainings in subprocesses


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    home = tmp_path_factory.mktemp("trained") / "runs"
    result = invoke(home, "train", "reinforce_cartpole", *TINY, "--name", "tiny", "--json")
    assert result.code == 0, result.stderr
    return home, result.json(), result.stderr


def test_train_prints_json_on_stdout_and_plain_progress_on_stderr(trained: tuple[Path, dict, str]) -> None:
    _, document, stderr = trained
    assert document["status"] == "finished" and document["name"] == "tiny"
    assert [s["frame"] for s in document["sessions"]] == [3000]
    assert "s0 eval at 1k" in stderr and "s0 finished at frame 3k" in stderr
    assert f"run {document['run_id']} (tiny): reinforce_cartpole" in stderr


def test_registry_records_run_sessions_evaluations_and_spec(trained: tuple[Path, dict, str]) -> None:
    home, document, _ = trained
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(document["run_id"])
    assert detail.run.status == "finished" and detail.run.name == "tiny" and detail.run.max_frame == 3000
    (session,) = detail.sessions
    assert (session.status, session.frame, session.seed) == ("finished", 3000, 0)
    assert session.episode > 0 and session.opt_step > 0
    assert [e.frame for e in detail.evaluations] == [1000, 2000, 3000]
    assert all(e.episodes == 2 and e.min <= e.mean <= e.max for e in detail.evaluations)
    assert session.best_eval == max(e.mean for e in detail.evaluations)
    (revision,) = detail.spec_revisions
    assert json.loads(revision.spec_json)["meta"]["max_frame"] == 3000 and revision.frame == 0


def test_checkpoints_are_complete_hashed_and_loadable(trained: tuple[Path, dict, str]) -> None:
    home, document, _ = trained
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(document["run_id"])
    kinds = {c.frame: c.kind for c in detail.checkpoints}
    assert kinds[3000].split("+")[-1] == "final" and "periodic" in kinds[3000]
    assert set(kinds) >= {1000, 2000, 3000}
    for checkpoint in detail.checkpoints:
        path = home / checkpoint.path
        assert snapshot.verify(path, checkpoint.sha256)
        state = torch.load(path / "state.pt", weights_only=True)
        assert set(state["agent"]["policy"]) == {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}
        meta = json.loads((path / "meta.json").read_text())
        assert meta["clock"]["frame"] == checkpoint.frame
        assert checkpoint.size_bytes == sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    leftovers = [p for p in home.rglob(".*tmp*")]
    assert leftovers == []
    manifest = json.loads((home / document["run_id"] / "run.json").read_text())
    assert manifest["run"]["id"] == document["run_id"]
    assert manifest["spec_revisions"][0]["spec"]["name"] == "reinforce_cartpole"


def test_a_tampered_checkpoint_fails_verification(trained: tuple[Path, dict, str], tmp_path: Path) -> None:
    home, document, _ = trained
    with Registry.open(home, create=False) as registry:
        checkpoint = registry.get_run(document["run_id"]).checkpoints[-1]
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(home / checkpoint.path, copy)
    state = copy / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    with pytest.raises(snapshot.SnapshotError, match="altered"):
        snapshot.read(copy, checkpoint.sha256)


def test_ls_and_show(trained: tuple[Path, dict, str]) -> None:
    home, document, _ = trained
    listed = rlrun(home, "ls", "--json")
    assert listed.code == 0
    (row,) = listed.json()
    assert row["id"] == document["run_id"] and row["status"] == "finished" and row["frames_done"] == 3000
    table = rlrun(home, "ls")
    assert document["run_id"] in table.stdout and "reinforce_cartpole" in table.stdout and table.stderr == ""
    for reference in ("latest", "1", "tiny", document["run_id"], document["run_id"][:8]):
        shown = rlrun(home, "show", reference, "--json")
        assert shown.code == 0, shown.stderr
        assert shown.json()["run"]["id"] == document["run_id"]
        assert f"→ run {document['run_id']}" in shown.stderr
    human = rlrun(home, "show", "tiny")
    assert "checkpoints" in human.stdout and "evaluations" in human.stdout


def test_bad_references_exit_2_with_one_line(trained: tuple[Path, dict, str]) -> None:
    home, _, _ = trained
    for reference, message in (("nosuchrun", "no run matches"), ("latest~4", "latest~4"), ("7", "7")):
        result = rlrun(home, "show", reference)
        assert result.code == 2 and "Traceback" not in result.stderr
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_registry_commands_never_import_torch_or_gymnasium(trained: tuple[Path, dict, str]) -> None:
    home, _, _ = trained
    probe = (
        "import sys\n"
        "from rlrun.cli import main\n"
        "sys.argv = ['rlrun'] + sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'gymnasium'})\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    for args in (["ls"], ["ls", "--json"], ["show", "latest"], ["show", "latest", "--json"]):
        done = subprocess.run([sys.executable, "-c", probe, *args], env=cli_env(home), capture_output=True, text=True)
        assert "HEAVY=\n" in done.stderr, (args, done.stderr)


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    cases = [
        (["train", "reinforce_cartpole", "--set", "meta.max_fram=5"], 'did you mean "max_frame"'),
        (["train", "reinforce_cartpole", "--frames", "12q"], "--frames: '12q' is not a size"),
        (["train", "reinforce_cartpol"], 'did you mean "reinforce_cartpole"'),
        (["train", "reinforce_cartpole", "--name", "latest"], 'run name "latest" cannot be used'),
        (["train", "reinforce_cartpole", "--set", "env.id=Pendulum-v1"], "reinforce cannot train on Pendulum-v1"),
        (["show", "latest"], "no runs"),
    ]
    for args, message in cases:
        result = rlrun(home, *args)
        assert result.code == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert not home.exists(), f"{args} wrote {list(home.rglob('*'))}"
    listed = rlrun(home, "ls")
    assert listed.code == 0 and "no runs" in listed.stderr and not home.exists()


@pytest.mark.parametrize(
    ("module", "spec", "env_id", "extra"),
    [
        ("Box2D", "ppo_lunarlander", "LunarLander-v3", "box2d"),
        ("mujoco", "sac_halfcheetah", "HalfCheetah-v5", "mujoco"),
        ("ale_py", "dqn_pong", "ALE/Pong-v5", "atari"),
    ],
)
def test_an_env_whose_package_is_missing_names_the_extra(
    tmp_path: Path, module: str, spec: str, env_id: str, extra: str
) -> None:
    """The physics package shadowed by a module that fails to import, as on a machine without the extra."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / f"{module}.py").write_text(f"raise ImportError('No module named {module}')\n")
    home = tmp_path / "fresh"
    path = os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "rlrun", "train", spec, "--frames", "1k"],
        env={**cli_env(home), "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"{env_id} needs a package that is not installed" in done.stderr, done.stderr
    assert install_hint(extra) in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not home.exists()
    assert not home.exists()


def test_duplicate_name_is_refused_before_writing(trained: tuple[Path, dict, str]) -> None:
    home, document, _ = trained
    before = sorted(p.name for p in home.iterdir())
    result = invoke(home, "train", "reinforce_cartpole", *TINY, "--name", "tiny")
    assert result.code == 2 and f"a run named 'tiny' already exists (id {document['run_id']})" in result.stderr
    assert sorted(p.name for p in home.iterdir()) == before


def test_two_trainings_at_once_share_one_registry(tmp_path: Path) -> None:
    home = tmp_path / "shared"
    processes = [popen(home, "train", "reinforce_cartpole", *TINY, "--seed", str(seed), "--json") for seed in (1, 2)]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], [err for _, err in outputs]
    ids = {json.loads(out)["run_id"] for out, _ in outputs}
    with sqlite3.connect(home / "registry.sqlite") as db:
        assert db.execute("select count(*) from runs where status = 'finished'").fetchone() == (2,)
        assert db.execute("select count(*) from evaluations").fetchone() == (6,)
        assert {row[0] for row in db.execute("select id from runs")} == ids


def test_sessions_train_in_parallel_processes_with_their_own_seeds(tmp_path: Path) -> None:
    home = tmp_path / "multi"
    result = invoke(home, "train", "reinforce_cartpole", *TINY, "--sessions", "2", "--seed", "10", "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert [(s["index"], s["seed"], s["status"]) for s in document["sessions"]] == [
        (0, 10, "finished"),
        (1, 11, "finished"),
    ]
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(document["run_id"])
    finals = [c for c in detail.checkpoints if "final" in c.kind]
    weights = [torch.load(home / c.path / "state.pt", weights_only=True)["agent"]["policy"]["0.weight"] for c in finals]
    assert len(weights) == 2 and not torch.equal(weights[0], weights[1])
