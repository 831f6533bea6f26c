"""A trained checkpoint outside rlrun's own loop (issues 42, 50): `rlrun.load_policy(...).act` chooses
what `rlrun enjoy` chooses, `rlrun record` records what it chooses, and `rlrun export --onnx` writes a
graph whose greedy action is the policy's, bit for bit, and that `rlrun enjoy --policy` plays to the
checkpoint's returns (DQN and PPO on CartPole, SAC on Pendulum, REINFORCE over MultiDiscrete actions,
A2C with a memory over MultiBinary ones, DQN on Pong); all of them act through the agent's one
`Actor`. A file that is another checkpoint's, changed, or no model at all is refused in one line,
exit 2, nothing recorded; loading a checkpoint leaves the caller's global generators as they were.

One tiny in-process training per algorithm, in one home shared by the module; PPO and SAC
normalise their observations (`env.normalize`), so the statistics in the graph are exercised."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import FAST, invoke

pytestmark = pytest.mark.slow  # real (tiny) trainings
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

TINY = [
    "meta.max_frame=3000",
    "meta.eval_frequency=1000",
    "meta.checkpoint_frequency=1000",
    "meta.num_eval_episodes=2",
    "meta.log_frequency=1000",
]
NORMALIZED = ["env.normalize.observation=true", "env.normalize.reward=true"]
RUNS = {  # run name: (built-in spec, settings)
    "dqn": ("dqn_cartpole", [*TINY, *FAST["dqn"]]),
    "ppo": ("ppo_cartpole", [*TINY, *FAST["ppo"], *NORMALIZED]),
    "sac": ("sac_pendulum", [*TINY, *FAST["sac"], *NORMALIZED]),
    "reinforce": ("reinforce_cartpole", [*TINY, "env.id=MultiDiscreteActions-v0"]),
    "a2c": (
        "a2c_cartpole",
        [*TINY, "env.id=MultiBinaryActions-v0", 'agent.network.recurrent={"cell": "gru", "size": 8}'],
    ),
}
CONTINUOUS = {"sac"}
"""Runs whose actions are floats: a batch's products may round otherwise than one row's (BLAS)."""
USERNETS = Path(__file__).parent / "usernets"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One home holding a tiny run of each algorithm, named after it."""
    import rlrun

    with pytest.MonkeyPatch.context() as patch:  # the user's envs (MultiDiscrete, MultiBinary actions)
        patch.syspath_prepend(str(USERNETS))
        import my_envs  # noqa: F401  # registers them in this process, for good

    home = tmp_path_factory.mktemp("policies") / "runs"
    for name, (spec, settings) in RUNS.items():
        done = rlrun.train(rlrun.load_spec(spec, settings), home=home, name=name, handle_signals=False)
        assert done.status == "finished", done
    return home


@pytest.fixture(scope="module")
def exported(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each run's best checkpoint, exported by the command line."""
    folder = tmp_path_factory.mktemp("onnx")
    files = {}
    for name in RUNS:
        files[name] = folder / f"{name}.onnx"
        done = invoke(trained, "export", name, "--onnx", str(files[name]))
        assert done.code == 0, done.stderr
        assert f"wrote {files[name]}" in done.stderr
    return files


def enjoyed(home: Path, *args: str) -> list[tuple[float, int]]:
    done = invoke(home, "enjoy", *args, "--episodes", "3", "--json")
    assert done.code == 0, done.stderr
    return [(e["return"], e["length"]) for e in done.json()["episodes"]]


def enjoy_rows(home: Path) -> int:
    with sqlite3.connect(home / "registry.sqlite") as db:
        return int(db.execute("select count(*) from evaluations where kind = 'enjoy'").fetchone()[0])


def played_by_policy(policy: Any, seed: int, episodes: int) -> Iterator[tuple[int, list[Any], list[Any], float]]:
    """Enjoy's episodes of `seed` played by `policy` on the env it builds, its state carried from
    step to step: per episode, its index, the observations acted on, the actions and the return."""
    from rlrun import seeding

    env = policy.make_env()
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seeding.derive(seed, seeding.ENJOY, k))
            seen, actions, total, done, state = [], [], 0.0, False, None
            while not done:
                seen.append(obs)
                action, state = policy.act(obs, state)
                assert (state is None) == (not policy.recurrent)
                actions.append(action)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done = total + float(reward), terminated or truncated
            yield k, seen, actions, total
    finally:
        env.close()


