"""rlrun.train and rlrun.resume from a notebook leave the process as they found it: torch's optimiser
classes, its threads, grad mode, default dtype, float32 product precisions, deterministic switches and
generator, NumPy's and Python's generators, and the calling thread's subnormal mode. The caller's
settings do not reach the training either: a run trained inside `torch.no_grad()` with float64 the
default, bfloat16 products and subnormals flushed is bit for bit the run trained from torch's defaults.

SAC is the training: it learns inside the scopes that set process state (oneDNN's bfloat16
products, flushed subnormals), and a session sets the number of threads and seeds the generators."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from same_run import assert_same_training, final_state

from rlrun import load_spec, resume, train
from rlrun.session.device import flushing_now

WRAPPED = ("add_param_group", "state_dict", "load_state_dict", "zero_grad")
SETTINGS = [
    "meta.max_frame=300",
    "agent.learning_starts=100",
    "agent.batch_size=32",
    "agent.network.hidden=[32, 32]",
    "meta.eval_frequency=300",
    "meta.num_eval_episodes=1",
    "meta.checkpoint_frequency=300",
    "meta.log_frequency=100",
    "meta.seed=5",
    "meta.torch_threads=1",
]


def torch_state() -> dict[str, Any]:
    backends: Any = torch.backends
    return {
        "optimizer": {
            name: (
                getattr(torch.optim.Optimizer, name),
                getattr(getattr(torch.optim.Optimizer, name).__wrapped__, "__dynamo_disable", None),
            )
            for name in WRAPPED
        },
        "threads": torch.get_num_threads(),
        "grad": torch.is_grad_enabled(),
        "dtype": torch.get_default_dtype(),
        "precisions": [
            kind.fp32_precision
            for kind in (backends, backends.mkldnn, backends.mkldnn.matmul, backends.mkldnn.conv, backends.cuda.matmul)
        ],
        "deterministic": (
            torch.are_deterministic_algorithms_enabled(),
            backends.cudnn.deterministic,
            backends.cudnn.benchmark,
        ),
        "flushing": flushing_now(),
        "torch_rng": torch.get_rng_state().tolist(),
        "numpy_rng": np.random.get_state()[1].tolist(),
        "python_rng": random.getstate(),
    }


@contextmanager
def unusual_caller() -> Iterator[None]:
    """A caller that changed what a training might: threads, grad mode, dtype, products, subnormals."""
    backends: Any = torch.backends
    threads, supported = torch.get_num_threads(), torch.set_flush_denormal(True)
    torch.set_num_threads(2 if threads != 2 else 3)
    torch.set_default_dtype(torch.float64)
    backends.mkldnn.matmul.fp32_precision = "bf16"
    torch.manual_seed(11), np.random.seed(12), random.seed(13)
    try:
        with torch.no_grad():
            yield
    finally:
        backends.mkldnn.matmul.fp32_precision = "none"
        torch.set_default_dtype(torch.float32)
        torch.set_num_threads(threads)
        if supported:
            torch.set_flush_denormal(False)


def test_training_and_resuming_in_process_leave_torch_as_they_found_it(tmp_path: Path) -> None:
    import rlrun.algorithms.sac  # noqa: F401  # imported: the agent's modules set nothing at import

    plain = tmp_path / "plain"
    assert train(load_spec("sac_pendulum", SETTINGS), home=plain, handle_signals=False).status == "finished"
    with unusual_caller():
        before = torch_state()
        done = train(load_spec("sac_pendulum", SETTINGS), home=tmp_path / "unusual", handle_signals=False)
        assert torch_state() == before
        resumed = resume("latest", home=tmp_path / "unusual", frames=400, handle_signals=False)
        assert torch_state() == before
    assert (done.status, resumed.status) == ("finished", "finished")
    for name in WRAPPED:  # torch's own wrappers, not told that their function never compiles
        function = getattr(torch.optim.Optimizer, name).__wrapped__
        assert getattr(function, "__dynamo_disable", None) is not function
    # the caller's settings did not reach the training: the same bits as from torch's defaults
    assert resume("latest", home=plain, frames=400, handle_signals=False).status == "finished"
    assert_same_training(final_state(plain), final_state(tmp_path / "unusual"))
