"""What a published repository holds, and how each file is made from the run's chosen checkpoint
(the one `rlrun enjoy` chooses: the best session's best checkpoint, or the one the reference names):

    README.md            the model card (`rlrun.publish.card`), written last
    model.safetensors    the acting weights (the acting graph's, as `agent.pt` and `policy.onnx` run
                         them) and the observation normalisation statistics, with the checkpoint named
                         in its metadata: safetensors, so weights load without pickle in any framework
    agent.pt             the frozen TorchScript module (`rlrun.enjoy.torchscript.write_agent`)
    policy.onnx          the ONNX graph (`rlrun.enjoy.onnx.export_onnx`)
    *.contract.json      each of those two files' contract, as the exports write it beside them
    replay.mp4           the first scored episode (`enjoy --video`); left out, with a note on the
                         card, without the video extra
    curve.png            the learning curve (`rlrun plot`'s drawing); left out without the plot extra
    spec.json            the spec revision the checkpoint was trained with
    versions.json        the software the checkpoint was trained on, as its snapshot records it
    <run id>.rlrun       the resumable bundle (`rlrun push`), which `rlrun pull REPOSITORY` adds

The score is `rlrun enjoy`'s over `EPISODES` seeded greedy episodes, through the enjoy library API,
so it is recorded in the run as an evaluation of kind "enjoy", as any enjoy is, and `rlrun enjoy REF
--episodes 50 --seed S` after `rlrun pull` prints the same returns. The IQM and its 95% CI across the
run's sessions come from rliable through `rlrun.compare.statistics` (the compare extra; left out
with a note without it), over each session's final evaluation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun.errors import BadInput, install_hint
from rlrun.fsutil import umask_mode
from rlrun.publish.card import CardFacts, Interval, mean_reward, render
from rlrun.publish.upload import CARD, Destination

if TYPE_CHECKING:
    from rlrun.enjoy import EnjoyResult
    from rlrun.enjoy.policy import Policy
    from rlrun.registry import RunDetail

EPISODES = 50
"""The episodes a card's score is played over: what the Open RL Leaderboard scores a model on."""
WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class Published:
    """A repository written: where, the run and checkpoint it holds, its score and its files."""

    destination: str
    run_id: str
    session: int
    checkpoint_frame: int
    mean_reward: str
    episodes: int
    seed: int
    files: list[str]
    bundle_sha256: str
    notes: list[str] = field(default_factory=list)
    """What was left out, and why (a missing extra), one line each."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def publish(
    reference: str,
    destination: str,
    *,
    home: Path | str | None = None,
    episodes: int = EPISODES,
    seed: int | None = None,
) -> Published:
    """Write run `reference`'s chosen checkpoint, scored, and the whole run beside it, to
    `destination` as a model repository laid out as the Hugging Face Hub expects.

    Args:
        reference: The run, as `rlrun enjoy` takes it (`/sK`, `@best`, `@latest`, `@5M` pick the checkpoint).
        destination: A folder (made if missing), a URL an installed fsspec library reaches
            (`s3://bucket/models/x`), or a Hub model repository, `hf://ORG/NAME`.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        episodes: The seeded greedy episodes the card's score is played over.
        seed: Their seed (None: the session's, as `rlrun enjoy` plays).

    Returns:
        Where it went, the run and checkpoint, the `mean_reward` string, the files and what was left out.
    """
    target = Destination.of(destination)
    _require("safetensors", "onnx", "onnxscript", "onnxruntime")
    from rlrun.enjoy.policy import load_policy

    policy = load_policy(reference, home=home)
    run = policy.target.run
    if run.status == "running":
        raise BadInput(
            f"run {run.id} is still running; stop it (`rlrun stop {run.id}`) or let it finish, then publish it"
        )
    from rlrun.home.bundle import SUFFIX

    bundle_name = f"{run.id}{SUFFIX}"
    others = target.other_bundles(bundle_name)
    if others:
        raise BadInput(
            f"cannot publish run {run.id} to {target.address}: it holds another run's bundle ({others[0]});"
            " publish each run to a folder of its own"
        )
    with target.staging() as folder:
        published = _write(policy, folder, target, bundle_name, home=home, episodes=episodes, seed=seed)
        target.put(folder, run.id)
    return published


def _require(*modules: str) -> None:
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput(f"rlrun publish needs {', '.join(missing)}, not installed: {install_hint('publish')}")


def _write(
    policy: Policy,
    folder: Path,
    target: Destination,
    bundle_name: str,
    *,
    home: Path | str | None,
    episodes: int,
    seed: int | None,
) -> Published:
    """Every file of the repository into `folder`, the card last."""
    from rlrun.enjoy import enjoy
    from rlrun.enjoy.onnx import export_onnx
    from rlrun.enjoy.torchscript import write_agent
    from rlrun.home.bundle import push
    from rlrun.session.stack import write_versions

    chosen = policy.target
    pinned = f"{chosen.run.id}/s{chosen.session.index}@{chosen.checkpoint.frame}"
    # The bundle first: the run as it was trained, without the enjoy evaluations publishing records.
    pushed = push(chosen.run.id, str(folder / bundle_name), home=home)
    scored = enjoy(pinned, home=home, episodes=episodes, seed=seed)
    notes: list[str] = []
    _write_weights(policy, folder / WEIGHTS)
    write_agent(policy, folder / "agent.pt")
    export_onnx(policy, folder / "policy.onnx")
    _replay(pinned, folder / "replay.mp4", home, scored.seed, notes)
    spec = json.loads(chosen.spec_json)
    (folder / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    versions = _versions(policy, home)
    write_versions(folder / "versions.json", versions)
    detail = _detail(chosen.run.id, home)
    _curve(detail, folder / "curve.png", notes)
    iqm = _iqm(detail, scored.seed, notes)
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    facts = CardFacts(
        run_id=chosen.run.id,
        run_name=chosen.run.name,
        algorithm=policy.spec.agent.algorithm,
        env_id=policy.spec.env.id,
        session=chosen.session.index,
        checkpoint_frame=chosen.checkpoint.frame,
        checkpoint_sha256=chosen.checkpoint.sha256,
        episodes=episodes,
        seed=scored.seed,
        mean=scored.mean,
        std=scored.std,
        pull_from=target.address,
        bundle=bundle_name,
        bundle_sha256=pushed.sha256,
        spec=spec,
        versions=versions,
        files=files,
        iqm=iqm,
        notes=notes,
    )
    (folder / CARD).write_text(render(facts), encoding="utf-8")
    return _published(target, scored, facts, [*files, CARD])


def _published(target: Destination, scored: EnjoyResult, facts: CardFacts, files: list[str]) -> Published:
    return Published(
        destination=target.address,
        run_id=facts.run_id,
        session=facts.session,
        checkpoint_frame=facts.checkpoint_frame,
        mean_reward=mean_reward(scored.mean, scored.std),
        episodes=facts.episodes,
        seed=scored.seed,
        files=sorted(files),
        bundle_sha256=facts.bundle_sha256,
        notes=facts.notes,
    )


def _write_weights(policy: Policy, path: Path) -> None:
    """The acting graph's tensors (`policy.*`: the actor's weights, and the normalisation as the
    graph applies it) and the normalisation statistics themselves (`normalize.observation.*`), the
    checkpoint in the metadata: what anyone needs to act, in any framework, without pickle."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from rlrun.enjoy.torchscript import agent_module

    tensors = {
        f"policy.{name}": value.detach().clone().contiguous()
        for name, value in agent_module(policy).state_dict().items()
    }
    metadata = {
        "format": "rlrun acting weights",
        "run_id": policy.target.run.id,
        "session": str(policy.target.session.index),
        "checkpoint_frame": str(policy.target.checkpoint.frame),
        "checkpoint_sha256": policy.target.checkpoint.sha256,
        "algorithm": policy.spec.agent.algorithm,
        "env_id": policy.spec.env.id,
    }
    normalizer = policy.normalizer
    if normalizer is not None and normalizer.obs_rms is not None:
        rms = normalizer.obs_rms
        for name in ("mean", "var"):
            tensors[f"normalize.observation.{name}"] = torch.from_numpy(np.array(getattr(rms, name), np.float64))
        tensors["normalize.observation.count"] = torch.tensor(float(rms.count), dtype=torch.float64)
        metadata["normalize.epsilon"] = repr(float(normalizer.spec.epsilon))
        metadata["normalize.clip_obs"] = repr(float(normalizer.spec.clip_obs))
    save_file(tensors, str(path), metadata=metadata)
    path.chmod(umask_mode())  # safetensors writes 0600: the file is for whoever the repository is for


