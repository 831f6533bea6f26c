"""The experiment spec: one JSON document, validated by a pydantic schema.

`load_spec` is the one entry point: it takes a file path or a built-in name, applies `--set`
overrides, and either returns a `Spec` or raises `SpecError` with one line per problem, each naming
the JSON path, the value and a fix. Algorithm hyper-parameters are validated by the algorithm's own
config class (looked up by `agent.algorithm` in `rlrun.algorithms.configs`), so each algorithm
documents its settings in one place. Validating a spec never imports torch: the configs are kept
apart from the networks.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rlrun.algorithms import algorithm_names, config_class
from rlrun.errors import BadInput, SizeError, SpecError
from rlrun.schedules import Constant, Schedule
from rlrun.sizes import parse_size


def _size(raw: Any) -> Any:
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        try:
            return parse_size(raw)
        except SizeError as error:
            raise ValueError(str(error).split(": ", 1)[-1]) from None
    return raw


ALE_NAMESPACE = "ALE/"
"""Atari games' ids (`ALE/Pong-v5`): registered by ale-py, the `atari` extra, when one is used."""

Frames = Annotated[int, BeforeValidator(_size), Field(gt=0)]
"""A positive frame count; accepts sizes such as "200k" or "1.5M"."""


class Strict(BaseModel):
    """Every spec section rejects unknown keys and documents fields with their docstrings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class NetworkSpec(Strict):
    kind: Literal["mlp", "nature_cnn"] = "mlp"
    """"mlp": fully connected layers on the flattened observation. "nature_cnn": the Nature-DQN
    convolutions (32 8×8 filters, stride 4; 64 4×4, stride 2; 64 3×3, stride 1) on image observations
    (uint8, scaled by 1/255 inside the network; a stack of frames is its channels), then the `hidden`
    layers (Nature: one of 512, ReLU — the defaults for this kind). DQN, PPO and A2C take either; A2C
    and PPO share the convolutions between the policy and the value heads, as Stable-Baselines3 does."""
    hidden: list[Annotated[int, Field(gt=0, le=65536)]] = Field(default=[64, 64], max_length=16)
    """Widths of the hidden (fully connected) layers."""
    activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh"
    """Non-linearity between hidden layers."""

    @model_validator(mode="before")
    @classmethod
    def _nature_defaults(cls, data: Any) -> Any:
        """A nature_cnn left without `hidden` or `activation` is the Nature network: 512 units, ReLU."""
        if isinstance(data, dict) and data.get("kind") == "nature_cnn":
            return {"hidden": [512], "activation": "relu", **data}
        return data


class OptimizerSpec(Strict):
    name: Literal["adam", "rmsprop", "sgd"] = "adam"
    """Torch optimiser."""
    lr: Schedule = Constant(value=1e-3)
    """Learning rate: a number or a schedule over frames."""
    eps: float = Field(default=1e-8, gt=0)
    """Numerical-stability term of Adam and RMSprop."""
    grad_clip: float | None = Field(default=None, gt=0)
    """Clip the global gradient norm to this value (none when null)."""

    @field_validator("lr")
    @classmethod
    def _lr_is_positive(cls, lr: Schedule) -> Schedule:
        problem = lr.not_positive()
        if problem is not None:
            raise ValueError(problem)
        return lr


class MemorySpec(Strict):
    capacity: int = Field(default=100_000, gt=0, le=100_000_000)
    """Transitions kept; the oldest are overwritten first."""
    snapshot: bool = True
    """Save the whole memory in every snapshot (exact resume), or refill it after a resume."""


class AgentConfig(Strict):
    """Base of every algorithm's config; the concrete class is chosen by `algorithm`."""

    algorithm: str
    """Algorithm name, e.g. "reinforce"."""


