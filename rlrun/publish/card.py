"""A published run's model card, `README.md`, as the Hugging Face Hub reads one: YAML front matter
the Hub indexes, then a Markdown body for people.

The front matter is what huggingface_sb3 and CleanRL write, with `library_name: rlrun`: tags
(`reinforcement-learning`, the env id, the algorithm, `rlrun`) and a `model-index` whose one metric,
`mean_reward`, is "m +/- s" with two decimals, as huggingface_sb3 formats it (`mean_reward`). The
body names the checkpoint, the 50 seeded episodes behind the score and the commands that re-derive
it, the IQM across the run's sessions, the learning curve, the files, the software and the spec.

Every string the YAML holds is written as a JSON string, which YAML reads as the same string (so
no YAML library is needed, and an env id or a name can hold any character).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FILES = {
    "model.safetensors": "the acting weights and the observation normalisation statistics (safetensors)",
    "agent.pt": "the frozen TorchScript policy, observation batch → action batch; loads with torch alone",
    "policy.onnx": "the same policy as an ONNX graph (`rlrun enjoy --policy`, onnxruntime)",
    "agent.contract.json": "agent.pt's contract: spaces, dtypes, preprocessing, normalisation, software, hashes",
    "policy.contract.json": "policy.onnx's contract, the same with its opset (`rlrun export --check` checks both)",
    "replay.mp4": "the first of the scored episodes",
    "curve.png": "evaluation return against frames, mean ± std across sessions",
    "spec.json": "the experiment spec the checkpoint was trained with",
    "versions.json": "the software the run ran on",
}
"""What each file of a repository is, in the card's table (the bundle is named apart)."""


def mean_reward(mean: float, std: float) -> str:
    """The score as huggingface_sb3 writes it in `model-index`: "m +/- s", two decimals each."""
    return f"{mean:.2f} +/- {std:.2f}"


@dataclass(frozen=True)
class Interval:
    """An aggregate across sessions with its 95% bootstrap interval (`rlrun.compare.statistics`)."""

    point: float
    low: float
    high: float
    sessions: int
    reps: int


@dataclass(frozen=True)
class CardFacts:
    """What a card says: the run, the checkpoint, the score and how to re-derive it."""

    run_id: str
    run_name: str | None
    algorithm: str
    env_id: str
    session: int
    checkpoint_frame: int
    checkpoint_sha256: str
    episodes: int
    seed: int
    mean: float
    std: float
    pull_from: str
    bundle: str
    bundle_sha256: str
    spec: dict[str, Any]
    versions: dict[str, str]
    files: list[str]
    iqm: Interval | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def reference(self) -> str:
        """The checkpoint the card scores, as every command takes it."""
        return f"{self.run_id}/s{self.session}@{self.checkpoint_frame}"

    @property
    def title(self) -> str:
        return f"{self.algorithm.upper()} on {self.env_id}"


def render(facts: CardFacts) -> str:
    """The whole `README.md`."""
    return front_matter(facts) + "\n" + body(facts)


def front_matter(facts: CardFacts) -> str:
    """The YAML the Hub indexes: library, tags and the `mean_reward` result."""
    q = json.dumps
    tags = ["reinforcement-learning", facts.env_id, facts.algorithm, "rlrun"]
    lines = ["---", f"library_name: {q('rlrun')}", "tags:", *[f"- {q(tag)}" for tag in tags]]
    lines += [
        "model-index:",
        f"- name: {q(facts.title)}",
        "  results:",
        "  - task:",
        f"      type: {q('reinforcement-learning')}",
        f"      name: {q('reinforcement-learning')}",
        "    dataset:",
        f"      name: {q(facts.env_id)}",
        f"      type: {q(facts.env_id)}",
        "    metrics:",
        f"    - type: {q('mean_reward')}",
        f"      value: {q(mean_reward(facts.mean, facts.std))}",
        f"      name: {q('mean_reward')}",
        "      verified: false",
        "---",
    ]
    return "\n".join(lines) + "\n"


def body(facts: CardFacts) -> str:
    """The Markdown a person reads under the front matter."""
    parts = [
        f"# {facts.title}: run {facts.run_name or facts.run_id}",
        _summary(facts),
        _score(facts),
        _reproduce(facts),
        _curve(facts),
        _files(facts),
        _software(facts),
        "## Spec\n\n```json\n" + json.dumps(facts.spec, indent=2, sort_keys=True) + "\n```",
    ]
    if facts.notes:
        parts.append("## Left out\n\n" + "\n".join(f"- {note}" for note in facts.notes))
    return "\n\n".join(parts) + "\n"


def _summary(facts: CardFacts) -> str:
    return (
        f"A {facts.algorithm} agent playing {facts.env_id}, trained with"
        " [rlrun](https://pypi.org/project/rlrun/): the checkpoint of session"
        f" s{facts.session} at frame {facts.checkpoint_frame:,} (sha256 `{facts.checkpoint_sha256}`),"
        " published with the whole run, so that its score can be re-derived and its training continued"
        " exactly."
    )


def _score(facts: CardFacts) -> str:
    lines = [
        "## Score",
        "",
        f"**mean_reward {mean_reward(facts.mean, facts.std)}**: the mean and standard deviation of"
        f" the return over {facts.episodes} greedy episodes played by `rlrun enjoy`, seed {facts.seed}"
        " (each episode's env seed derived from it).",
    ]
    if facts.iqm is not None:
        lines += ["", _across_sessions(facts.iqm)]
    return "\n".join(lines)


def _across_sessions(iqm: Interval) -> str:
    if iqm.sessions == 1:
        return (
            f"The run has one session: its final evaluation return is **{iqm.point:.2f}** (train with"
            " `meta.sessions` of 5 or more for an IQM with a confidence interval across seeds)."
        )
    return (
        f"Across the run's {iqm.sessions} sessions (a seed each), the interquartile mean of the final"
        f" evaluation return is **{iqm.point:.2f}**, 95% CI [{iqm.low:.2f}, {iqm.high:.2f}] (rliable's"
        f" stratified bootstrap, {iqm.reps:,} repetitions)."
    )


def _reproduce(facts: CardFacts) -> str:
    return "\n".join(
        [
            "## Reproduce",
            "",
            "```bash",
            "pip install rlrun",
            f"rlrun pull {facts.pull_from}",
            f"rlrun enjoy {facts.reference} --episodes {facts.episodes} --seed {facts.seed}"
            f"   # mean_reward {mean_reward(facts.mean, facts.std)}",
            f"rlrun resume {facts.run_id} --frames N   # continue training, bit for bit as if never stopped",
            "```",
            "",
            f"`rlrun pull` checks the bundle (`{facts.bundle}`, sha256 `{facts.bundle_sha256}`; pin it with"
            " `--sha256`) and every snapshot in it before the run is added to your home.",
        ]
    )


def _curve(facts: CardFacts) -> str:
    if "curve.png" not in facts.files:
        return "## Learning curve\n\nNot drawn (see below)."
    return "## Learning curve\n\n![evaluation return against frames](curve.png)"


def _files(facts: CardFacts) -> str:
    rows = [f"| `{name}` | {FILES[name]} |" for name in FILES if name in facts.files]
    rows.append(f"| `{facts.bundle}` | the resumable run: spec, registry rows, snapshots, replay memory, logs |")
    return "\n".join(["## Files", "", "| file | what it is |", "| --- | --- |", *rows])


def _software(facts: CardFacts) -> str:
    listed = ", ".join(f"{name} {version}" for name, version in facts.versions.items())
    return f"## Software\n\n{listed} (`versions.json`)."
