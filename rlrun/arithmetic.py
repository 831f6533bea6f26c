"""The revisions of rlrun's learning arithmetic (`meta.arithmetic`): what each one changes, as named
flags the layers and kernels read (`Arithmetic`, one row of `REVISIONS` each), the one new runs take,
and the one a spec recorded before the setting existed trained with. Light (no pydantic, no torch),
so `rlrun show` can print a recorded spec with its revision made explicit. The table of
docs/explanation/arithmetic-revisions.md is this one (tests/unit/test_arithmetic_revisions.py holds
it to that)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Arithmetic:
    """What a revision of the learning arithmetic computes, flag by flag: each flag is one faster way
    of computing an update that rounds differently from the way before it. Code asks for a flag,
    never for a revision number."""

    revision: int
    changes: str
    """What it changes against the revision before (the documentation's table row)."""
    sac_flushes_subnormals: bool = False
    """SAC learns with subnormal floats flushed to zero (DQN always has): Adam's moments of a dead
    ReLU unit decay through the subnormal range, where x86 cores take a slow path for each number;
    a moment of 1e-40 becomes 0 (`optim.flushing_subnormals`)."""
    narrow_products_wide_first: bool = False
    """SAC's kernel forms its products with a narrow side (a first layer's few inputs, a last
    layer's few outputs) the other way round, wide side first, where the math library is several
    times faster (`HandMLP(narrow=True)`)."""
    bf16_wide_products: bool = False
    """SAC's kernel forms the products of its layers wide on both sides (more than 8 inputs and
    outputs) with bfloat16 operands summed in float32 (oneDNN's bf16 precision for float32 products,
    on a CPU with AVX-512; float32 elsewhere: `HandMLP(bf16=True)`)."""
    cnn_scaling_in_weights: bool = False
    """A `nature_cnn` network folds the frames' 1/255 into its first convolution's weights
    (`ScalingConv2d`: no scaling pass over each minibatch's floats)."""
    cnn_acts_transposed: bool = False
    """A `nature_cnn` network acts through transposed copies of its dense weights (`TransposedWeights`)."""
    sac_sde_learns_features: bool = False
    """SAC with gSDE trains its actor's hidden features through the noise, as Stable-Baselines3's SAC
    does (`learn_features=True`): the latent features that scale the exploration matrix, and the
    variance of the action's Gaussian, are not detached from the actor's loss (`SdeActor`)."""

    def kernel_is_autograd(self, algorithm: str) -> bool:
        """Whether `algorithm`'s kernels (`rlrun.algorithms.kernels`) compute autograd's bits under
        this revision, so that `meta.kernels` changes nothing: every one does but SAC's once its
        products round another way (`narrow_products_wide_first`, `bf16_wide_products`)."""
        return algorithm != "sac" or not (self.narrow_products_wide_first or self.bf16_wide_products)


_ONE = Arithmetic(1, "the arithmetic of every run recorded before the setting existed")
_TWO = Arithmetic(
    2,
    "SAC learns with subnormal floats flushed to zero, as DQN always has, and forms its products with a"
    " narrow side wide side first; a `nature_cnn` network folds the frames' 1/255 into its first"
    " convolution's weights and acts through transposed copies of its dense weights",
    sac_flushes_subnormals=True,
    narrow_products_wide_first=True,
    cnn_scaling_in_weights=True,
    cnn_acts_transposed=True,
)
_THREE = replace(
    _TWO,
    revision=3,
    changes="SAC's products of its layers wide on both sides (more than 8 inputs and outputs), forward and"
    " backward, take bfloat16 operands and sum in float32 (on a CPU with AVX-512; float32 products"
    " elsewhere)",
    bf16_wide_products=True,
)
_FOUR = replace(
    _THREE,
    revision=4,
    changes="SAC with gSDE trains its actor's hidden features through the noise (Stable-Baselines3's"
    " `learn_features=True` for SAC): the features that scale the exploration matrix, and the"
    " action's variance, are no longer detached from the actor's loss",
    sac_sde_learns_features=True,
)
REVISIONS: dict[int, Arithmetic] = {a.revision: a for a in (_ONE, _TWO, _THREE, _FOUR)}
"""Every revision this rlrun trains with, by number. A revision is kept while any run recorded
with it may be resumed; an old run moves to a newer one by a fork (`rlrun resume --fork --set
meta.arithmetic=N`)."""

ARITHMETIC = max(REVISIONS)
"""The newest revision of the learning arithmetic, which new runs use."""
NEWEST = REVISIONS[ARITHMETIC]
ARITHMETIC_BEFORE_RECORDED = 1
"""The revision of a spec recorded before `meta.arithmetic` existed."""


def as_recorded_document(document: dict[str, Any]) -> dict[str, Any]:
    """A recorded spec document with the arithmetic it trained with made explicit: a document
    recorded before the setting existed gets revision 1, whatever the default is now. The record
    itself is left as it was (a copy is returned when anything changes)."""
    meta = document.get("meta")
    if not isinstance(meta, dict) or "arithmetic" in meta:
        return document
    return {**document, "meta": {**meta, "arithmetic": ARITHMETIC_BEFORE_RECORDED}}


def introduced(number: int) -> list[str]:
    """The flags revision `number` sets that the revision before it did not, in the table's order."""
    now, before = REVISIONS[number], REVISIONS.get(number - 1)
    return [
        f.name
        for f in fields(Arithmetic)
        if f.type in ("bool", bool) and getattr(now, f.name) and not (before is not None and getattr(before, f.name))
    ]


def revision(number: int) -> Arithmetic:
    """The flags of revision `number` (KeyError for one this rlrun does not know; the spec refuses it)."""
    return REVISIONS[number]
