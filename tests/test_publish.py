"""`rlrun publish RUN DEST` (issue 56): a run as a model repository anyone can check. Published to a
folder and pulled into a fresh home, `rlrun enjoy --episodes 50 --seed S` prints the card's
`mean_reward` again and `rlrun resume` continues bit for bit; `agent.pt` plays the same 50 seeded
episodes in a process that has torch and nothing of rlrun or Gymnasium (discrete actions exactly,
continuous ones within 1e-6), its actions sent over a pipe to the env stepped here; no published
file needs pickle; a card is published for every built-in family (discrete, continuous, pixels,
with a memory), one of them to S3 on loopback and pulled from there; hf:// refuses a bad name and
a missing extra in one line.

Tiny budgets, each run trained once for the module: the DQN CartPole run half-way (its whole run
to 4k frames is the reference `tests/test_travel.py` shares), SAC on Pendulum with its episodes
capped at 50 steps, DQN on Pong capped at 40 emulator frames, A2C with a GRU on CartPole."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import FAST, Result, builtin_for, invoke
from same_run import assert_same_run, final_state, reference, reference_state, resume_ok

from rlrun import seeding

pytestmark = pytest.mark.slow  # real (tiny) trainings
pytest.importorskip("safetensors")
pytest.importorskip("onnxruntime")
pytest.importorskip("rliable")

SPEC = builtin_for("dqn")
HALF, FULL = 2000, 4000
EPISODES, SEED = 50, 7
TINY = [
    "meta.eval_frequency=300",
    "meta.checkpoint_frequency=300",
    "meta.num_eval_episodes=1",
    "meta.log_frequency=300",
]
FAMILIES = {  # family: (built-in spec, settings)
    "continuous": ("sac_pendulum", [*TINY, *FAST["sac"], "meta.max_frame=600", "env.max_episode_steps=50"]),
    "pixels": (
        "dqn_pong",
        [
            "env.max_episode_steps=40",
            "agent.network.hidden=[64]",
            "agent.learning_starts=100",
            "agent.memory.capacity=1000",
            "meta.max_frame=200",
            "meta.eval_frequency=200",
            "meta.checkpoint_frequency=200",
            "meta.num_eval_episodes=1",
            "meta.log_frequency=200",
        ],
    ),
    "memory": ("a2c_cartpole", [*TINY, "meta.max_frame=600", 'agent.network.recurrent={"cell": "gru", "size": 8}']),
}
CLEAN_PROCESS_MODULES = ("torch", "torchgen", "typing_extensions", "numpy")
"""What `import torch` itself needs: the one package a clean process holds, with its requirements."""


@pytest.fixture(scope="module")
def discrete(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The DQN CartPole run trained half-way (a copy of the shared reference: publishing records
    its enjoy), published to a folder by the command line: (its home, the repository)."""
    folder = tmp_path_factory.mktemp("publish")
    home = folder / "origin"
    shutil.copytree(reference(tmp_path_factory, SPEC, "--frames", str(HALF)), home)
    done = invoke(home, "publish", "latest", str(folder / "model"), "--seed", str(SEED), "--json")
    assert done.code == 0, done.stderr
    assert done.json()["mean_reward"] in (folder / "model" / "README.md").read_text()
    return home, folder / "model"


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory, s3_bucket: str) -> dict[str, tuple[Path, str]]:
    """A run of each other family, each published by the library: the continuous and pixel ones to
    folders (the pixel one left out without ale-py), the one with a memory to S3 on loopback.
    Family: (its home, where it went)."""
    import rlrun
    from rlrun.publish import publish

    base = tmp_path_factory.mktemp("families")
    published = {}
    for family, (spec, settings) in FAMILIES.items():
        if family == "pixels" and importlib.util.find_spec("ale_py") is None:
            continue
        home = base / family / "runs"
        trained = rlrun.train(rlrun.load_spec(spec, settings), home=home, name=family, handle_signals=False)
        assert trained.status == "finished", trained
        where = (
            f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}/{family}" if family == "memory" else str(base / family / "model")
        )
        done = publish(family, where, home=home, seed=SEED)
        assert done.destination == where and done.episodes == EPISODES
        published[family] = (home, where)
    return published


