"""The spec's sections as pydantic models: the network, optimiser and memory an agent config uses,
the env, the meta settings and the whole `Spec`. Each section rejects unknown keys and documents its
fields with their docstrings (which `rlrun spec schema` shows). Torch-free."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rlrun.arithmetic import ARITHMETIC
from rlrun.errors import SizeError
from rlrun.sizes import parse_size
from rlrun.spec.problems import KeyProblem
from rlrun.spec.schedules import Constant, Schedule


def _size(raw: Any) -> Any:
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        try:
            return parse_size(raw)
        except SizeError as error:
            raise ValueError(str(error).split(": ", 1)[-1]) from None
    return raw


AUTO = "auto"
"""A count rlrun decides from the machine (`meta.torch_threads`, `env.workers`: `rlrun.spec.cores`)."""

ALE_NAMESPACE = "ALE/"
"""Atari games' ids (`ALE/Pong-v5`): registered by ale-py, the `atari` extra, when one is used."""

Frames = Annotated[int, BeforeValidator(_size), Field(gt=0)]
"""A positive frame count; accepts sizes such as "200k" or "1.5M"."""


def _count_or_auto(most: int) -> Any:
    """A check that gives one clear error for a count that is neither a whole number in 1..most
    nor "auto" (a bare union would report one error per member)."""

    def check(raw: Any) -> Any:
        if raw == AUTO or (isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= most):
            return raw
        raise ValueError(f'use a whole number from 1 to {most}, or "auto"')

    return BeforeValidator(check)


class Strict(BaseModel):
    """Every spec section rejects unknown keys and documents fields with their docstrings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


BUILT_IN_NETWORKS = ("mlp", "nature_cnn")
_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


class RecurrentSpec(Strict):
    """A memory between a network's torso and its heads (`agent.network.recurrent`)."""

    cell: Literal["lstm", "gru"] = "lstm"
    """The recurrent cell: "lstm" (Hochreiter and Schmidhuber, 1997) or "gru" (Cho et al., 2014)."""
    size: int = Field(default=64, gt=0, le=65536)
    """Units of its hidden state."""


class NetworkSpec(Strict):
    kind: str = "mlp"
    """"mlp": fully connected layers on the flattened observation. "nature_cnn": the Nature-DQN
    convolutions (32 8×8 filters, stride 4; 64 4×4, stride 2; 64 3×3, stride 1) on image observations
    (uint8, scaled by 1/255 inside the network; a stack of frames is its channels), then the `hidden`
    layers (Nature: one of 512, ReLU — the defaults for this kind). DQN, PPO and A2C take either; A2C
    and PPO share the convolutions between the policy and the value heads, as Stable-Baselines3 does.
    "module:factory": a network of your own, a torch nn.Module class (or a function returning a module)
    that rlrun imports and calls as `factory(observation_space, outputs, **kwargs)` for each network
    (PPO, A2C, REINFORCE, DQN; `rlrun.algorithms.user_network` says what its forward pass takes)."""
    hidden: list[Annotated[int, Field(gt=0, le=65536)]] = Field(default=[64, 64], max_length=16)
    """Widths of the hidden (fully connected) layers (built-in kinds only)."""
    activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh"
    """Non-linearity between hidden layers (built-in kinds only)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for a "module:factory" network (JSON values)."""
    recurrent: RecurrentSpec | None = None
    """A memory, for partially observed tasks: `{"cell": "lstm" | "gru", "size": N}` puts a recurrent
    cell between the network (its hidden layers, its convolutions, or the user's network) and its
    heads, whose hidden state carries what the agent has seen this episode; it starts from zeros at
    each episode's start. PPO and A2C learn through whole rollouts of each env copy, DQN from
    sequences of its replay memory (R2D2's stored states and burn-in). Every env copy's state is in
    every snapshot. Structural: a resume may not add, remove or resize a memory. null: no memory."""

    @property
    def user(self) -> bool:
        """A network from the user's code ("module:factory")."""
        return self.kind not in BUILT_IN_NETWORKS

    @field_validator("kind")
    @classmethod
    def _kind_is_known(cls, kind: str) -> str:
        if kind not in BUILT_IN_NETWORKS and _IMPORT_PATH.fullmatch(kind) is None:
            raise ValueError(
                'not a network; use "mlp", "nature_cnn", or "module:factory" for a torch module '
                'of your own (e.g. "my_nets:PolicyNet")'
            )
        return kind

    @model_validator(mode="after")
    def _kwargs_for_user_networks(self) -> NetworkSpec:
        if self.kwargs and not self.user:
            raise KeyProblem("kwargs", f'are for a "module:factory" network, not {self.kind}; remove them')
        return self

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


