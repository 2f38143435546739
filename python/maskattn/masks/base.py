"""The base of every mask spec, and the argument checks the builders share.

A spec knows its shape ``(B, H, n_q, n_k)`` (B and H are 1 where the mask is shared across the batch or the
heads), expands itself to a dense boolean array (``to_dense()``, True = attend) and says how maskprep compiles it
into a plan's arrays (``_tiles``; ``maskattn.compile_mask`` wraps them into a :class:`maskattn.plan.BlockMask` and
caches the plan on the spec). A spec may hold ``perm``, the token order its plan is built in (a reordered graph, a
dilated Longformer): position p of the plan is the caller's token ``perm[p]``. Attention gathers and scatters rows
through it, and ``to_dense`` keeps the caller's order.

Queries and keys are aligned bottom-right when ``n_q != n_k`` (as FlashAttention 2.1+): query i sits at
key position ``i + s`` with ``s = n_k - n_q``.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np


def _positive_int(name, value, minimum=1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def _int_list(name, values, minimum=1, *, empty_ok=True) -> list[int]:
    if isinstance(values, numbers.Integral):
        values = [values]
    out = [_positive_int(f"{name}[{i}]", v, minimum) for i, v in enumerate(values)]
    if not out and not empty_ok:
        raise ValueError(f"{name} is empty; give at least one")
    return out


def _is_nested(values) -> bool:
    return isinstance(values, Sequence) and len(values) > 0 and not isinstance(values[0], numbers.Integral)


def _checked_perm(perm, n_q: int, n_k: int) -> np.ndarray | None:
    """A read-only int64 copy of ``perm`` (None stays None), which must be a permutation of range(n) of a square
    mask."""
    if perm is None:
        return None
    perm = np.array(perm, dtype=np.int64)
    if n_q != n_k or perm.shape != (n_q,) or not np.array_equal(np.sort(perm), np.arange(n_q)):
        raise ValueError(f"perm must be a permutation of range({n_q}) of a square mask; got {perm.shape} "
                         f"for a {n_q} x {n_k} mask")
    perm.setflags(write=False)
    return perm


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """``argsort(perm)`` of a permutation, by one scatter instead of a sort (a tenth of the time at 16k)."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.size)
    return inverse


def _host_array(x, name):
    """A NumPy view of a host array (NumPy, or a CPU DLPack / array-interface object); GPU arrays copy once."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] != 1:  # kDLCPU = 1
        if hasattr(x, "get"):  # CuPy
            return x.get()
        if hasattr(x, "cpu"):  # torch
            return x.cpu().numpy()
        raise TypeError(f"{name} lives on device {x.__dlpack_device__()}; pass a host array")
    if hasattr(x, "__dlpack__"):
        return np.from_dlpack(x)
    return np.asarray(x)


class MaskSpec:
    """Base of every mask spec. Subclasses set ``shape`` and implement ``to_dense`` and ``_tiles``."""

    shape: tuple[int, int, int, int]

    def __init__(self, shape, perm=None):
        B, H, n_q, n_k = (int(s) for s in shape)
        if min(B, H, n_q, n_k) < 1:
            raise ValueError(f"mask shape must be positive; got {tuple(shape)}")
        self.shape = (B, H, n_q, n_k)
        self.perm = _checked_perm(perm, n_q, n_k)
        self._plans = {}
        self._repeats = {}

    @property
    def n_q(self) -> int:
        return self.shape[2]

    @property
    def n_k(self) -> int:
        return self.shape[3]

    def to_dense(self) -> np.ndarray:
        """bool (B, H, n_q, n_k), True where a query attends to a key (in the caller's order)."""
        raise NotImplementedError

    def _caller_order(self, dense):
        """A dense mask in ``perm`` order, (..., n, n), taken back to the caller's order."""
        if self.perm is None:
            return dense
        order = inverse_permutation(self.perm)  # the caller's token i sits at position order[i]
        return dense[..., order, :][..., order]

    def _tiles(self, tile, threads):
        """The plan's arrays for ``tile``, compiled on the host by maskprep (a ``maskattn._maskprep.plan.PlanArrays``,
        which :class:`maskattn.plan.BlockMask` wraps); ``threads``: maskprep's workers."""
        raise NotImplementedError

    def repeat_rows(self, factor: int) -> "MaskSpec | None":
        """This mask with each query row repeated ``factor`` times (row i becomes rows ``i * factor`` to
        ``i * factor + factor - 1``): the rows of GQA packing, where one tile holds the ``factor`` query heads of a
        KV head token by token. Cached on the spec; None for kinds that do not repeat (graphs, functions) and for
        masks with a ``perm`` (the repeated rows would need an order of their own), which attention then runs
        unpacked."""
        factor = _positive_int("factor", factor)
        if factor == 1:
            return self
        if self.perm is not None:
            return None
        if factor not in self._repeats:
            self._repeats[factor] = self._repeat_rows(factor)
        return self._repeats[factor]

    def _repeat_rows(self, factor):
        return None

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape})"