@pytest.mark.parametrize("name", list(RUNS))
def test_load_policy_chooses_what_enjoy_chooses(trained: Path, name: str) -> None:
    """Enjoy's episodes, replayed with the policy on the env it builds: the same actions at every
    step, so the same returns and lengths; a batch of observations (each a fresh episode's) acts
    as its rows do."""
    import rlrun
    from rlrun.enjoy import enjoy

    result = enjoy(name, home=trained, episodes=2)
    policy = rlrun.load_policy(name, home=trained)
    assert (policy.run_id, policy.checkpoint_frame) == (result.run_id, result.checkpoint_frame)
    assert policy.recurrent == (name == "a2c")
    seen = []
    for k, observations, actions, total in played_by_policy(policy, result.seed, 2):
        assert (total, len(actions)) == (result.episodes[k].episode_return, result.episodes[k].length)
        seen += observations
    batch = np.stack(seen)
    actions, state = policy.act(batch)
    assert (state is None) == (not policy.recurrent)
    assert state is None or state.shape[1] == len(batch)
    one_by_one = np.stack([policy.act(o)[0] for o in seen])
    if name in CONTINUOUS:  # a batch's products may round otherwise than one row's (BLAS)
        np.testing.assert_allclose(actions, one_by_one, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(actions, one_by_one)
    if not policy.recurrent:
        with pytest.raises(ValueError, match="not recurrent"):
            policy.act(seen[0], state=np.zeros(1))
    # the checkpoint named apart, as its @ suffix would: the same choice
    assert (
        rlrun.load_policy(f"{name}@latest", home=trained).checkpoint_frame
        == rlrun.load_policy(name, home=trained, checkpoint="latest").checkpoint_frame
    )


@pytest.mark.parametrize("name", list(RUNS))
def test_the_onnx_file_plays_the_checkpoints_returns(trained: Path, exported: dict[str, Path], name: str) -> None:
    import onnx

    checkpoint = enjoyed(trained, name)
    before = enjoy_rows(trained)
    played = enjoyed(trained, name, "--policy", str(exported[name]))
    assert enjoy_rows(trained) == before  # the file is played, nothing recorded
    if name == "sac":  # continuous actions: the same within float tolerance
        assert [n for _, n in played] == [n for _, n in checkpoint]
        np.testing.assert_allclose([r for r, _ in played], [r for r, _ in checkpoint], rtol=1e-4)
    else:
        assert played == checkpoint
    metadata = {p.key: p.value for p in onnx.load(str(exported[name])).metadata_props}
    assert metadata["rlrun.run_id"] == invoke(trained, "show", name, "--json").json()["run"]["id"]
    assert len(metadata["rlrun.checkpoint_sha256"]) == 64


@pytest.mark.parametrize("name", list(RUNS))
def test_the_graphs_action_is_the_policys_greedy_action(trained: Path, exported: dict[str, Path], name: str) -> None:
    """The file's `action` on the observations of enjoy's episodes, one step at a time (its
    `next_state` carried, with a memory), is the action `load_policy` chose there, in the env's
    dtype: bit for bit for discrete actions, within float tolerance for continuous ones."""
    import onnxruntime

    import rlrun

    policy = rlrun.load_policy(name, home=trained)
    session = onnxruntime.InferenceSession(str(exported[name]))
    names = [o.name for o in session.get_outputs()]
    assert names[0] == "action" and (names[-1] == "next_state") == policy.recurrent
    for _, observations, actions, _ in played_by_policy(policy, 0, 1):
        state = policy.actor.initial_state(1)
        for obs, chosen in zip(observations, actions, strict=True):
            feeds = {"observation": obs[None]} if state is None else {"observation": obs[None], "state": state}
            out = dict(zip(names, session.run(None, feeds), strict=True))
            state = out.get("next_state")
            assert out["action"][0].dtype == np.asarray(chosen).dtype
            if name in CONTINUOUS:
                np.testing.assert_allclose(out["action"][0], chosen, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(out["action"][0], chosen)


@pytest.mark.parametrize("name", list(RUNS))
def test_record_records_what_load_policy_plays(
    trained: Path, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rlrun record`'s episodes are enjoy's (its returns) and its actions are the ones
    `load_policy` chooses on the recorded observations, its state carried through each episode."""
    minari = pytest.importorskip("minari")
    import rlrun
    from rlrun.enjoy import enjoy
    from rlrun.enjoy.dataset import record

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    recorded = record(name, home=trained, dataset_id=f"rlrun/{name}-v0", episodes=2)
    assert recorded.returns == [e.episode_return for e in enjoy(name, home=trained, episodes=2).episodes]
    policy = rlrun.load_policy(name, home=trained)
    for episode in minari.load_dataset(f"rlrun/{name}-v0").iterate_episodes():
        state = None
        for obs, action in zip(episode.observations[:-1], episode.actions, strict=True):
            chosen, state = policy.act(obs, state)
            np.testing.assert_array_equal(chosen, action)


def generators() -> tuple[Any, ...]:
    import torch

    return torch.get_rng_state().tolist(), np.random.get_state()[1].tolist(), random.getstate()


def test_loading_a_checkpoint_leaves_the_callers_generators_alone(trained: Path, tmp_path: Path) -> None:
    """`load_policy`, `enjoy`, `export_onnx` and `record` load the checkpoint through one loader,
    which builds the agent (that seeds torch's generator) and gives the caller's generators back."""
    import torch

    import rlrun
    from rlrun.enjoy import enjoy
    from rlrun.enjoy.onnx import export_onnx

    torch.manual_seed(11), np.random.seed(12), random.seed(13)
    before = generators()
    rlrun.load_policy("a2c", home=trained)
    enjoy("reinforce", home=trained, episodes=1)
    export_onnx("ppo", tmp_path / "p.onnx", home=trained)
    assert generators() == before
    if importlib.util.find_spec("minari") is not None:  # the extra that `record` needs
        from rlrun.enjoy.dataset import record

        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
            record("dqn", home=trained, dataset_id="rlrun/kept-v0", episodes=1)
        assert generators() == before


def test_the_graph_holds_the_normalisation_and_the_stochastic_heads(trained: Path, exported: dict[str, Path]) -> None:
    """The raw observation goes in: the graph's action is the policy's; the Gaussian's outputs are there."""
    import onnxruntime

    import rlrun

    policy = rlrun.load_policy("ppo", home=trained)
    env = policy.make_env()
    obs = np.stack([env.reset(seed=k)[0] for k in range(8)])
    session = onnxruntime.InferenceSession(str(exported["ppo"]))
    action, logits = session.run(None, {"observation": obs})
    np.testing.assert_array_equal(action, policy.act(obs)[0])
    assert logits.shape == (8, 2)
    sac = onnxruntime.InferenceSession(str(exported["sac"]))
    assert [o.name for o in sac.get_outputs()] == ["action", "mean", "log_std"]


def one_line_refusal(home: Path, *args: str) -> str:
    before = enjoy_rows(home)
    done = invoke(home, *args)
    assert done.code == 2, (done.code, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert enjoy_rows(home) == before
    return lines[0]


def test_a_file_of_another_checkpoint_a_changed_one_or_no_model_is_refused(
    trained: Path, exported: dict[str, Path], tmp_path: Path
) -> None:
    other = one_line_refusal(trained, "enjoy", "ppo", "--policy", str(exported["dqn"]))
    assert "reference names run" in other and "export" in other
    # another checkpoint of the same run
    latest = tmp_path / "latest.onnx"
    assert invoke(trained, "export", "dqn@1k", "--onnx", str(latest)).code == 0
    assert "@1000" in one_line_refusal(trained, "enjoy", "dqn@3k", "--policy", str(latest))
    # a weight changed after export
    import onnx

    data = bytearray(exported["dqn"].read_bytes())
    weights = max((t for t in onnx.load(str(exported["dqn"])).graph.initializer), key=lambda t: len(t.raw_data))
    data[data.find(weights.raw_data) + 8] ^= 0x40  # one weight's exponent bit
    changed = tmp_path / "changed.onnx"
    changed.write_bytes(bytes(data))
    line = one_line_refusal(trained, "enjoy", "dqn", "--policy", str(changed))
    assert "changed after rlrun exported it" in line
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model at all")
    assert "not an ONNX model" in one_line_refusal(trained, "enjoy", "dqn", "--policy", str(garbage))
    missing = one_line_refusal(trained, "enjoy", "dqn", "--policy", str(tmp_path / "none.onnx"))
    assert "no such file" in missing


def test_export_refuses_bad_requests_and_writes_nothing(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "p.onnx"
    assert "checkpoint" in one_line_refusal(trained, "export", "dqn@best", "--onnx", str(out), "--checkpoint", "latest")
    assert "not best, latest" in one_line_refusal(trained, "export", "dqn", "--onnx", str(out), "--checkpoint", "5Q")
    assert ".onnx" in one_line_refusal(trained, "export", "dqn", "--onnx", str(tmp_path / "p.txt"))
    assert "one" in one_line_refusal(trained, "export", "dqn", "ppo", "--onnx", str(out))
    assert "--onnx" in one_line_refusal(trained, "export", "dqn", "--checkpoint", "latest")
    assert "--torchscript" in one_line_refusal(trained, "export", "dqn", "--check")
    same = one_line_refusal(trained, "export", "dqn", "--onnx", str(out), "--torchscript", str(tmp_path / "p.pt"))
    assert "share one contract" in same
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if the extra were not installed
    line = one_line_refusal(trained, "export", "dqn", "--onnx", str(out))
    assert "onnxscript" in line and "[onnx]" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("missing", ["onnxruntime"])
def test_enjoy_policy_without_the_extra_names_it(
    trained: Path, exported: dict[str, Path], missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)
    line = one_line_refusal(trained, "enjoy", "dqn", "--policy", str(exported["dqn"]))
    assert missing in line and "[onnx]" in line


@pytest.fixture(scope="module")
def atari(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny DQN on Pong (nature_cnn: uint8 frames in), for the export tests and the check's pixels."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    import rlrun

    home = tmp_path_factory.mktemp("atari") / "runs"
    settings = [
        "env.max_episode_steps=400",
        "agent.network.hidden=[64]",
        "agent.learning_starts=100",
        "agent.memory.capacity=1000",
        "meta.max_frame=200",
        "meta.eval_frequency=200",
        "meta.checkpoint_frequency=200",
        "meta.num_eval_episodes=1",
        "meta.log_frequency=200",
    ]
    assert rlrun.train(rlrun.load_spec("dqn_pong", settings), home=home, handle_signals=False).status == "finished"
    return home


def test_an_atari_policy_plays_the_checkpoints_returns(atari: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """DQN's nature_cnn on Pong: uint8 frames in (the env's preprocessing and frame stack stay in
    the env), the frames' scaling in the graph, the batch axis dynamic."""
    import onnxruntime

    path = tmp_path_factory.mktemp("atari-onnx") / "pong.onnx"
    assert invoke(atari, "export", "latest", "--onnx", str(path)).code == 0
    assert enjoyed(atari, "latest", "--policy", str(path)) == enjoyed(atari, "latest")
    frames = np.zeros((3, 4, 84, 84), np.uint8)
    assert onnxruntime.InferenceSession(str(path)).run(["action"], {"observation": frames})[0].shape == (3,)


FAMILIES = {"dqn": "discrete", "sac": "continuous", "a2c": "with a memory", "pong": "pixels"}
CHECKED = re.compile(r"largest action difference onnxruntime (\S+), torchscript (\S+) \(allowed (\S+)\)")


@pytest.fixture(scope="module")
def both(trained: Path, atari: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family's checkpoint exported as ONNX and TorchScript and checked, by the command line
    (the check's line is asserted here, once per family): its folder, holding policy.onnx, agent.pt
    and their contracts."""
    folders = {}
    for name in FAMILIES:
        home, reference = (atari, "latest") if name == "pong" else (trained, name)
        folder = folders[name] = tmp_path_factory.mktemp(f"both-{name}")
        files = ["--onnx", str(folder / "policy.onnx"), "--torchscript", str(folder / "agent.pt")]
        steps = "48" if name == "pong" else "128"
        done = invoke(home, "export", reference, *files, "--check", "--observations", steps)
        assert done.code == 0, done.stderr
        found = CHECKED.search(done.stderr)
        assert found is not None, done.stderr
        onnx_gap, torchscript_gap, allowed = map(float, found.groups())
        assert allowed == (1e-6 if name in CONTINUOUS else 0.0)
        assert onnx_gap <= allowed and torchscript_gap <= allowed
    return folders


def test_export_check_passes_on_every_family_and_each_file_has_its_contract(
    trained: Path, atari: Path, both: dict[str, Path]
) -> None:
    """`export --check` passed for every family (`both`); each file's contract names its hash, the
    checkpoint the ONNX metadata names, the spaces and inputs, the normalisation inside the graph
    (SAC's statistics; none for the others here), the opset, Atari's preprocessing, and the
    software the checkpoint trained on and was exported with."""
    import onnx

    from rlrun import snapshot
    from rlrun.session.stack import software_stack

    for name, folder in both.items():
        home = atari if name == "pong" else trained
        metadata = {p.key: p.value for p in onnx.load(str(folder / "policy.onnx")).metadata_props}
        run = invoke(home, "show", metadata["rlrun.run_id"], "--json").json()
        path = next(c["path"] for c in run["checkpoints"] if c["sha256"] == metadata["rlrun.checkpoint_sha256"])
        for file, kind in (("policy.onnx", "onnx"), ("agent.pt", "torchscript")):
            contract = json.loads((folder / f"{Path(file).stem}.contract.json").read_text())
            assert (contract["kind"], contract["file"]) == (kind, file)
            assert contract["file_sha256"] == hashlib.sha256((folder / file).read_bytes()).hexdigest()
            assert contract["checkpoint_sha256"] == metadata["rlrun.checkpoint_sha256"]
            assert contract["observation_space"]["shape"] == json.loads(metadata["rlrun.observation_shape"])
            assert contract["opset"] == (18 if kind == "onnx" else None)
            assert (contract["normalization"] is not None) == (name == "sac")
            assert [i["name"] for i in contract["inputs"]] == ["observation", *(["state"] if name == "a2c" else [])]
            trained_on = snapshot.read_meta(home / path).stack
            assert trained_on is not None and contract["software"]["trained_on"] == trained_on
            assert contract["software"]["exported_with"]["torch"] == software_stack("CartPole-v1")["torch"]
            assert (contract["preprocessing"]["atari"] is not None) == (name == "pong")


def test_agent_pt_acts_as_the_policy_in_a_process_with_torch_alone(trained: Path, both: dict[str, Path]) -> None:
    """agent.pt loads with `torch.jit.load` in a fresh interpreter that imports neither rlrun nor
    gymnasium, and gives the policy's greedy actions on a batch of its env's observations (from
    fresh episodes' state, for the policy with a memory)."""
    import rlrun

    chosen = {}
    for name in ("dqn", "sac", "a2c"):
        policy = rlrun.load_policy(name, home=trained)
        env = policy.make_env()
        obs = np.stack([env.reset(seed=k)[0] for k in range(5)])
        env.close()
        np.save(both[name] / "obs.npy", obs)
        chosen[name] = policy.act(obs)[0]
    script = (
        "import sys, numpy, torch\n"
        "for folder, memory in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    agent = torch.jit.load(folder + '/agent.pt')\n"
        "    obs = torch.from_numpy(numpy.load(folder + '/obs.npy'))\n"
        "    state = torch.zeros(1, len(obs), int(memory)) if int(memory) else None\n"
        "    action = agent(obs) if state is None else agent(obs, state)[0]\n"
        "    numpy.save(folder + '/action.npy', action.numpy())\n"
        "assert not [m for m in sys.modules if m.startswith(('rlrun', 'gymnasium'))]\n"
    )
    arguments = [str(a) for name in chosen for a in (both[name], 8 if name == "a2c" else 0)]
    done = subprocess.run([sys.executable, "-I", "-c", script, *arguments], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    for name, actions in chosen.items():
        loaded = np.load(both[name] / "action.npy")
        if name in CONTINUOUS:
            np.testing.assert_allclose(loaded, actions, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(loaded, actions)


def test_a_file_that_does_not_act_as_its_checkpoint_fails_the_check(
    trained: Path, exported: dict[str, Path], tmp_path: Path
) -> None:
    """The DQN graph's last layer negated (its Q-values, so its argmax is the argmin): the check
    sees other actions and fails (exit 1 at the command line: `ExportMismatch`)."""
    import onnx

    import rlrun
    from rlrun.enjoy.check import ExportMismatch, check_exports

    model = onnx.load(str(exported["dqn"]))
    last = [node for node in model.graph.node if node.op_type == "Gemm"][-1]
    for weights in (t for t in model.graph.initializer if t.name in last.input):
        weights.raw_data = (-np.frombuffer(weights.raw_data, np.float32)).tobytes()
    changed = tmp_path / "changed.onnx"
    onnx.save(model, str(changed))
    with pytest.raises(ExportMismatch, match="largest action difference onnxruntime"):
        check_exports(rlrun.load_policy("dqn", home=trained), onnx=changed, steps=64)
    assert ExportMismatch("").exit_code == 1