class AtariSpec(Strict):
    """The standard preprocessing of Atari games (Mnih et al., 2015; Stable-Baselines3's AtariWrapper
    and its defaults). Sticky actions are the ALE v5 env's own setting (`env.kwargs.repeat_action_probability`,
    0.25 by default); with `frame_skip` above 1 the ALE env is made with `frameskip=1` and this block
    repeats each action. Evaluation scores the real game: its env has no reward clipping and no
    terminal on life loss (the rest is the same), so evaluation returns are game scores."""

    noop_max: int = Field(default=30, ge=0, le=1000)
    """Each episode starts with a random number (1 to noop_max) of no-op actions; 0 turns it off."""
    frame_skip: int = Field(default=4, ge=1, le=64)
    """Emulator frames per agent step, the action repeated; the observation is the pixel-wise maximum of
    the last two frames (Atari sprites flicker). One rlrun frame is one agent step."""
    screen_size: int = Field(default=84, ge=8, le=1024)
    """Frames are resized (area interpolation) to screen_size × screen_size pixels."""
    grayscale: bool = True
    """Grey frames (84×84), or colour ones (84×84×3)."""
    terminal_on_life_loss: bool = True
    """A lost life ends the learner's episode (terminated, so no bootstrap past it), but the game goes
    on: the next episode continues from there, with a no-op step (DeepMind's and SB3's EpisodicLife).
    Training only; evaluation plays whole games."""
    fire_reset: bool = True
    """In games whose action 1 is FIRE (Breakout…), press FIRE at the start of each episode (SB3's
    FireResetEnv), which games that wait for it need to start."""
    clip_rewards: bool = True
    """Learn from the reward's sign (−1, 0, +1). Training only; evaluation sums the game's own rewards."""


class EnvSpec(Strict):
    id: str = Field(min_length=1)
    """Gymnasium environment id, e.g. "CartPole-v1"."""
    num_envs: int = Field(default=1, gt=0, le=1024)
    """Copies of the environment stepped together; frames count transitions over all copies."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to `gymnasium.make`."""
    max_episode_steps: int | None = Field(default=None, gt=0)
    """Override the environment's time limit (null keeps Gymnasium's default)."""
    frame_stack: int = Field(default=1, ge=1, le=16)
    """Stack the last N observations along a new first axis, so the agent sees motion (Atari: 4). At an
    episode's start the stack repeats its first observation. The replay memory stores each frame once."""
    atari: AtariSpec | None = None
    """Atari preprocessing for an ALE id (`ALE/Pong-v5`, with the `atari` extra): `{}` for the standard
    set, or some of its keys changed; null (the default) gives the raw ALE env. With it,
    `max_episode_steps` counts emulator frames."""
    vectorization: Literal["sync", "async"] = "sync"
    """Step the copies in this process ("sync"), or one subprocess each ("async": faster only when
    a step costs far more than passing its data between processes; each copy's state is captured
    or replayed inside its worker, so a resume is exact either way)."""

    @field_validator("atari")
    @classmethod
    def _atari_only_for_ale(cls, atari: AtariSpec | None, info: ValidationInfo) -> AtariSpec | None:
        env_id = info.data.get("id", "")
        if atari is not None and not env_id.startswith(ALE_NAMESPACE):
            raise ValueError(f"preprocesses ALE games only ({ALE_NAMESPACE}Pong-v5, …), not {env_id}; "
                             "remove it or use an ALE id")
        return atari


