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
        raise BadInput(f"{shown}: this machine has {count} CUDA GPU{'s' if count > 1 else ''}"
                       f" (cuda:0 to cuda:{count - 1}); use one of them, cuda or auto")


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

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
            named = _NOT_DETERMINISTIC.match(str(message))
            if named is None:
                shown_before(message, category, filename, lineno, file, line)
            elif named.group(1) not in seen:
                seen.add(named.group(1))
                found(named.group(1))

        warnings.showwarning = show
        warnings.filterwarnings("default", message=_NOT_DETERMINISTIC.pattern.removeprefix("^"))  # never ignored
        yield
