"""Generators and yardsticks for tests and benchmarks: the graph families graph transformers attend over, plain
dense attention in float64, and a group of spawned ranks for the multi-process tests.

Every graph builder returns a symmetric ``scipy.sparse.csr_array`` of bool with sorted indices, self loops on the
diagonal (a graph transformer's node sees itself) and the nodes in a seeded random order, as datasets hand
them over: the order carries no locality, so any reordering has to find it. Not public API.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["random_geometric", "grid_mesh", "stochastic_block_model", "barabasi_albert", "molecules",
           "FAMILIES", "corpus", "dense_softmax_attention", "spawn_ranks"]


def _graph(rows, cols, n, rng) -> sp.csr_array:
    """Symmetric bool CSR of the edges (rows[e], cols[e]) plus self loops, nodes relabelled at random."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    label = rng.permutation(n)
    loops = np.arange(n)
    r = label[np.concatenate([rows, cols, loops])]
    c = label[np.concatenate([cols, rows, loops])]
    index = np.int32 if n < 2**31 else np.int64
    adj = sp.coo_array((np.ones(r.size, bool), (r.astype(index), c.astype(index))), shape=(n, n)).tocsr()
    adj.sum_duplicates()
    return adj


def random_geometric(n: int, dim: int = 2, degree: float = 24.0, seed: int = 0) -> sp.csr_array:
    """Points uniform in the unit square (dim=2) or cube (dim=3), joined when closer than the radius that
    gives ``degree`` neighbours on average away from the boundary."""
    from scipy.spatial import cKDTree

    if dim not in (2, 3):
        raise ValueError(f"dim is {dim}; expected 2 or 3")
    rng = np.random.default_rng(seed)
    ball = np.pi if dim == 2 else 4.0 * np.pi / 3.0
    radius = (degree / (ball * n)) ** (1.0 / dim)
    pairs = cKDTree(rng.random((n, dim))).query_pairs(radius, output_type="ndarray")
    return _graph(pairs[:, 0], pairs[:, 1], n, rng)