class MetaSpec(Strict):
    max_frame: Frames
    """Frame budget of each session (env transitions summed over `num_envs`)."""
    sessions: int = Field(default=1, gt=0, le=64)
    """Sessions in the run; session i uses seed `seed + i` and runs in its own process."""
    seed: int = Field(default=0, ge=0, lt=2**31)
    """Base seed; every random stream of a session derives from `seed + i`."""
    eval_frequency: Frames = 10_000
    """Evaluate the policy every this many frames (and at the end)."""
    num_eval_episodes: int = Field(default=10, gt=0, le=10_000)
    """Episodes per evaluation, on a separate environment with its own random stream."""
    eval_deterministic: bool = True
    """Evaluate the greedy / mean action rather than sampling."""
    checkpoint_frequency: Frames = 50_000
    """Write a periodic snapshot every this many frames."""
    keep_checkpoints: int = Field(default=3, gt=0)
    """Periodic snapshots kept per session; the best and the final are always kept."""
    log_frequency: Frames = 5_000
    """Report progress every this many frames."""
    torch_threads: int = Field(default=1, gt=0, le=256)
    """Torch intra-op threads per session (one keeps parallel sessions from fighting)."""
    device: str = "cpu"
    """Where the networks learn: "cpu", "cuda" (the current GPU), "cuda:N", or "auto" (CUDA when torch
    sees a GPU, else the CPU). The CPU is the default: a spec then trains the same bits on any machine,
    and small networks run faster there. The replay memory, rollouts and random generators stay in
    host memory whatever the device. On CUDA a resume is exact on the same GPU model where torch has
    deterministic kernels; the registry records a session that used one without, or that resumed on
    another device, as approximate."""

    @field_validator("device")
    @classmethod
    def _device_is_known(cls, device: str) -> str:
        if re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", device) is None:
            raise ValueError('not a device; use "auto", "cpu", "cuda" or "cuda:N" (N: the GPU\'s index)')
        return device


class Spec(Strict):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    """Spec name, shown in `rlrun ls`."""
    agent: SerializeAsAny[AgentConfig]
    """The algorithm and its hyper-parameters, network, optimiser and memory."""
    env: EnvSpec
    meta: MetaSpec

    def to_json(self) -> dict[str, Any]:
        """The complete document, defaults filled in; it validates back to an equal spec."""
        return self.model_dump(mode="json", by_alias=True)


# ---------------------------------------------------------------------------------------------
# Loading


def builtin_names() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in _builtin_dir().iterdir() if p.name.endswith(".json"))


def builtin_document(name: str) -> dict[str, Any]:
    path = _builtin_dir() / f"{name}.json"
    if not path.is_file():
        raise SpecError([_unknown_builtin_message(name)])
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _builtin_dir() -> Any:
    return resources.files("rlrun") / "specs"


def _unknown_builtin_message(name: str) -> str:
    hint = _did_you_mean(name, builtin_names()) or f" built-ins: {', '.join(builtin_names())}"
    return f"spec {json.dumps(name)}: no such file or built-in spec;{hint}"


def read_document(source: str | Path) -> dict[str, Any]:
    """A spec document from a JSON file, or the built-in spec of that name."""
    path = Path(source)
    if path.is_dir():
        fix = "give a .json file or a built-in name (`rlrun spec list`)"
        raise SpecError([f"{path} is a folder, not a spec file; {fix}"])
    if path.is_file():
        try:
            document = json.loads(path.read_text(encoding="utf-8-sig"))  # the byte-order mark some editors write
        except UnicodeDecodeError as error:
            raise SpecError([f"{path}: not UTF-8 text ({_where_byte(error)}); save it as UTF-8"]) from None
        except OSError as error:
            raise SpecError([f"{path}: cannot be read ({error.strerror}); check the file's permissions"]) from None
        except json.JSONDecodeError as error:
            raise SpecError(
                [f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); fix the syntax"]
            ) from None
        if not isinstance(document, dict):
            raise SpecError([f"{path}: a spec is a JSON object {{...}}, got {type(document).__name__}"])
        if (what := _not_a_spec(path, document)) is not None:
            raise SpecError([what])
        return document
    if path.suffix == ".json" or "/" in str(source):
        fix = "give a path or a built-in name (`rlrun spec list`)"
        raise SpecError([f"spec file {json.dumps(str(source))} does not exist; {fix}"])
    return builtin_document(str(source))


