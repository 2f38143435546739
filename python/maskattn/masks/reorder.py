"""Node orderings for graph masks: what ``masks.from_graph(adjacency, reorder=...)`` puts in ``GraphMask.perm``.

A graph mask costs what its active tiles cost. In the order a dataset hands its nodes over, a graph's edges
touch nearly every tile; after a Reverse Cuthill-McKee ordering (``maskprep.rcm``, maskattn's own) they
gather near the diagonal. ``"rcm"`` is plain RCM; ``"auto"`` keeps the given order or the block-aware RCM,
whichever leaves fewer active ``TILE`` x ``TILE`` tiles.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._maskprep import default_threads
from .._maskprep import rcm as _rcm

__all__ = ["TILE", "reverse_cuthill_mckee", "active_tiles", "node_order"]

TILE = 128
"""The tile that ``reorder="auto"`` counts, the kernels' default (128 x 128)."""


def _pattern(graph) -> sp.csr_array:
    """A square CSR pattern (bool, no stored zeros) of a scipy.sparse matrix of any format or a dense array,
    without touching the caller's arrays."""
    pattern = sp.csr_array(graph if sp.issparse(graph) else np.asarray(graph), dtype=bool)
    if pattern.ndim != 2 or pattern.shape[0] != pattern.shape[1]:
        raise ValueError(f"a graph adjacency must be square; got shape {pattern.shape}")
    if not pattern.data.all():
        pattern = pattern.copy()
        pattern.eliminate_zeros()
    return pattern


def reverse_cuthill_mckee(graph, *, symmetric: bool = False, tile: int | None = None,
                          threads: int | None = None) -> np.ndarray:
    """Reverse Cuthill-McKee order of a graph's nodes.

    Parameters
    ----------
    graph : scipy.sparse matrix or array (any format), or a dense square array
        Adjacency; every stored nonzero is an edge.
    symmetric : bool
        Declares the pattern symmetric (searched as given, unchecked). Otherwise a symmetric pattern is found
        to be one and searched as given, and any other is searched as A + A^T (a directed graph's edges count
        both ways).
    tile : int, optional
        None: plain RCM (per connected component, a George-Liu pseudo-peripheral start, breadth-first
        levels with neighbours by ascending degree, reversed). A tile size (at most 256): the block-aware
        order, judged by the active ``tile`` x ``tile`` tiles it leaves (``maskattn._maskprep.rcm`` says how).
    threads : int, optional
        Threads for the symmetry check and A + A^T (default: the machine's cores, at most 8).

    Returns
    -------
    perm : int64 array (n,)
        ``perm[i]`` is the node placed at position i: ``graph[perm][:, perm]`` is the reordered adjacency.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> path = sp.coo_array((np.ones(4), ([0, 3, 1, 4], [3, 1, 4, 2])), shape=(5, 5))  # 0-3-1-4-2, directed
    >>> reverse_cuthill_mckee(path)
    array([2, 4, 1, 3, 0])
    """
    pattern = _pattern(graph)
    return _rcm.reverse_cuthill_mckee(pattern.indptr, pattern.indices, symmetric=symmetric,
                                      tile=0 if tile is None else tile,
                                      threads=default_threads() if threads is None else threads)


def active_tiles(graph, perm=None, tile: int = TILE) -> int:
    """Active ``tile`` x ``tile`` tiles of the graph's mask with nodes in the order ``perm`` (None: as given),
    as ``compile_mask(...).stats()["active_blocks"]`` counts them, in O(nnz + n) without building a plan."""
    pattern = _pattern(graph)
    order = np.arange(pattern.shape[0]) if perm is None else perm
    return _rcm.active_tiles(pattern.indptr, pattern.indices, order, tile)


def node_order(adjacency, reorder) -> np.ndarray:
    """The node order ``from_graph`` keeps on its mask.

    Parameters
    ----------
    adjacency : scipy.sparse matrix or array
        The graph mask's pattern (directed edges allowed: orderings search A + A^T).
    reorder : {"auto", "rcm"}
        "rcm": plain RCM. "auto": of the given order and the block-aware RCM (whose candidates include
        plain RCM's order of each component larger than a tile), the one that leaves fewer active ``TILE`` x
        ``TILE`` tiles; a tie keeps the given order.

    Returns
    -------
    perm : int64 array (n,)
    """
    if reorder not in ("auto", "rcm"):
        raise ValueError(f"reorder must be 'auto', 'rcm' or None; got {reorder!r}")
    pattern = _pattern(adjacency)
    ptr, idx = pattern.indptr, pattern.indices
    if reorder == "rcm":
        return _rcm.reverse_cuthill_mckee(ptr, idx, threads=default_threads())
    given = np.arange(pattern.shape[0], dtype=np.int64)
    block = _rcm.reverse_cuthill_mckee(ptr, idx, tile=TILE, threads=default_threads())
    return block if _rcm.active_tiles(ptr, idx, block, TILE) < _rcm.active_tiles(ptr, idx, given, TILE) else given