class PrioritizedSpec(Strict):
    """Prioritised replay (Schaul et al., 2016), proportional form (`agent.memory.prioritized`)."""

    alpha: float = Field(default=0.6, ge=0, le=1)
    """How much the priorities count: transitions are drawn with probability p^alpha / Σ p^alpha,
    p = |TD error| + `epsilon`; 0: uniformly."""
    beta: float = Field(default=0.4, ge=0, le=1)
    """The importance-sampling correction's exponent at frame 0, annealed linearly to 1 at
    `meta.max_frame`."""
    epsilon: float = Field(default=1e-6, gt=0)
    """Added to every |TD error|, so no transition's chance is 0."""


class MemorySpec(Strict):
    capacity: int = Field(default=100_000, gt=0, le=100_000_000)
    """Transitions kept; the oldest are overwritten first."""
    snapshot: bool = True
    """Save the whole memory in every snapshot (exact resume), or refill it after a resume."""
    prioritized: PrioritizedSpec | None = None
    """Draw transitions by priority (DQN): `{"alpha": 0.6, "beta": 0.4}`; the priorities are in every
    snapshot with the rest of the memory. null: uniformly."""


class AgentConfig(Strict):
    """Base of every algorithm's config; the concrete class is chosen by `algorithm`."""

    algorithm: str
    """Algorithm name, e.g. "reinforce"."""
    ACTION_SPACES: ClassVar[tuple[str, ...]] = ()
    """The Gymnasium action spaces the algorithm acts in, by class name (`rlrun.spec.spaces`)."""
    TAKES_DATA: ClassVar[bool] = False
    """Whether the algorithm learns from a dataset (`data`, `meta.offline_updates`)."""
    NEEDS_DATA: ClassVar[bool] = False
    """Whether it learns only from a dataset: behaviour cloning does."""
    REMEMBERS: ClassVar[bool] = False
    """Whether the algorithm takes a memory (`network.recurrent`)."""
    PRIORITIZES: ClassVar[bool] = False
    """Whether its replay memory may draw by priority (`memory.prioritized`)."""

    @model_validator(mode="after")
    def _what_the_algorithm_takes(self) -> AgentConfig:
        network, memory = getattr(self, "network", None), getattr(self, "memory", None)
        if isinstance(network, NetworkSpec) and network.recurrent is not None and not self.REMEMBERS:
            from rlrun.spec.agents import ALGORITHMS, config_class  # the table of algorithms, read when needed

            takers = ", ".join(name for name in ALGORITHMS if config_class(name).REMEMBERS)
            raise KeyProblem(
                "network.recurrent",
                f"{self.algorithm} takes no memory: remove it, or use an algorithm that does ({takers})",
            )
        if isinstance(memory, MemorySpec) and memory.prioritized is not None and not self.PRIORITIZES:
            raise KeyProblem("memory.prioritized", f"{self.algorithm}'s replay memory draws uniformly: remove it")
        return self


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


MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
"""A dotted Python module name."""