def card_of(repository: Path) -> tuple[dict[str, Any], str]:
    """The card's front matter (its values are JSON strings, as YAML reads them) and its body."""
    text = (repository / "README.md").read_text()
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    values: dict[str, Any] = {"tags": []}
    for line in head.splitlines():
        key, _, value = line.strip().lstrip("- ").partition(": ")
        if line.startswith("- ") and not value:
            values["tags"].append(json.loads(key))
        elif value and key not in values:
            values[key] = json.loads(value)
    return values, body


def enjoy_json(home: Path, reference: str) -> dict[str, Any]:
    done = invoke(home, "enjoy", reference, "--episodes", str(EPISODES), "--seed", str(SEED), "--json")
    assert done.code == 0, done.stderr
    return done.json()


def card_reference(body: str) -> str:
    """The checkpoint the card's `rlrun enjoy` line names."""
    line = next(line for line in body.splitlines() if line.startswith("rlrun enjoy "))
    return line.split()[2]


def test_pulled_from_a_folder_the_score_re_derives_and_the_run_resumes_exactly(
    discrete: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    import rlrun
    from rlrun.snapshot.layout import read_meta

    straight = reference_state(tmp_path_factory, SPEC, "--frames", str(FULL))
    _, repository = discrete
    card, body = card_of(repository)
    assert card["library_name"] == "rlrun"
    assert card["tags"] == ["reinforcement-learning", "CartPole-v1", "dqn", "rlrun"]
    assert f"rlrun pull {repository}" in body and f"--episodes {EPISODES} --seed {SEED}" in body
    enjoying, home = tmp_path / "enjoying", tmp_path / "fresh"  # enjoy records an evaluation: a home of its own
    assert invoke(enjoying, "pull", str(repository)).code == 0
    enjoyed = enjoy_json(enjoying, card_reference(body))
    assert f"{enjoyed['mean']:.2f} +/- {enjoyed['std']:.2f}" == card["value"]
    checkpoint = rlrun.load_policy(card_reference(body), home=enjoying).target.checkpoint
    recorded = read_meta(enjoying / checkpoint.path).stack
    assert recorded and json.loads((repository / "versions.json").read_text()) == recorded
    pulled = invoke(home, "pull", str(repository), "--json")
    assert pulled.code == 0, pulled.stderr
    resume_ok(home, pulled.json()["run"]["id"], "--frames", str(FULL))
    assert_same_run(straight, final_state(home))


def test_no_published_file_needs_pickle(
    discrete: tuple[Path, Path], families: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """Every file loads as JSON, safetensors, TorchScript, ONNX or a tar of such files (the
    snapshots' tensors with `torch.load(weights_only=True)`), or is an image, a video or text."""
    repositories = [discrete[1], *(Path(where) for _, where in families.values() if "://" not in where)]
    for repository in repositories:
        names = {p.name for p in repository.iterdir()}
        assert {"README.md", "model.safetensors", "agent.pt", "policy.onnx", "spec.json", "versions.json"} <= names
        assert not [name for name in names if name.startswith(".")], "the staging folder is gone"
        for path in repository.iterdir():
            _loads_without_pickle(path.name, path.read_bytes(), tmp_path)


def _loads_without_pickle(name: str, data: bytes, scratch: Path) -> None:
    import onnx
    import torch
    from safetensors.torch import load as load_safetensors

    from rlrun.home.bundle import SUFFIX

    suffix = Path(name).suffix
    if suffix in (".json", ".sha256", ".csv", ".md") or name.endswith(".json.sha256"):
        text = data.decode("utf-8")
        if suffix == ".json":
            json.loads(text)
    elif suffix == ".safetensors":
        assert load_safetensors(data)
    elif name == "agent.pt":  # TorchScript's archive: code and constants, no pickled Python
        path = scratch / name
        path.write_bytes(data)
        torch.jit.load(str(path))
    elif suffix == ".pt":
        import io

        torch.load(io.BytesIO(data), weights_only=True)
    elif suffix == ".npy":  # a replay memory's segment
        import io

        np.load(io.BytesIO(data), allow_pickle=False)
    elif suffix == ".onnx":
        onnx.load_model_from_string(data)
    elif suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    elif suffix == ".mp4":
        assert data[4:8] == b"ftyp"
    elif ".tfevents." in name:
        _tensorboard_records(data)
    elif suffix == SUFFIX:
        import io

        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                assert member.isreg()
                content = tar.extractfile(member)
                assert content is not None
                _loads_without_pickle(member.name.rsplit("/", 1)[-1], content.read(), scratch)
    else:
        raise AssertionError(f"{name}: a file of a kind this test does not know")


def _tensorboard_records(data: bytes) -> None:
    """TensorBoard's event file: length-prefixed protobuf records, framed to its last byte."""
    at = 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        at += 8 + 4 + length + 4
    assert at == len(data)


def local_copy(where: str, folder: Path, *names: str) -> Path:
    """The repository's files `names`, from the store at `where` into `folder`; a folder is itself."""
    if "://" not in where:
        return Path(where)
    from rlrun.home.bundle import filesystem_of

    folder.mkdir(exist_ok=True)
    fs, key = filesystem_of(where, "test")
    for name in names:
        fs.get_file(f"{key}/{name}", str(folder / name))
    return folder


def test_a_card_for_every_family(families: dict[str, tuple[Path, str]], tmp_path: Path) -> None:
    """Continuous, pixels and a memory (discrete: the tests above): each card names its env and
    algorithm; the one published to S3 pulls into a fresh home from its URL, where `rlrun enjoy`
    prints its mean_reward again (the others': the agent.pt test below; pixels: the card's own)."""
    for family, (_, where) in families.items():
        spec = FAMILIES[family][0]
        card, body = card_of(local_copy(where, tmp_path / f"{family}-card", "README.md"))
        assert card["tags"][2] == spec.split("_")[0] and card["library_name"] == "rlrun", family
        assert card["tags"][0] == "reinforcement-learning" and "+/-" in card["value"], family
        if "://" in where:
            fresh = tmp_path / family
            pulled = invoke(fresh, "pull", where)
            assert pulled.code == 0, pulled.stderr
            enjoyed = enjoy_json(fresh, card_reference(body))
            assert f"{enjoyed['mean']:.2f} +/- {enjoyed['std']:.2f}" == card["value"], family


# ---- agent.pt in a process with torch alone ------------------------------------------------------

CLEAN_AGENT = r"""
import json, sys
import torch
for name in ("gymnasium", "rlrun"):
    try:
        __import__(name)
    except ImportError:
        continue
    sys.exit(f"{name} is importable")
print("ready", flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    if "load" in ask:  # the next agent.pt, from its first episode
        agent, state = torch.jit.load(ask["load"]), None
        print("loaded", flush=True)
        continue
    obs = torch.tensor(ask["obs"], dtype=getattr(torch, ask["dtype"]))[None]
    with torch.no_grad():
        if ask["state"] is None:
            action = agent(obs)
        else:
            if ask["start"]:
                state = torch.zeros(ask["state"][0], 1, ask["state"][1])
            action, state = agent(obs, state)
    print(json.dumps(action[0].tolist()), flush=True)
"""


def clean_python(folder: Path) -> list[str]:
    """`python -I -S` whose path holds torch (and what `import torch` needs) and nothing else."""
    import importlib.util

    folder.mkdir()
    for name in CLEAN_PROCESS_MODULES:
        found = importlib.util.find_spec(name)
        assert found is not None and found.origin is not None
        origin = Path(found.origin)
        (folder / (origin.parent.name if origin.name == "__init__.py" else origin.name)).symlink_to(
            origin.parent if origin.name == "__init__.py" else origin
        )
    return [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(folder)!r})\n"]


def ask(process: subprocess.Popen[str], question: dict[str, Any]) -> str:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(question) + "\n")
    process.stdin.flush()
    return process.stdout.readline()