def grid_mesh(shape, seed: int = 0) -> sp.csr_array:
    """A 2-D or 3-D grid of ``shape`` points, each joined to its axis neighbours (5- or 7-point stencil)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise ValueError(f"shape is {shape}; expected 2 or 3 positive extents")
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    rows, cols = [], []
    for axis in range(len(shape)):
        lo = [slice(None)] * len(shape)
        hi = [slice(None)] * len(shape)
        lo[axis], hi[axis] = slice(None, -1), slice(1, None)
        rows.append(ids[tuple(lo)].ravel())
        cols.append(ids[tuple(hi)].ravel())
    return _graph(np.concatenate(rows), np.concatenate(cols), ids.size, np.random.default_rng(seed))


def stochastic_block_model(n: int, community: int = 200, degree_in: float = 12.0, degree_out: float = 1.0,
                           seed: int = 0) -> sp.csr_array:
    """Communities of about ``community`` nodes (sizes drawn between half and 1.5 times that); a node has
    ``degree_in`` neighbours in its community and ``degree_out`` outside it on average."""
    rng = np.random.default_rng(seed)
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(community // 2, community * 3 // 2 + 1)))
    sizes[-1] -= sum(sizes) - n
    starts = np.cumsum([0] + sizes[:-1])
    rows, cols = [], []
    for start, size in zip(starts, sizes):
        edges = rng.poisson(size * degree_in / 2)
        rows.append(start + rng.integers(0, size, edges))
        cols.append(start + rng.integers(0, size, edges))
    edges = rng.poisson(n * degree_out / 2)
    rows.append(rng.integers(0, n, edges))
    cols.append(rng.integers(0, n, edges))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    keep = rows != cols
    return _graph(rows[keep], cols[keep], n, rng)


def barabasi_albert(n: int, m: int = 3, seed: int = 0) -> sp.csr_array:
    """Preferential attachment: each new node joins ``m`` distinct earlier nodes drawn in proportion to
    their degree (power-law degrees, a few hubs)."""
    if not 1 <= m < n:
        raise ValueError(f"m is {m}; expected 1 <= m < n={n}")
    rng = np.random.default_rng(seed)
    ends = np.empty(2 * m * n, np.int64)  # every edge end seen so far: drawing from it is degree-weighted
    ends[:m] = np.arange(m)
    filled = m
    rows, cols = [], []
    for v in range(m, n):
        targets = set()
        while len(targets) < m:
            targets.add(int(ends[rng.integers(0, filled)]))
        t = np.fromiter(targets, np.int64, m)
        rows.append(np.full(m, v))
        cols.append(t)
        ends[filled:filled + m] = t
        ends[filled + m:filled + 2 * m] = v
        filled += 2 * m
    return _graph(np.concatenate(rows), np.concatenate(cols), n, rng)


def molecules(n: int, atoms=(10, 50), seed: int = 0) -> sp.csr_array:
    """A batch of molecule-like graphs (a disjoint union, as a batched graph-transformer input): each a random
    tree of valence at most 4 on ``atoms[0]..atoms[1]`` atoms, with one ring closure per 8 atoms making 5-
    and 6-rings. The last molecule is cut to make n nodes."""
    rng = np.random.default_rng(seed)
    rows, cols = [], []
    start = 0
    while start < n:
        size = min(int(rng.integers(atoms[0], atoms[1] + 1)), n - start)
        parent = np.full(size, -1)
        valence = np.zeros(size, np.int64)
        for a in range(1, size):
            free = np.flatnonzero(valence[:a] < 4)
            parent[a] = free[max(0, free.size - int(rng.geometric(0.5)))]  # mostly the newest: chains
            valence[parent[a]] += 1
            valence[a] += 1
        for a in rng.choice(size, size // 8, replace=False):
            b, steps = a, int(rng.integers(4, 6))  # 4 or 5 steps up the tree: a 5- or 6-ring
            for _ in range(steps):
                b = parent[b] if b > 0 else b
            if b != a and valence[a] < 4 and valence[b] < 4 and parent[a] != b:
                rows.append([start + a])
                cols.append([start + b])
                valence[a] += 1
                valence[b] += 1
        rows.append(start + np.arange(1, size))
        cols.append(start + parent[1:])
        start += size
    return _graph(np.concatenate(rows), np.concatenate(cols), n, rng)


FAMILIES = {
    "geometric_2d": lambda n, seed: random_geometric(n, 2, seed=seed),
    "geometric_3d": lambda n, seed: random_geometric(n, 3, seed=seed),
    "grid_2d": lambda n, seed: grid_mesh(_extents(n, 2), seed=seed),
    "grid_3d": lambda n, seed: grid_mesh(_extents(n, 3), seed=seed),
    "sbm": lambda n, seed: stochastic_block_model(n, seed=seed),
    "barabasi_albert": lambda n, seed: barabasi_albert(n, seed=seed),
    "molecules": lambda n, seed: molecules(n, seed=seed),
}
"""Each family as ``build(n, seed) -> adjacency`` with about n nodes (grids round n to their extents)."""


def _extents(n: int, dim: int) -> tuple[int, ...]:
    """Near-cubic extents with a product close to n, the last one stretched to make up the rest."""
    side = max(1, int(round(n ** (1.0 / dim))))
    return (side,) * (dim - 1) + (max(1, round(n / side ** (dim - 1))),)


def corpus(sizes=(1000, 5000, 20000), seed: int = 0):
    """Yield ``(family, n, adjacency)`` for every family of :data:`FAMILIES` at every size."""
    for family, build in FAMILIES.items():
        for n in sizes:
            yield family, n, build(n, seed)


def dense_softmax_attention(q, k, v, dense_mask, scale):
    """Plain float64 attention with a dense mask: the yardstick (O(n_q * n_k) memory; small inputs only)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    s = np.where(dense_mask, s, -np.inf)
    row_max = s.max(axis=-1, keepdims=True)
    seen = np.isfinite(row_max)
    p = np.exp(s - np.where(seen, row_max, 0.0))
    denom = p.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p / np.where(seen, denom, 1.0), v)


def spawn_ranks(worker, world: int, folder, seconds: float, *args) -> list:
    """Run ``worker(rank, world, init_file, folder, *args)`` in ``world`` spawned processes (``init_file``: a
    ``file://`` rendezvous in ``folder``) and return what each rank wrote to ``folder/rank{rank}.json``. A run past
    ``seconds`` (a hung collective) is stopped and raises TimeoutError, so a test fails instead of its CI job."""
    import json
    import pathlib
    import time

    import torch.multiprocessing as mp

    folder = pathlib.Path(folder)
    context = mp.start_processes(worker, args=(world, str(folder / "init"), str(folder), *args), nprocs=world,
                                 join=False, start_method="spawn")
    deadline = time.monotonic() + seconds
    try:
        while not context.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{world} ranks did not finish in {seconds} s (a hung collective?)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(world)]