def _not_a_spec(path: Path, document: dict[str, Any]) -> str | None:
    """What a JSON file is when it is one of rlrun's own files rather than a spec (a run's
    run.json, a snapshot's meta.json or MANIFEST.json), and the command meant: one line, or None."""
    run = document.get("run")
    if isinstance(run, dict) and "spec_revisions" in document:
        run_id = run.get("id", "?")
        return f"{path} is run {run_id}'s manifest (run.json), not a spec; to continue that run: rlrun resume {run_id}"
    if {"clock", "run_id", "session_index"} <= set(document):  # a snapshot's meta.json
        return _snapshot_advice(path, document)
    if {"format", "files"} <= set(document) <= {"format", "files", "logs"}:  # a snapshot's MANIFEST.json
        try:
            return _snapshot_advice(path, json.loads((path.parent / "meta.json").read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return f"{path} is a snapshot's MANIFEST.json (its files' hashes), not a spec"
    return None


def _snapshot_advice(path: Path, meta: dict[str, Any]) -> str:
    run_id, index, frame = meta["run_id"], meta["session_index"], int(meta["clock"]["frame"])
    return (f"{path} is part of a snapshot of run {run_id} (session s{index}) at frame {frame:,}, not a spec;"
            f" to replay it: rlrun enjoy {run_id}/s{index}@{frame}; to continue the run: rlrun resume {run_id}")


def _where_byte(error: UnicodeDecodeError) -> str:
    """The first byte that is not UTF-8, and its line and column as an editor counts them."""
    before = error.object[: error.start]
    line, column = before.count(b"\n") + 1, error.start - before.rfind(b"\n")
    return f"byte 0x{error.object[error.start]:02x} on line {line}, column {column}"


def parse_override(text: str) -> tuple[list[str], Any]:
    """`agent.optimizer.lr=0.01` -> (["agent", "optimizer", "lr"], 0.01); values are JSON or strings."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(path):
        raise SpecError([f"--set {text!r}: expected dotted.key=value, e.g. --set meta.max_frame=200k"])
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return path, value


def apply_overrides(document: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of the document with each `--set dotted.key=value` applied in order."""
    result = copy.deepcopy(document)
    for text in overrides:
        path, value = parse_override(text)
        node = result
        for depth, key in enumerate(path[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise SpecError([f"--set {text!r}: {where} is {child!r}, not an object with keys"])
            node = child
        node[path[-1]] = value
    return result


def load_spec(source: str | Path | dict[str, Any], overrides: list[str] | None = None) -> Spec:
    """Read, override and validate a spec; raises SpecError listing every problem."""
    document = source if isinstance(source, dict) else read_document(source)
    return validate_spec(apply_overrides(document, overrides or []))


def validate_spec(document: dict[str, Any], *, check_env_id: bool = True) -> Spec:
    """The spec in `document`, or SpecError listing every problem. `check_env_id=False` skips
    asking Gymnasium whether `env.id` exists (and importing it), for readers of a spec that was
    checked when it was stored, such as `rlrun gc`."""
    problems: list[str] = []
    if "search" in document:  # a search space: `rlrun search` trains its trials, one run each
        problems.append("search: this spec is a search space; run it with `rlrun search SPEC` (or remove the"
                        " search block to train one run with the values it gives)")
        document = {key: value for key, value in document.items() if key != "search"}
    agent: AgentConfig = AgentConfig(algorithm="?")
    raw_agent = document.get("agent")
    if isinstance(raw_agent, dict):
        name = raw_agent.get("algorithm")
        if name in algorithm_names():
            config = config_class(name)
            try:
                agent = config.model_validate(raw_agent)
            except ValidationError as error:
                problems += _describe(error, config, prefix=("agent",))
        elif "algorithm" not in raw_agent:
            problems.append(f"agent.algorithm: missing; add one of {', '.join(algorithm_names())}")
        else:
            hint = _did_you_mean(str(name), algorithm_names()) or f" choose one of {', '.join(algorithm_names())}"
            problems.append(f"agent.algorithm = {json.dumps(name)}: unknown algorithm;{hint}")
    try:
        spec = Spec.model_validate({**document, "agent": agent} if isinstance(raw_agent, dict) else document)
    except ValidationError as error:
        problems += _describe(error, Spec, prefix=())
    else:
        if check_env_id:
            problems += _check_env_id(spec.env.id)
        if not problems:
            return spec
    raise SpecError(problems)


def _check_env_id(env_id: str) -> list[str]:
    import gymnasium

    from rlrun.envs import register_env_package

    try:
        register_env_package(env_id)
    except BadInput as missing:
        return [str(missing)]
    known = list(gymnasium.envs.registry.keys())
    if env_id in known:
        return []
    hint = _did_you_mean(env_id, known) or " see gymnasium.pprint_registry() for the ids"
    return [f"env.id = {json.dumps(env_id)}: unknown Gymnasium environment;{hint}"]


# ---------------------------------------------------------------------------------------------
# Error messages: one line per problem, with the path, the value and a fix.


def did_you_mean(word: str, candidates: list[str]) -> str:
    """` did you mean "X"?` for the closest candidate, or nothing."""
    return _did_you_mean(word, candidates)


def _did_you_mean(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[word.lower()]] if word.lower() in lowered else []
    return f' did you mean "{close[0]}"?' if close else ""


_SCHEDULE_KINDS = {"constant", "linear", "piecewise", "exponential"}


def _describe(error: ValidationError, model: type[BaseModel], prefix: tuple[str, ...]) -> list[str]:
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(str(part) for part in item["loc"])
        loc = tuple(part for part in loc if part not in _SCHEDULE_KINDS and not part.startswith("function-"))
        path = ".".join(prefix + loc) or "spec"
        lines.append(_line(path, item, model, loc))
    return lines


def _line(path: str, item: Any, model: type[BaseModel], loc: tuple[str, ...]) -> str:
    kind, value, message = item["type"], item.get("input"), item["msg"]
    if kind == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1])
        hint = _did_you_mean(loc[-1], allowed) or (f" allowed keys: {', '.join(allowed)}" if allowed else "")
        return f"{path}: unknown key;{hint or ' remove it'}"
    if kind == "missing":
        return f"{path}: required key is missing; add it"
    shown = json.dumps(value) if _jsonable(value) else repr(value)
    if kind == "literal_error":
        choices = [str(c) for c in (item.get("ctx") or {}).get("expected", "").replace("'", "").split(" or ")]
        choices = [c for part in choices for c in part.split(", ")]
        hint = _did_you_mean(str(value), choices) or f" use one of {', '.join(choices)}"
        return f"{path} = {shown}: not an accepted value;{hint}"
    if kind == "union_tag_invalid":
        kinds = "constant, linear, piecewise or exponential"
        return f"{path} = {shown}: unknown kind; use a number or a schedule with kind {kinds}"
    message = message.removeprefix("Value error, ")
    return f"{path} = {shown}: {message[0].lower()}{message[1:]}"


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _fields_at(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """Names of the keys allowed at `loc` below `model`, following nested models."""
    current: Any = model
    for key in loc:
        field = current.model_fields.get(key) if _is_model(current) else None
        if field is None:
            return []
        current = _model_in(field.annotation)
        if current is None:
            return []
    return list(current.model_fields) if _is_model(current) else []


def _is_model(candidate: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, BaseModel)


def _model_in(annotation: Any) -> Any:
    if _is_model(annotation):
        return annotation
    for arg in get_args(annotation) if get_origin(annotation) is not None else ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def json_schema() -> dict[str, Any]:
    """JSON Schema of a spec, with `agent` as the union of every algorithm's config."""
    schema = Spec.model_json_schema()
    agents = [config_class(name).model_json_schema() for name in algorithm_names()]
    defs = schema.setdefault("$defs", {})
    for agent_schema in agents:
        defs.update(agent_schema.pop("$defs", {}))
        defs[agent_schema["title"]] = agent_schema
    schema["properties"]["agent"] = {"oneOf": [{"$ref": f"#/$defs/{a['title']}"} for a in agents]}
    defs.pop("AgentConfig", None)
    return schema
