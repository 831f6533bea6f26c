"""A checkpoint's acting policy as a frozen TorchScript module, `agent.pt` (`rlrun export REF
--torchscript agent.pt`, `write_agent`), which torch alone loads and runs, as the Open RL
Leaderboard expects:

    agent = torch.jit.load("agent.pt")
    actions = agent(observations)                   # a batch, as the run's env gives it
    actions, state = agent(observations, state)     # a policy with a memory: zeros at each episode's start

It is the module the ONNX export traces (`rlrun.enjoy.graph.acting_graph`: the run's frozen
normalisation, then the actor's greedy `graph()`), cut to its action (and, with a memory, its
`next_state`), traced by `torch.jit.trace` and frozen (weights as constants, no Python). The batch
axis stays free: when the trace fixed the batch size (a network that reads `len(obs)`, a number to
the tracer), the module is traced on one observation and a scripted loop runs it row by row.
The file carries `rlrun.json` (`torch.jit.load(..., _extra_files=...)`): the run, session,
checkpoint frame and sha256, and the state's shape. Nothing in it is pickled Python.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlrun.enjoy.contract import write_contract
from rlrun.enjoy.graph import Exported, acting_graph, check_destination, example_inputs, exported, policy_of
from rlrun.errors import BadInput

if TYPE_CHECKING:
    from rlrun.enjoy.policy import Policy
    from rlrun.refs import RunFilter, RunRef

METADATA = "rlrun.json"
"""The extra file in `agent.pt` that names the checkpoint."""


class ActionOnly(nn.Module):
    """An acting graph's `action` alone: observation batch → action batch."""

    def __init__(self, graph: nn.Module) -> None:
        super().__init__()
        self.policy = graph

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        out: tuple[torch.Tensor, ...] = self.policy(observation)
        return out[0]


class ActionAndState(nn.Module):
    """An acting graph with a memory cut to (action, next_state)."""

    def __init__(self, graph: nn.Module) -> None:
        super().__init__()
        self.policy = graph

    def forward(self, observation: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out: tuple[torch.Tensor, ...] = self.policy(observation, state)
        return out[0], out[-1]


def agent_module(policy: Policy) -> nn.Module:
    """The eager module `agent.pt` freezes: the acting graph cut to what an agent returns."""
    graph = acting_graph(policy.actor, policy.normalizer)
    return (ActionOnly if policy.actor.state_shape is None else ActionAndState)(graph).eval()


def write_agent(
    source: Policy | RunRef | str,
    path: Path | str,
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    checkpoint: str | int | None = None,
    on_target: Any = None,
) -> Exported:
    """Write the acting policy of `source` (a loaded `Policy`, or the checkpoint a reference names,
    as `rlrun enjoy` chooses it) to `path` as a frozen TorchScript module, atomically, and its
    contract beside it (`rlrun.enjoy.contract`). Reads the registry, never writes it."""
    path = Path(path)
    check_destination(path, (".pt", ".pth"), "--torchscript")
    from rlrun.fsutil import atomic_write

    policy = policy_of(source, filters, home=home, checkpoint=checkpoint, on_target=on_target)
    module = agent_module(policy)
    frozen = _frozen(module, policy)
    target = policy.target
    metadata = {
        "run_id": target.run.id,
        "session": target.session.index,
        "checkpoint_frame": target.checkpoint.frame,
        "checkpoint_sha256": target.checkpoint.sha256,
        "env_id": policy.spec.env.id,
        "state_shape": None if policy.actor.state_shape is None else list(policy.actor.state_shape),
    }
    buffer = io.BytesIO()
    torch.jit.save(frozen, buffer, _extra_files={METADATA: json.dumps(metadata, sort_keys=True)})
    data = buffer.getvalue()
    atomic_write(path, data)
    outputs = ["action"] if policy.actor.state_shape is None else ["action", "next_state"]
    done = exported(path, policy, outputs, len(data))
    write_contract(done, policy, kind="torchscript", home=home)
    return done


def read_metadata(path: Path | str) -> dict[str, Any]:
    """The checkpoint an `agent.pt` names (its `rlrun.json`)."""
    extra = {METADATA: ""}
    torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    found: dict[str, Any] = json.loads(extra[METADATA])
    return found


def _frozen(module: nn.Module, policy: Policy) -> Any:
    """`module` traced on a batch of two and frozen, when the trace acts on batches of one and
    three as the module does; else (a network that reads the batch size as a number: the tracer
    records it as a constant) traced on one observation and run row by row by a scripted loop."""
    whole = torch.jit.freeze(_traced(module, example_inputs(policy, 2)))
    if _batch_free(whole, module, policy):
        return whole
    one = _traced(module, example_inputs(policy, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's own: TorchScript is what a leaderboard loads
        loop = torch.jit.script(RowByRow(one) if policy.actor.state_shape is None else RowByRowWithState(one))
    return torch.jit.freeze(loop.eval())


def _traced(module: nn.Module, example: tuple[torch.Tensor, torch.Tensor | None]) -> Any:
    inputs = tuple(tensor for tensor in example if tensor is not None)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the tracer's warnings on Python values it records
            return torch.jit.trace(module, inputs, check_trace=False)
    except Exception as error:  # the tracer's many kinds: its message, in one line
        raise BadInput(
            f"torch.jit.trace cannot capture this policy's network ({type(error).__name__}:"
            f" {str(error).splitlines()[0] if str(error) else ''})"
        ) from None


def _batch_free(traced: Any, module: nn.Module, policy: Policy) -> bool:
    """Whether `traced` gives `module`'s shapes and dtypes on batches of one and three."""
    for batch in (1, 3):
        inputs = tuple(tensor for tensor in example_inputs(policy, batch) if tensor is not None)
        with torch.no_grad():
            try:
                given = traced(*inputs)
            except RuntimeError:  # a shape the trace fixed
                return False
            if not _same(given, module(*inputs)):
                return False
    return True


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a.shape == b.shape and a.dtype == b.dtype)


class RowByRow(nn.Module):
    """A module traced on one observation, run on each row of a batch (TorchScript's loop)."""

    def __init__(self, one: nn.Module) -> None:
        super().__init__()
        self.one = one

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        rows = [self.one(observation[i : i + 1]) for i in range(observation.shape[0])]
        return torch.cat(rows)


class RowByRowWithState(nn.Module):
    """`RowByRow` with a memory: each row's state is its own column of the batch's (parts, batch, size)."""

    def __init__(self, one: nn.Module) -> None:
        super().__init__()
        self.one = one

    def forward(self, observation: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        actions: list[torch.Tensor] = []
        states: list[torch.Tensor] = []
        for i in range(observation.shape[0]):
            action, after = self.one(observation[i : i + 1], state[:, i : i + 1])
            actions.append(action)
            states.append(after)
        return torch.cat(actions), torch.cat(states, dim=1)
