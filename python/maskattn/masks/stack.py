"""A batch of different masks, one per sample."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import MaskSpec
from .dense import DenseMask
from .intervals import IntervalMask


def stack(specs: Sequence[MaskSpec]) -> MaskSpec:
    """A batch of masks, one per sample (each of batch size 1, same head count and lengths)."""
    specs = list(specs)
    if not specs:
        raise ValueError("stack needs at least one spec")
    kinds = {type(s) for s in specs}
    shapes = {s.shape for s in specs}
    if len(shapes) != 1 or next(iter(shapes))[0] != 1:
        raise ValueError(f"stack needs specs of one shape with B=1; got {sorted(shapes)}")
    if kinds <= {IntervalMask}:
        perm = specs[0].perm
        if any(not np.array_equal(s.perm, perm) for s in specs):  # a plan has one token order for every sample
            raise ValueError("stack needs interval specs of one token order (perm); these have different ones")
        return IntervalMask(np.concatenate([s.intervals for s in specs]), specs[0].n_q, perm)
    if all(isinstance(s, DenseMask) for s in specs):
        return DenseMask(np.concatenate([np.asarray(s.mask) for s in specs]))
    raise TypeError(f"stack takes interval or dense specs of one kind; got {sorted(k.__name__ for k in kinds)}")
