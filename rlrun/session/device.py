"""Where a session's networks learn (`meta.device`): checked before a run is recorded, resolved
once per session, and compared with where a snapshot was taken.

Only the networks, their optimisers and the batches they learn from go to the device. Replay
memory, rollouts and every random generator stay in host memory, so what is drawn never depends on
the device: a CUDA session samples the same batch indices and actions' noise as a CPU one.

On CUDA the deterministic switches are set (cuBLAS's fixed workspace before CUDA starts, torch's
deterministic algorithms, cuDNN without autotuning), so a resume on the same GPU model is exact
wherever torch has a deterministic kernel. torch runs an op without one anyway (`warn_only`) and
warns; `nondeterministic_ops` turns that warning into a call, and the session records in the
registry that its continuation cannot be exact and which op it was.

`check_device` imports torch only for a CUDA request, and nothing here is imported by
the registry-only commands.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from rlrun.errors import BadInput

if TYPE_CHECKING:
    import torch

CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's deterministic workspace setting; read when CUDA first creates a cuBLAS handle."""
_NOT_DETERMINISTIC = re.compile(r"^(.+?) does not have a deterministic implementation")


class Where(NamedTuple):
    """A device as a snapshot records it: its torch name and, for a GPU, its model."""

    device: str
    """"cpu" or "cuda:N"."""
    gpu: str | None
    """The GPU's model name (None on the CPU): kernels, and so results, differ between models."""

    def __str__(self) -> str:
        return self.device if self.gpu is None else f"{self.device} ({self.gpu})"


def check_device(requested: str) -> None:
    """BadInput, naming the problem and the fix, when this machine cannot give `requested`."""
    if not requested.startswith("cuda"):
        return  # "cpu" and "auto" always resolve
    _set_cuda_environment()
    import torch

    shown = f'meta.device = "{requested}"'
    if not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "torch sees no CUDA GPU here"
        raise BadInput(f"{shown}: {why}; run here with --set meta.device=cpu (or auto), or on a machine with a GPU")
    count = torch.cuda.device_count()
    index = _index(requested)
    if index is not None and index >= count:
        raise BadInput(
            f"{shown}: this machine has {count} CUDA GPU{'s' if count > 1 else ''}"
            f" (cuda:0 to cuda:{count - 1}); use one of them, cuda or auto"
        )


def resolve_device(requested: str) -> torch.device:
    """The torch device for `requested` ("auto": CUDA when torch sees a GPU, else the CPU), with
    the deterministic switches set when it is a GPU. Call once per session, before any CUDA work."""
    if requested != "cpu":
        _set_cuda_environment()
    import torch

    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    check_device(requested)
    device = torch.device(requested)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return device


def where(device: torch.device) -> Where:
    if device.type != "cuda":
        return Where(str(device), None)
    import torch

    return Where(str(device), torch.cuda.get_device_name(device))


def moved(saved: Where, now: Where) -> str | None:
    """Why a snapshot taken at `saved` cannot continue exactly at `now` (None when it can: the same
    kind of device and, for GPUs, the same model; which GPU index does not matter)."""
    if saved.device.split(":")[0] == now.device.split(":")[0] and saved.gpu == now.gpu:
        return None
    return f"snapshot taken on {saved}, resumed on {now}: their kernels round differently"


def _index(requested: str) -> int | None:
    _, _, index = requested.partition(":")
    return int(index) if index else None


def _set_cuda_environment() -> None:
    """cuBLAS reads its workspace setting once, when CUDA starts: set it first (a user's own value
    stays)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


@contextmanager
def nondeterministic_ops(found: Callable[[str], None]) -> Iterator[None]:
    """Within the block, `found(op)` is called the first time each op warns that it has no
    deterministic implementation (torch's warning under `use_deterministic_algorithms(True,
    warn_only=True)`); every other warning goes where it went before."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        shown_before = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: Any = None,
            line: str | None = None,
        ) -> None:
            named = _NOT_DETERMINISTIC.match(str(message))
            if named is None:
                shown_before(message, category, filename, lineno, file, line)
            elif named.group(1) not in seen:
                seen.add(named.group(1))
                found(named.group(1))

        warnings.showwarning = show
        warnings.filterwarnings("default", message=_NOT_DETERMINISTIC.pattern.removeprefix("^"))  # never ignored
        yield


def flushing_now() -> bool:
    """Whether this thread's CPU arithmetic flushes subnormal floats to zero (torch sets the mode,
    `torch.set_flush_denormal`, and has no call that reads it): a subnormal float32 times one is
    zero only then."""
    import torch

    return bool(torch.tensor(1e-39, dtype=torch.float32).mul(1.0).item() == 0.0)


@contextmanager
def torch_state_kept() -> Iterator[None]:
    """Training from a notebook leaves the process as it found it: what a session sets of torch's
    global state (the number of threads, CUDA's deterministic switches, the seeds of torch's, NumPy's
    and Python's global generators) and what its learning sets for a while (oneDNN's float32
    product precision, this thread's subnormal mode) is put back on the way out, with grad mode,
    the default dtype and torch's float32 matmul precision. Inside, training starts from torch's
    defaults, whatever the caller set (grad mode on, float32, IEEE float32 products on the CPU,
    subnormals kept), so a run's bits do not depend on its caller. Each setting is written back
    only when it changed (writing torch's precision settings moves others that derive from them)."""
    import random

    import numpy as np
    import torch

    backends: Any = torch.backends
    cpu_precisions = [backends, backends.mkldnn, backends.mkldnn.matmul, backends.mkldnn.conv, backends.mkldnn.rnn]
    precisions = [*cpu_precisions, backends.cuda.matmul, backends.cudnn, backends.cudnn.conv, backends.cudnn.rnn]
    settings: list[tuple[Callable[[], Any], Callable[[Any], Any]]] = [
        (torch.get_num_threads, torch.set_num_threads),
        (torch.is_grad_enabled, torch.set_grad_enabled),
        (torch.get_default_dtype, torch.set_default_dtype),
        # the float32 product precisions, torch.set_float32_matmul_precision's among them
        *(
            (lambda kind=kind: kind.fp32_precision, lambda value, kind=kind: setattr(kind, "fp32_precision", value))
            for kind in precisions
        ),
        (
            lambda: (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            lambda value: torch.use_deterministic_algorithms(value[0], warn_only=value[1]),
        ),
        (lambda: (backends.cudnn.deterministic, backends.cudnn.benchmark), lambda value: _set_cudnn(*value)),
        (flushing_now, torch.set_flush_denormal),
        (torch.get_rng_state, torch.set_rng_state),
        (np.random.get_state, np.random.set_state),
        (random.getstate, random.setstate),
    ]
    found = [read() for read, _ in settings]
    torch.set_grad_enabled(True)
    if torch.get_default_dtype() != torch.float32:
        torch.set_default_dtype(torch.float32)
    for kind in cpu_precisions:
        if kind.fp32_precision not in ("none", "ieee"):
            kind.fp32_precision = "none"
    if flushing_now():
        torch.set_flush_denormal(False)
    try:
        yield
    finally:
        for (read, write), value in zip(settings, found, strict=True):
            if not _same(read(), value):
                write(value)


def _set_cudnn(deterministic: bool, benchmark: bool) -> None:
    import torch

    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = deterministic, benchmark


def _same(a: Any, b: Any) -> bool:
    """Whether two readings of a setting are equal (generator states: tensors, arrays, tuples of them)."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, tuple | list):
        return isinstance(b, tuple | list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    return bool(a == b)
