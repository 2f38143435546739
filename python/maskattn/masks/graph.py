"""Graph adjacency as a mask (graph transformers): node i attends to node j iff ``adjacency[i, j]``, in a node
order chosen so the mask fills few tiles (:mod:`maskattn.masks.reorder`). Partial tiles carry bits.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._maskprep import plan as _maskprep
from .base import MaskSpec
from .reorder import node_order


class GraphMask(MaskSpec):
    """Graph adjacency as a mask: node i attends to node j iff ``adjacency[i, j]``.

    ``perm`` (or None) is the node order the plan is built in: attention gathers q, k, v rows in that order
    and scatters the results back, so callers see their own order.
    """

    def __init__(self, adjacency, perm=None):
        adj = sp.csr_array(adjacency, dtype=bool)
        n = adj.shape[0]
        if adj.shape != (n, n):
            raise ValueError(f"a graph adjacency must be square; got shape {adj.shape}")
        super().__init__((1, 1, n, n), perm)
        adj.sum_duplicates()
        adj.eliminate_zeros()
        self.adjacency = adj

    def to_dense(self):
        return self.adjacency.toarray()[None, None]

    def reordered(self):
        """The adjacency in plan order (rows and columns permuted by ``perm``)."""
        if self.perm is None:
            return self.adjacency
        # the CSC round trip (two O(nnz) counting sorts) leaves each row's columns sorted, which the plan compiler
        # needs: 3x faster than sort_indices() on the permuted rows (16k graph_rcm, 404k edges: 2.5 vs 7.6 ms)
        return self.adjacency[self.perm][:, self.perm].tocsc().tocsr()

    def _tiles(self, tile, threads):
        adj = self.reordered()
        adj.sort_indices()  # a no-op when sorted: checked by a flag
        n = self.shape[2]
        return _maskprep.csr_plan(adj.indptr, adj.indices, n, n, *tile, threads=threads)


def from_graph(adjacency, reorder: str | None = "auto") -> GraphMask:
    """A graph transformer's mask: node i attends to node j iff ``adjacency[i, j]`` (any scipy.sparse
    matrix or dense array; add self loops yourself if nodes should see themselves).

    Parameters
    ----------
    reorder : {"auto", "rcm", None}
        Node order the plan uses: None keeps the given order; "rcm" is Reverse Cuthill-McKee; "auto" picks,
        among its candidate orderings, the one that leaves the fewest active 128 x 128 tiles. Attention
        permutes q, k, v and un-permutes the results, so callers never see the order.
    """
    spec = GraphMask(adjacency)
    if reorder is None:
        return spec
    perm = node_order(spec.adjacency, reorder)
    if np.array_equal(perm, np.arange(perm.size)):  # the given order won: no gathers in attention
        return spec
    return GraphMask(spec.adjacency, perm)