def played_by_agent_pt(process: subprocess.Popen[str], agent: Path, policy: Any) -> tuple[list[float], float]:
    """Enjoy's 50 seeded episodes of `policy`'s env, stepped here with the actions the clean process's
    `agent.pt` chooses: the returns, and the largest difference from the policy's own action."""
    assert ask(process, {"load": str(agent)}) == "loaded\n"
    env, returns, largest = policy.make_env(), [], 0.0
    memory = None if policy.actor.state_shape is None else list(policy.actor.state_shape)
    try:
        for seed in seeding.enjoy_episode_seeds(SEED, EPISODES):
            obs, _ = env.reset(seed=seed)
            total, done, start, state = 0.0, False, True, None
            while not done:
                question = {"obs": np.asarray(obs).tolist(), "dtype": str(env.observation_space.dtype)}
                answer = ask(process, {**question, "start": start, "state": memory})
                action = np.asarray(json.loads(answer), dtype=env.action_space.dtype)
                own, state = policy.act(obs, state)
                largest = max(largest, float(np.max(np.abs(action.astype(np.float64) - np.asarray(own, np.float64)))))
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done, start = total + float(reward), terminated or truncated, False
            returns.append(total)
    finally:
        env.close()
    return returns, largest


def test_agent_pt_plays_the_same_episodes_with_torch_alone(
    discrete: tuple[Path, Path], families: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """One process with torch alone plays each family's agent.pt (discrete, continuous, a memory)."""
    import rlrun

    python = clean_python(tmp_path / "only-torch")
    blocked = subprocess.run([*python[:-1], python[-1] + "import gymnasium"], capture_output=True)
    assert blocked.returncode != 0 and b"No module named 'gymnasium'" in blocked.stderr
    process = subprocess.Popen(
        [*python[:-1], python[-1] + CLEAN_AGENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert process.stdout is not None and process.stdin is not None
    assert process.stdout.readline() == "ready\n", process.communicate()
    cases = {
        "discrete": discrete,
        **{
            f: (families[f][0], local_copy(families[f][1], tmp_path / f, "README.md", "agent.pt"))
            for f in ("continuous", "memory")
        },
    }
    try:
        for family, (home, folder) in cases.items():
            card, body = card_of(folder)
            policy = rlrun.load_policy(card_reference(body), home=home)
            returns, largest = played_by_agent_pt(process, folder / "agent.pt", policy)
            enjoyed = enjoy_json(home, card_reference(body))
            assert f"{enjoyed['mean']:.2f} +/- {enjoyed['std']:.2f}" == card["value"], family
            if family == "continuous":
                assert largest <= 1e-6, largest
                assert np.allclose(returns, [e["return"] for e in enjoyed["episodes"]], atol=1e-3)
            else:
                assert largest == 0
                assert returns == [e["return"] for e in enjoyed["episodes"]], family
    finally:
        process.stdin.close()
        assert process.wait(timeout=60) == 0


# ---- refusals ---------------------------------------------------------------------------------------


def _one_line_refusal(done: Result, *words: str) -> None:
    assert done.code == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_hf_refuses_a_bad_name_and_a_missing_extra_in_one_line(
    discrete: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = discrete
    for bad in ("hf://just-a-name", "hf://org/name/extra", "hf://org/-bad"):
        _one_line_refusal(invoke(home, "publish", "latest", bad), bad, "hf://ORG/NAME")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if the hub extra were not installed
    _one_line_refusal(invoke(home, "publish", "latest", "hf://my-org/dqn-CartPole-v1"), "huggingface_hub", "[hub]")


def test_pull_of_a_folder_without_one_bundle_is_refused(tmp_path: Path) -> None:
    """A folder `rlrun pull` reads holds one bundle: none, or two, is one line and nothing written."""
    folder = tmp_path / "model"
    folder.mkdir()
    home = tmp_path / "home"
    _one_line_refusal(invoke(home, "pull", str(folder)), "no bundles")
    for name in ("a.rlrun", "b.rlrun"):
        (folder / name).write_bytes(b"")
    _one_line_refusal(invoke(home, "pull", str(folder)), "2 bundles")
    assert not home.exists()