class WrapperSpec(Strict):
    """One Gymnasium wrapper around each env copy, named by import path: Gymnasium's own
    (`{"class": "gymnasium.wrappers:ClipAction"}`) or the user's (`{"class": "my_pkg.wrappers:MyWrapper",
    "kwargs": {"k": 1}}`). A bare string `"module:Name"` is short for `{"class": "module:Name"}`."""

    class_: str = Field(alias="class", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    """`module:Name`, a subclass of `gymnasium.Wrapper` (ObservationWrapper, ActionWrapper… included),
    imported in every process that builds the env (the module must be importable there too)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the wrapper's constructor (after the env it wraps); plain JSON values."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return {"class": data} if isinstance(data, str) else data


class NormalizeSpec(Strict):
    """Normalise what the agent learns from with running statistics, as Stable-Baselines3's
    `VecNormalize` does (same formulas, same defaults). Observations: `clip((obs − mean) / sqrt(var +
    epsilon), ±clip_obs)` as float32, the mean and variance of every observation the training env
    returned so far (resets included). Rewards: divided by `sqrt(var + epsilon)` of the discounted return
    `R ← gamma·R + r` (reset to 0 where an episode ends), then clipped to ±clip_reward; never shifted.
    The statistics are updated only by training steps: evaluation and `rlrun enjoy` use the
    training statistics as they stand, frozen, and score the env's own rewards. They are part of every
    snapshot (exact resume). A replay memory (DQN, SAC) stores the env's own observations and rewards
    and normalises each sampled batch with the statistics of the moment, as SB3's buffers do."""

    observation: bool = True
    """Normalise observations (a Box observation space)."""
    reward: bool = True
    """Scale rewards by the running standard deviation of the discounted return."""
    clip_obs: float = Field(default=10.0, gt=0)
    """Normalised observations are clipped to [-clip_obs, clip_obs]."""
    clip_reward: float = Field(default=10.0, gt=0)
    """Scaled rewards are clipped to [-clip_reward, clip_reward]."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount of the return whose spread scales rewards (RL Zoo sets the agent's own gamma)."""
    epsilon: float = Field(default=1e-8, gt=0)
    """Added to the variances before the square root (no division by zero)."""


class EnvSpec(Strict):
    id: str = Field(min_length=1)
    """Gymnasium environment id, e.g. "CartPole-v1", or "module:EnvId" for an env of your own that
    importing `module` registers (e.g. "my_robot.envs:Reach-v0")."""
    packages: list[Annotated[str, Field(pattern=MODULE_NAME)]] = Field(default_factory=list)
    """Modules to import before the env is made, for envs they register when imported (like RL Zoo's
    `--gym-packages`), e.g. ["my_robot"]. Found on PYTHONPATH or in the current directory."""
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
    or replayed inside its worker, so a resume is exact either way). For many copies on many cores,
    `workers` splits them into blocks instead. The observations, rewards, flags, infos and each
    copy's state are the same bits either way (the copies' spaces seeded alike, same-step
    autoreset), so it is record-only: a resume may switch among "sync", "async" and `workers`."""
    workers: Annotated[int | Literal["auto"], _count_or_auto(1024)] = "auto"
    """Processes that step the copies (with "sync"): 1 steps them in the session's own process;
    W > 1 splits them into W contiguous blocks, each stepped in order by one worker process, while
    the session still acts on all copies at once. "auto" (the default), resolved when each session
    starts: the usable cores (the process's CPU affinity) over the sessions sharing them
    (`meta.sessions`, and other runs' sessions the registry has running on this machine now), less
    the learner's threads, at most `num_envs`, at least 1 (so 1 on a machine of two cores); and 1
    for the envs whose step costs microseconds (Gymnasium's classic control and toy text: a worker's
    wake-up each step costs more than their step, `rlrun.spec.cores.steps_cheaply`). The
    observations, rewards and all that is learnt are the same bits whatever the number, so it is
    record-only: a resume may change it.
    With "async" (one process per copy) it is not used."""
    wrappers: list[WrapperSpec] = Field(default_factory=list, max_length=64)
    """Gymnasium wrappers around each copy, innermost first: applied after Gymnasium's own (time
    limit, checks) and `atari` preprocessing, before `frame_stack` (which stacks what they return).
    Their state (plain attributes: counters, arrays, running statistics) is in every snapshot."""
    normalize: NormalizeSpec | None = None
    """Running normalisation of observations and rewards (SB3's VecNormalize): `{}` for the defaults,
    or some of its keys changed; null (the default) leaves them as the env gives them."""

    @field_validator("atari")
    @classmethod
    def _atari_only_for_ale(cls, atari: AtariSpec | None, info: ValidationInfo) -> AtariSpec | None:
        env_id = info.data.get("id", "")
        if atari is not None and not env_id.startswith(ALE_NAMESPACE):
            raise ValueError(
                f"preprocesses ALE games only ({ALE_NAMESPACE}Pong-v5, …), not {env_id}; remove it or use an ALE id"
            )
        return atari

    @model_validator(mode="after")
    def _workers_fit(self) -> EnvSpec:
        if self.workers == AUTO or self.workers == 1:
            return self
        if self.vectorization == "async":
            raise KeyProblem(
                "workers",
                '{vectorization} "async" already gives each copy its own process; use "sync" with workers,'
                " or leave workers at 1",
            )
        if isinstance(self.workers, int) and self.workers > self.num_envs:
            raise KeyProblem(
                "workers",
                f"more worker processes than the {self.num_envs} copies ({{num_envs}}); use at most"
                f' {self.num_envs}, or "auto"',
            )
        return self


ATARI_EVAL_EPSILON = 0.05
"""The DQN papers' evaluation ε for Atari games."""
ATARI_EVAL_EMULATOR_FRAMES = 18_000
"""The DQN papers' cap on an Atari evaluation episode: five minutes of play at 60 frames per second."""


class SlurmSpec(Strict):
    """Where and how `--slurm` submits each session's job, in submitit's terms
    (`rlrun.training.slurm`); the command line's `--partition`, `--time`, ... override each key.
    Placement only: a resume may change any of them, and the bits trained stay the same."""

    partition: str | None = Field(default=None, min_length=1, max_length=200)
    """The partition each job is submitted to (null: the cluster's default)."""
    time: int | None = Field(default=None, gt=0)
    """Each job's time limit in minutes (submitit's `timeout_min`; null: 60). Before it ends SLURM
    signals the job (`signal_delay`), which snapshots and requeues it: up to 3 times after timeouts."""
    cpus: int | None = Field(default=None, gt=0)
    """CPUs per session's job (`cpus_per_task`; null: 1)."""
    gpus: int | None = Field(default=None, ge=0)
    """GPUs per session's job (`gpus_per_node`; null: none)."""
    memory: float | None = Field(default=None, gt=0)
    """Memory per job in GB (`mem_gb`; null: the partition's default)."""
    account: str | None = Field(default=None, min_length=1, max_length=200)
    """The account the jobs are charged to (null: the user's default)."""
    qos: str | None = Field(default=None, min_length=1, max_length=200)
    """The quality of service of the jobs (null: the default)."""
    sbatch: dict[str, str] = Field(default_factory=dict)
    """Further `#SBATCH` lines, as KEY: VALUE (`{"constraint": "a100"}` is `--constraint=a100`);
    submitit's `slurm_additional_parameters`."""
    signal_delay: int | None = Field(default=None, gt=0)
    """Seconds before the time limit at which SLURM sends USR2, which snapshots and requeues the job
    (submitit's `signal_delay_s`; null: 90)."""


class RecipeSpec(Strict):
    """How to make a dataset that is not there yet: train a built-in spec, then record its episodes
    (`rlrun record --minari`), once, before the run is created. The dataset keeps it, and answers
    to no other recipe."""

    spec: str = Field(min_length=1)
    """The built-in spec whose run's policy plays the episodes, e.g. "reinforce_cartpole"."""
    frames: Frames
    """Its frame budget: a short one gives a "medium" policy's data."""
    episodes: int = Field(default=20, gt=0, le=10_000)
    """Episodes recorded."""
    stochastic: bool = True
    """Record sampled actions (a spread of behaviour) rather than the greedy ones."""
    epsilon: float | None = Field(default=None, ge=0, le=1)
    """A uniformly random action with this probability (a discrete action space): `rlrun record
    --epsilon`, D4RL's recipe for a "medium" policy's data."""
    noise: float | None = Field(default=None, gt=0)
    """Gaussian noise of this standard deviation on each action, clipped to the bounds (a
    continuous action space): `rlrun record --noise`."""
    replay: bool = False
    """Record the recipe run's own training transitions (its replay memory) instead of playing
    episodes: `rlrun record --replay`, "medium-replay" data."""

    @model_validator(mode="after")
    def _one_behaviour(self) -> RecipeSpec:
        if self.replay and (self.epsilon is not None or self.noise is not None):
            raise KeyProblem(
                "replay", "writes the recipe run's own training transitions, nothing is played; drop epsilon and noise"
            )
        if self.epsilon is not None and self.noise is not None:
            raise KeyProblem(
                "noise", "epsilon is for a discrete action space, noise for a continuous one; keep the one that fits"
            )
        return self


class DataSpec(Strict):
    """A dataset of transitions the agent learns from (`rlrun.data`), for `meta.offline_updates`
    gradient steps before the session steps the env. The run pins the
    dataset's files by their SHA-256 (`sha256`, recorded when the run is created): a resume or a
    fork against files that changed is refused. Snapshots name the dataset, never copy it."""

    dataset: str = Field(min_length=1)
    """A Minari dataset id found under `MINARI_DATASETS_PATH` (default `~/.minari/datasets`), e.g.
    "rlrun/cartpole-medium-v0", or the path of a dataset's folder (the one holding `data/`). Read
    with the `minari` extra."""
    recipe: RecipeSpec | None = None
    """Where the dataset comes from if it is not there yet (`RecipeSpec`); null: it must exist, and
    is used as it is. A dataset made from a recipe keeps it beside its `data/` (`rlrun-recipe.json`,
    outside the digest): a spec that names it with another recipe is refused (give that recipe a
    dataset id of its own, or drop the recipe); one recorded otherwise keeps none and is used."""
    mixing: float = Field(default=0.5, ge=0, le=1)
    """Online, after `meta.offline_updates` (algorithms that keep learning: td3bc, iql): the
    fraction of each batch's rows drawn from the dataset, round(mixing × batch_size), the rest from
    the online replay memory (RLPD's 50/50 by default; `rlrun.algorithms.mixing`). Offline, every row
    is the dataset's. It changes the run, so a resume may not edit it."""
    normalize: bool = False
    """Normalise observations by the dataset's own statistics (CORL's and d3rlpy's state
    normalisation for offline RL): the mean and variance of the dataset's observations, computed
    once when the session starts and fixed, applied as `env.normalize` applies its running ones
    (`clip((obs − mean) / sqrt(var + 1e-6), ±10)`, float32) everywhere the agent sees an
    observation: the dataset's rows, the online memory's batches, acting, evaluation, `rlrun enjoy`
    and the exported graphs. The statistics are in every snapshot, as `env.normalize`'s are. It
    changes the run, so a resume may not edit it."""
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """The dataset's files' digest, recorded when the run is created (null in a spec you write: the
    run fills it in). A resume or a fork whose dataset no longer has it is refused."""


class MetaSpec(Strict):
    max_frame: Frames
    """Frame budget of each session (env transitions summed over `num_envs`)."""
    offline_updates: Annotated[int, BeforeValidator(_size), Field(ge=0)] = 0
    """Gradient steps on the dataset (`data`) before the session steps the env: the first
    `offline_updates` of `max_frame`, each counted as one frame of the run's clock (so every cadence,
    evaluation, snapshot and schedule reads them as it reads frames), then `max_frame −
    offline_updates` env frames online. At least `max_frame`: pure offline learning. 0 (the
    default): online from the start. The phase is a function of the frame alone, so a resume at,
    before or after the switch continues it exactly."""
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
    eval_epsilon: float | None = Field(default=None, ge=0, le=1)
    """Chance, at each evaluation step, of a uniformly random action instead of the policy's, drawn
    from evaluation's own random stream (never training's). null: 0.05 for Atari games (`env.atari`
    set), the evaluation of the DQN papers (Mnih et al., 2015; Machado et al., 2018), which keeps an
    agent that has not learnt to press FIRE from idling until the game's time limit; 0 elsewhere
    (the policy's action alone)."""
    eval_max_steps: int | None = Field(default=None, gt=0)
    """Agent steps after which an evaluation episode is cut: it counts with the return it reached
    and is recorded as truncated. null: five minutes of play for Atari games (18,000 emulator
    frames: 4,500 steps at the standard frame skip of 4, as the DQN papers), no cap elsewhere (the
    env's own time limit)."""
    eval_overlap: bool = False
    """Evaluate on a background thread while training goes on, on a copy of the policy taken at
    the evaluation's frame. The results, the best snapshot and every snapshot's content are the
    same as without it, bit for bit; a snapshot due while an earlier evaluation is still running
    is written at once and put in place when that evaluation ends."""
    stop_at_return: float | None = None
    """End each session at the first evaluation whose mean return reaches this, as SB3's
    `StopTrainingOnRewardThreshold` does: the session stops there, before `max_frame`, with its
    final snapshot, and is `finished`. Each evaluation is then awaited at its frame (`eval_overlap`
    gives up its overlap), so the session stops at the same frame however often it was stopped and
    resumed. A target, as `max_frame` is: a resume may change it, and a session whose best evaluation
    already reaches it has nothing left to train. null: train to `max_frame`."""
    eval_video: int | None = Field(default=None, gt=0)
    """Record a video of the first episode of every this many evaluations (the first evaluation's
    too) into the run (`videos/eval-<frame>.mp4`) and to the trackers, as the zoo's
    `--record-video`; the `video` extra (without it the run is refused before anything is written).
    The episode is the evaluation's own, played again with rendering, so training's bits are the same
    with or without it. Counted over the session's evaluations, across resumes; an env that cannot
    render rgb_array frames gets one warning line and trains on without videos. Record-only. null: no
    videos."""
    checkpoint_frequency: Frames = 50_000
    """Write a periodic snapshot every this many frames."""
    keep_checkpoints: int = Field(default=3, gt=0)
    """Periodic snapshots kept per session; the best and the final are always kept."""
    log_frequency: Frames = 5_000
    """Report progress every this many frames."""
    track: list[Literal["mlflow", "wandb"]] = Field(default_factory=list)
    """Experiment trackers each session also logs to (`rlrun.trackers`): "mlflow", "wandb". Record-only:
    a resume continues the same tracker runs, and may add or drop one."""
    torch_threads: Annotated[int | Literal["auto"], _count_or_auto(256)] = 1
    """Torch intra-op threads per session (one keeps parallel sessions from fighting). "auto": the
    usable cores (the CPU affinity) over the sessions sharing them (`sessions`, and other runs'
    sessions the registry has running on this machine then), at least 1, resolved once when the
    run is created and recorded as that number: the thread count can change how torch splits a sum, so
    it is structural, and a resume on another machine keeps the recorded number."""
    arithmetic: Annotated[int, Field(ge=1, le=ARITHMETIC)] = ARITHMETIC
    """Which revision of rlrun's learning arithmetic the run trains with; structural, recorded with
    the run. A faster way of computing the same update that rounds differently is a new revision, so
    a run keeps the bits it started with on any later rlrun: a spec recorded before this setting
    existed trained with 1, and resumes with 1. What each revision changes is the table of
    `rlrun.arithmetic` (docs/explanation/arithmetic-revisions.md): 1, every run recorded before the
    setting existed; 2, SAC learns with subnormals flushed and forms its narrow products the faster
    way round, a `nature_cnn` folds its frames' 1/255 into its weights; 3 (the default), SAC's wide
    products take bfloat16 operands on a CPU with AVX-512. `--fork` may move a run to another revision."""
    kernels: Literal["auto", "autograd"] = "auto"
    """How the learning step's gradients are computed. "auto": by a kernel where one serves the
    agent, its network and the run's arithmetic (`rlrun.algorithms.kernels`: PPO's and A2C's
    built-in MLP heads, DQN's, SAC's, TD3+BC's and IQL's built-in MLPs), else by autograd;
    "autograd": by autograd alone, slower. Where every kernel of the run computes autograd's bits
    (PPO, A2C, DQN, TD3+BC and IQL always, SAC at arithmetic 1) it changes no bit and a resume may
    switch it; otherwise (SAC from arithmetic 2, whose kernel rounds its products another way) it
    is structural, and `--fork` may switch it."""
    device: str = "cpu"
    """Where the networks learn: "cpu", "cuda" (the current GPU), "cuda:N", or "auto" (CUDA when torch
    sees a GPU, else the CPU). The CPU is the default: a spec then trains the same bits on any machine,
    and small networks run faster there. The replay memory, rollouts and random generators stay in
    host memory whatever the device. On CUDA a resume is exact on the same GPU model where torch has
    deterministic kernels; the registry records a session that used one without, or that resumed on
    another device, as approximate."""
    slurm: SlurmSpec | None = None
    """How `--slurm` submits the sessions' jobs (partition, time limit, CPUs, ...): see `SlurmSpec`.
    Read only with `--slurm`; placement, as `device` is."""

    def offline(self, frame: int) -> bool:
        """Whether a session at `frame` is still in its offline phase (learning from the dataset)."""
        return frame < self.offline_updates

    def reached(self, frame: int, best_return: float | None) -> bool:
        """Whether a session at `frame` whose best evaluation's mean is `best_return` (None: none
        yet) has reached its targets: the frame budget, or `stop_at_return`."""
        return frame >= self.max_frame or (
            self.stop_at_return is not None and best_return is not None and best_return >= self.stop_at_return
        )

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
    data: DataSpec | None = None
    """A dataset to learn from, offline then online (`DataSpec`); null (the default): none."""

    @model_validator(mode="after")
    def _offline_needs_data(self) -> Spec:
        if self.meta.offline_updates and self.data is None:
            raise KeyProblem("meta.offline_updates", "learns from a dataset: name one in data.dataset")
        if self.data is not None and not self.agent.TAKES_DATA:
            from rlrun.spec.agents import ALGORITHMS, config_class  # the table of algorithms, read when needed

            takers = ", ".join(name for name in ALGORITHMS if config_class(name).TAKES_DATA)
            raise KeyProblem(
                "data",
                f"{self.agent.algorithm} does not learn from a dataset; remove data, or use one that does ({takers})",
            )
        if self.data is not None and self.env.normalize is not None:
            raise KeyProblem(
                "env.normalize",
                "running statistics would move under a dataset's fixed rows; remove it when learning from data",
            )
        if self.data is None and self.agent.NEEDS_DATA:
            raise KeyProblem(
                "agent.algorithm", f"{self.agent.algorithm} learns from a dataset: name one in data.dataset"
            )
        return self

    @property
    def eval_epsilon(self) -> float:
        """`meta.eval_epsilon`, its null resolved for the env's family."""
        if self.meta.eval_epsilon is not None:
            return self.meta.eval_epsilon
        return ATARI_EVAL_EPSILON if self.env.atari is not None else 0.0

    @property
    def eval_max_steps(self) -> int | None:
        """`meta.eval_max_steps`, its null resolved for the env's family (None: no cap)."""
        if self.meta.eval_max_steps is not None or self.env.atari is None:
            return self.meta.eval_max_steps
        return -(-ATARI_EVAL_EMULATOR_FRAMES // self.env.atari.frame_skip)

    def to_json(self) -> dict[str, Any]:
        """The complete document, defaults filled in; it validates back to an equal spec."""
        return self.model_dump(mode="json", by_alias=True)
