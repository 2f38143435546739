"""Masks held densely: an arbitrary boolean array (NumPy, or CuPy / a CUDA tensor that stays on its GPU) and the
speculative-decoding trees built as one. Their partial tiles carry bits.
"""

from __future__ import annotations

import numpy as np

from .._arrays import ingest
from .._maskprep import plan as _maskprep
from .base import MaskSpec, _positive_int


class DenseMask(MaskSpec):
    """An arbitrary boolean mask held densely, ``(B or 1, H or 1, n_q, n_k)``: a NumPy array, or a CuPy array
    that stays on its GPU (its plan is classified there; only tile kinds and partial tiles reach the host)."""

    def __init__(self, mask):
        if mask.dtype != np.bool_:
            raise TypeError(f"a dense mask must be boolean; got dtype {mask.dtype}")
        if mask.ndim == 2:
            mask = mask[None, None]
        if mask.ndim != 4:
            raise ValueError(f"a dense mask must have shape (n_q, n_k) or (B, H, n_q, n_k); got {mask.shape}")
        super().__init__(mask.shape)
        self.mask = mask

    @property
    def on_device(self) -> bool:
        return not isinstance(self.mask, np.ndarray)

    def to_dense(self):
        return self.mask.get() if self.on_device else self.mask

    def _repeat_rows(self, factor):
        return DenseMask(self.mask.repeat(factor, axis=2))  # NumPy or CuPy alike

    def _tiles(self, tile, threads):
        if self.on_device:  # maskattn.compile_mask plans these on their GPU (maskattn.backends.cuda.plans)
            raise ValueError("this dense mask lives on a GPU: compile it with maskattn.compile_mask")
        B, H, n_q, n_k = self.shape
        return _maskprep.dense_plan(self.mask.reshape(B * H, n_q, n_k), *tile, threads=threads)


def from_dense(mask) -> DenseMask:
    """An arbitrary boolean mask, ``(n_q, n_k)`` or ``(B or 1, H or 1, n_q, n_k)``. True = attend.

    NumPy or CPU DLPack masks are compiled on the host; CuPy or CUDA DLPack masks (a torch CUDA tensor) stay
    on their GPU and are classified there, without copying the ``n_q x n_k`` mask to the host.
    """
    views, _, _ = ingest(mask=mask)
    return DenseMask(views["mask"])


class TreeMask(DenseMask):
    """A speculative-decoding tree over a KV prefix (see :func:`medusa_tree`).

    Attributes
    ----------
    choices : list of tuple
        The tree's paths, sorted as Medusa sorts them (by depth, then lexicographically); node k + 1 is
        ``choices[k]``, node 0 the root.
    position_ids : int64 (T,)
        Depth of each node (root 0): add ``prefix_len`` for the tokens' positions.
    retrieve_indices : int64 (leaves, depth + 1)
        Per leaf (leaves in lexicographic path order), the nodes from the root down to it, padded with -1.
    parents : int64 (T,)
        Each node's parent (-1 for the root).
    """


def medusa_tree(choices, prefix_len: int = 0) -> TreeMask:
    """Tree-verification mask of Medusa / EAGLE ``choices`` over a KV prefix.

    The T = len(choices) + 1 tree tokens (the root and one per path) are the queries; the keys are the
    ``prefix_len`` cached tokens followed by the tree tokens. Each node sees the whole prefix, its ancestors
    and itself.

    Examples
    --------
    >>> spec = medusa_tree([[0], [1], [0, 0]], prefix_len=2)
    >>> spec.to_dense()[0, 0].astype(int)
    array([[1, 1, 1, 0, 0, 0],
           [1, 1, 1, 1, 0, 0],
           [1, 1, 1, 0, 1, 0],
           [1, 1, 1, 1, 0, 1]])
    >>> spec.position_ids.tolist(), spec.retrieve_indices.tolist()
    ([0, 1, 1, 2], [[0, 1, 3], [0, 2, -1]])
    """
    prefix_len = _positive_int("prefix_len", prefix_len, 0)
    paths = []
    for i, c in enumerate(choices):
        path = tuple(int(x) for x in c)
        if not path or min(path) < 0:
            raise ValueError(f"choices[{i}] must be a non-empty path of non-negative ints; got {c!r}")
        paths.append(path)
    if len(set(paths)) != len(paths):
        raise ValueError("choices contains a path twice")
    paths.sort(key=lambda p: (len(p), p))
    node = {p: k + 1 for k, p in enumerate(paths)}
    t = len(paths) + 1
    parents = np.full(t, -1, np.int64)
    for p, k in node.items():
        if len(p) > 1 and p[:-1] not in node:
            raise ValueError(f"choices has {list(p)} but not its parent {list(p[:-1])}")
        parents[k] = node[p[:-1]] if len(p) > 1 else 0
    tree = np.eye(t, dtype=bool)
    tree[:, 0] = True
    for p, k in node.items():
        for d in range(1, len(p)):
            tree[k, node[p[:d]]] = True
    mask = np.concatenate([np.ones((t, prefix_len), bool), tree], axis=1)
    spec = TreeMask(mask)
    spec.choices = paths
    spec.position_ids = np.array([0] + [len(p) for p in paths], np.int64)
    # leaves in lexicographic path order, as Medusa orders its retrieve paths
    leaves = sorted(p for p in paths if not any(len(q) == len(p) + 1 and q[:-1] == p for q in paths))
    depth = max((len(p) for p in paths), default=0)
    retrieve = np.full((len(leaves), depth + 1), -1, np.int64)
    for row, p in enumerate(leaves):
        retrieve[row, 0] = 0
        for d in range(1, len(p) + 1):
            retrieve[row, d] = node[p[:d]]
    spec.retrieve_indices = retrieve
    spec.parents = parents
    return spec
