"""Fixtures of the unit lane."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One thread, as a session learns: on a busy machine (the suite's workers outnumber its cores)
    torch's threads wait on each other for longer than small kernels take, 20 times a test's time.
    Asked for by the modules that train small networks in this process (`usefixtures`); torch is
    imported here only for them."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