def _versions(policy: Policy, home: Path | str | None) -> dict[str, str]:
    """The software the checkpoint was trained on, as its snapshot records it; the installed
    versions for a snapshot older than that record (`rlrun.session.stack.software_stack`)."""
    from rlrun import paths
    from rlrun.session.stack import software_stack
    from rlrun.snapshot.layout import META, read_meta

    snapshot = paths.resolve_home(home) / policy.target.checkpoint.path
    recorded = read_meta(snapshot).stack if (snapshot / META).is_file() else None
    return dict(recorded) if recorded else software_stack(policy.spec)


def _replay(pinned: str, path: Path, home: Path | str | None, seed: int, notes: list[str]) -> None:
    """The first scored episode as a video, or a note saying why not (no video extra, no renderer)."""
    from rlrun.enjoy import enjoy
    from rlrun.enjoy.video import check_video_path

    try:
        check_video_path(path)
    except BadInput as why:
        notes.append(f"replay.mp4: {why}")
        return
    enjoy(pinned, home=home, episodes=1, seed=seed, video=path)


def _detail(run_id: str, home: Path | str | None) -> RunDetail:
    from rlrun.home.folders import open_registry
    from rlrun.refs import parse_ref

    with open_registry(parse_ref(run_id), home) as registry:
        return registry.get_run(run_id)


def _curve(detail: RunDetail, path: Path, notes: list[str]) -> None:
    """`rlrun plot`'s drawing of the run, or a note without the plot extra."""
    import importlib.util

    from rlrun.catalog.curves import curve
    from rlrun.catalog.figures import draw

    if importlib.util.find_spec("matplotlib") is None:
        notes.append(f"curve.png: drawing the learning curve needs matplotlib: {install_hint('plot')}")
        return
    draw([curve(detail)], path, title=f"{detail.run.name or detail.run.id}: evaluation return")


def _iqm(detail: RunDetail, seed: int, notes: list[str]) -> Interval | None:
    """The IQM of the sessions' final evaluation returns and its 95% CI (rliable), or a note."""
    import importlib.util

    import numpy as np

    from rlrun.compare import DEFAULT_REPS
    from rlrun.compare.runs import sessions
    from rlrun.compare.statistics import aggregates

    if importlib.util.find_spec("rliable") is None:
        notes.append(f"the IQM across sessions: rliable is not installed: {install_hint('compare')}")
        return None
    try:
        scores = [session.score("final") for session in sessions(detail)]
    except BadInput as why:
        notes.append(f"the IQM across sessions: {why}")
        return None
    matrix = np.array(scores, dtype=np.float64).reshape(-1, 1)  # sessions x one task
    estimate = aggregates({"run": matrix}, reps=DEFAULT_REPS, seed=seed)["run"]["iqm"]
    return Interval(estimate.point, estimate.low, estimate.high, len(scores), DEFAULT_REPS)
