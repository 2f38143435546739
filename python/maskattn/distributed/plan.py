"""Sharded plans: which tokens each rank owns, which key blocks it must fetch from which rank, and the block plans
it runs over the key blocks it holds. NumPy only, on the global :class:`~maskattn.plan.BlockMask`: every rank
computes the same sharding from the same mask, with no communication.

Everything here speaks of plan positions (the plan's token order: the caller's order, or ``plan.perm``'s for
reordered graphs and dilated Longformer). Tokens are owned in *units* of ``lcm(tile_m, tile_n)`` positions, so that
a rank's rows are whole query blocks and its keys whole key blocks of the global plan; the last unit may be short.
A rank's query blocks and key blocks are then the same tokens, and the plans it runs are the global plan's tiles
restricted to its rows and to key blocks packed side by side (:func:`restrict`), built from the global plan's
CSR without looking at a mask element.
"""

from __future__ import annotations

import math

import numpy as np

from .._maskprep.plan import PlanArrays
from ..plan import FULL, PARTIAL, BlockMask

# Relative cost of one listed tile, forward plus backward (the backward's five matrix products against the
# forward's two); a PARTIAL tile also masks its scores, once forward and in both backward passes (dK/dV and dQ).
# Estimates for the split, to be fitted on GPU timings.
FWD_COST = {FULL: 1.0, PARTIAL: 1.15}
BWD_COST = {FULL: 2.5, PARTIAL: 2.8}
SPLITS = ("work", "even", "zigzag")


def block_work(plan: BlockMask) -> np.ndarray:
    """float64 (n_mblocks,): the cost of each query block's tiles, forward and backward, summed over mask groups;
    a tile cut by the mask's edge counts by its area."""
    cost = np.zeros(3)
    for kind in (FULL, PARTIAL):
        cost[kind] = FWD_COST[kind] + BWD_COST[kind]
    (tile_m, tile_n), (n_q, n_k) = plan.tile, plan.shape[2:]
    area = _block_sizes(plan.entry_rows, tile_m, n_q) * _block_sizes(plan.col_idx.astype(np.int64), tile_n, n_k)
    return np.bincount(plan.entry_rows, weights=area / (tile_m * tile_n) * cost[plan.kind], minlength=plan.n_mblocks)


def _feasible_cuts(prefix: np.ndarray, parts: int, bound: float) -> bool:
    """Whether units with these prefix sums split into ``parts`` contiguous parts of at most ``bound`` each."""
    start, used = 0, 0
    while start < prefix.size - 1:
        used += 1
        if used > parts:
            return False
        end = int(np.searchsorted(prefix, prefix[start] + bound, side="right")) - 1
        if end == start:  # one unit alone is heavier than bound
            return False
        start = end
    return True


def balanced_cuts(unit_work: np.ndarray, parts: int) -> np.ndarray:
    """int64 (parts + 1,): unit boundaries of a split into contiguous parts whose heaviest part is as light as
    possible (bisection on that bound, each step a greedy check), with every cut then moved as near as that bound
    allows to the even share of the work before it, so that ties do not leave the last parts idle."""
    units = unit_work.size
    prefix = np.concatenate([[0.0], np.cumsum(unit_work, dtype=np.float64)])
    total = prefix[-1]
    if total <= 0:
        return np.round(np.arange(parts + 1) * units / parts).astype(np.int64)
    lo, hi = max(total / parts, float(unit_work.max())), total
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _feasible_cuts(prefix, parts, mid) else (mid, hi)
    bound = hi * (1 + 1e-12)
    # earliest[k]: the first unit the last parts - k parts can start at, each within bound (greedy from the right)
    earliest = np.zeros(parts + 1, np.int64)
    earliest[parts] = units
    for k in range(parts - 1, 0, -1):
        earliest[k] = int(np.searchsorted(prefix, prefix[earliest[k + 1]] - bound, side="left"))
    cuts = np.zeros(parts + 1, np.int64)
    cuts[parts] = units
    for k in range(1, parts):
        latest = int(np.searchsorted(prefix, prefix[cuts[k - 1]] + bound, side="right")) - 1
        target = int(np.argmin(np.abs(prefix - total * k / parts)))
        cuts[k] = min(max(target, earliest[k], cuts[k - 1]), max(latest, cuts[k - 1]))
    return cuts


def split_units(unit_work: np.ndarray, world_size: int, split) -> list[list[tuple[int, int]]]:
    """Per rank, its ascending ranges ``[lo, hi)`` of units.

    split : "work" (contiguous ranges by work, :func:`balanced_cuts`), "even" (contiguous ranges of equal units),
        "zigzag" (``2 * world_size`` equal chunks, rank r holding chunks r and ``2 * world_size - 1 - r``: the ring
        baseline's split for causal masks) or a sequence of ``world_size + 1`` unit boundaries.
    """
    units = unit_work.size
    if isinstance(split, str):
        if split == "work":
            cuts = balanced_cuts(unit_work, world_size)
        elif split == "even":
            cuts = np.round(np.arange(world_size + 1) * units / world_size).astype(np.int64)
        elif split == "zigzag":
            edges = np.round(np.arange(2 * world_size + 1) * units / (2 * world_size)).astype(np.int64)
            chunks = [(int(edges[i]), int(edges[i + 1])) for i in range(2 * world_size)]
            return [[c for c in (chunks[r], chunks[2 * world_size - 1 - r]) if c[0] < c[1]]
                    for r in range(world_size)]
        else:
            raise ValueError(f"split must be one of {SPLITS} or a sequence of {world_size + 1} boundaries; "
                             f"got {split!r}")
    else:
        cuts = np.asarray(split, dtype=np.int64)
        if cuts.shape != (world_size + 1,) or cuts[0] != 0 or cuts[-1] != units or np.any(np.diff(cuts) < 0):
            raise ValueError(f"split boundaries must rise from 0 to {units} units in {world_size + 1} steps; "
                             f"got {cuts.tolist()}")
    return [[(int(cuts[r]), int(cuts[r + 1]))] if cuts[r] < cuts[r + 1] else [] for r in range(world_size)]


def _block_sizes(blocks: np.ndarray, tile: int, n: int) -> np.ndarray:
    return np.minimum(tile, n - blocks * tile)


def _block_positions(blocks: np.ndarray, tile: int, n: int) -> np.ndarray:
    """int64: the positions of these blocks, block after block."""
    sizes = _block_sizes(blocks, tile, n)
    starts = np.repeat(blocks * tile - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    return starts + np.arange(int(sizes.sum()))


def _select(ptr, idx, majors, minor_of, groups):
    """The entries of a CSR direction (``ptr`` (G, blocks + 1) global offsets, ``idx`` the other axis's blocks) of
    the blocks ``majors``, in that order, whose other block is kept (``minor_of`` >= 0): their global entry numbers,
    their (group, major) segment and their renumbered minor blocks, segment by segment."""
    count = majors.size
    starts = ptr[:, majors].ravel()
    lengths = (ptr[:, majors + 1] - ptr[:, majors]).ravel()
    segment = np.repeat(np.arange(groups * count), lengths)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    entry = np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()))
    minor = minor_of[idx[entry]]
    kept = minor >= 0
    return entry[kept], segment[kept], minor[kept]


def _csr_ptr(segment, groups, count):
    """(G, count + 1) global offsets and per-segment counts of entries listed segment by segment."""
    counts = np.bincount(segment, minlength=groups * count)
    ptr = np.concatenate([[0], np.cumsum(counts)])[np.arange(groups)[:, None] * count + np.arange(count + 1)]
    return ptr, counts.reshape(groups, count)


def restrict(plan: BlockMask, row_blocks, key_blocks) -> BlockMask:
    """The plan of ``plan``'s query blocks ``row_blocks`` against its key blocks ``key_blocks`` packed side by side,
    both ascending: row ``i`` of the result is row ``i`` of those query blocks laid end to end, key block ``j`` is
    ``key_blocks[j]``. Tiles keep their kind and mask; tiles outside the key blocks are dropped.

    Built from the plan's two CSR directions in O(entries of these rows and keys + their columns and rows): entries
    are selected and renumbered (order kept, both maps being increasing), the heaviest-first orders derived from the
    counts, intervals re-based onto the kept rows (an interval of rows stays one over any subset of rows), bit tiles
    taken from the plan's pool. Plans with a node order are restricted in it; the result has none (its rows and keys
    are already in that order).
    """
    if not plan.on_host:
        plan.buffer  # a plan built on a GPU: its host arrays, read back once
    tile_m, tile_n = plan.tile
    n_q, n_k = plan.shape[2:]
    G, M, N = plan.groups, plan.n_mblocks, plan.n_nblocks
    rows = np.asarray(row_blocks, dtype=np.int64).reshape(-1)
    keys = np.asarray(key_blocks, dtype=np.int64).reshape(-1)
    for name, blocks, count in (("row_blocks", rows, M), ("key_blocks", keys, N)):
        if blocks.size and (blocks[0] < 0 or blocks[-1] >= count or np.any(np.diff(blocks) <= 0)):
            raise ValueError(f"{name} must be strictly ascending in [0, {count}); got {blocks.tolist()}")
    R, K = rows.size, keys.size
    row_of, key_of = np.full(M, -1, np.int64), np.full(N, -1, np.int64)
    row_of[rows], key_of[keys] = np.arange(R), np.arange(K)

    entry, segment, col = _select(plan.row_ptr, plan.col_idx, rows, key_of, G)
    row_ptr, row_counts = _csr_ptr(segment, G, R)
    bwd_entry, bwd_segment, row = _select(plan.col_ptr, plan.row_idx, keys, row_of, G)
    col_ptr, col_counts = _csr_ptr(bwd_segment, G, K)
    kind, bwd_kind = plan.kind[entry], plan.bwd_kind[bwd_entry]
    arrays = {"row_ptr": row_ptr, "col_idx": col, "kind": kind}
    partial, bwd_partial = kind == PARTIAL, bwd_kind == PARTIAL
    if "bit_pool" in plan.layout:
        used = np.unique(plan.payload_idx[entry[partial]])
        arrays["payload_idx"] = np.where(partial, np.searchsorted(used, plan.payload_idx[entry]), -1)
        bwd = {"col_ptr": col_ptr, "row_idx": row, "bwd_kind": bwd_kind,
               "bwd_payload_idx": np.where(bwd_partial, np.searchsorted(used, plan.bwd_payload_idx[bwd_entry]), -1),
               "bit_pool": plan.bit_pool[used]}
    else:
        bwd = {"col_ptr": col_ptr, "row_idx": row, "bwd_kind": bwd_kind}
    arrays.update(bwd)
    if plan.intervals is not None:
        kept = np.zeros(n_q, bool)
        kept[_block_positions(rows, tile_m, n_q)] = True
        # a global row bound x becomes the number of kept rows before it: start <= i < end holds for the same kept i
        before = np.concatenate([[0], np.cumsum(kept)]).astype(np.int32)
        intervals = before[np.clip(plan.intervals[:, _block_positions(keys, tile_n, n_k)], 0, n_q)]
        arrays["intervals"] = intervals
        arrays["interval_minmax"] = _block_minmax(intervals, _block_sizes(keys, tile_n, n_k))
    arrays["m_order"] = np.argsort(-row_counts, axis=1, kind="stable")
    arrays["n_order"] = np.argsort(-col_counts, axis=1, kind="stable")

    out = PlanArrays({name: a.shape for name, a in arrays.items()}, int(np.count_nonzero(partial)))
    for name, a in arrays.items():
        offset, shape, dtype = out.layout[name]
        np.ndarray(shape, dtype, out.buffer, offset)[...] = a
    n_rows = int(_block_sizes(rows, tile_m, n_q).sum())
    n_keys = int(_block_sizes(keys, tile_n, n_k).sum())
    return BlockMask((*plan.shape[:2], n_rows, n_keys), plan.tile, out)


def _block_minmax(intervals: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """int32 (G, blocks, 8): min and max of LTS, LTE, UTS, UTE over each block's columns (the kernels' skip test)."""
    G, K = intervals.shape[0], sizes.size
    out = np.zeros((G, K, 8), np.int32)
    if K:
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        out[..., 0::2] = np.minimum.reduceat(intervals, starts, axis=1)
        out[..., 1::2] = np.maximum.reduceat(intervals, starts, axis=1)
    return out


class ShardedPlan:
    """A mask split across ``world_size`` ranks for context parallelism, as rank ``rank`` sees it.

    Every rank builds the same object from the same mask (only ``rank`` differs): which plan positions each rank owns
    (its queries, keys and values), the key blocks each rank's rows reference, and from those the traffic of the
    all-to-all: rank s sends rank d exactly the key blocks s owns that d's rows reference.

    Attributes
    ----------
    plan : BlockMask
        The global plan (its ``perm`` says which caller token each position holds).
    world_size, rank : int
    split : str or tuple
        How the tokens were split (:func:`split_units`).
    unit : int
        Tokens are owned in units of this many positions, ``lcm(tile_m, tile_n)``.
    ranges : list of list of (int, int)
        Per rank, the ascending position ranges ``[start, end)`` it owns.
    work : float64 (world_size,)
        Per rank, the cost of its rows' tiles (:func:`block_work`).
    needs : bool (world_size, n_nblocks)
        Per rank, the key blocks its rows reference in any mask group.
    send_tokens : int64 (world_size, world_size)
        ``[s, d]``: positions (keys) rank s sends rank d; 0 on the diagonal.
    group :
        The process group the plan was made for (None: the default one), carried for the calls that use it.
    """

    def __init__(self, plan: BlockMask, world_size: int, rank: int, split="work", group=None):
        n_q, n_k = plan.shape[2:]
        if n_q != n_k:
            raise ValueError(f"context parallelism splits one sequence of queries and keys; the mask has n_q={n_q}, "
                             f"n_k={n_k}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must lie in [0, {world_size}); got {rank}")
        self.plan, self.world_size, self.rank, self.group = plan, int(world_size), int(rank), group
        tile_m, tile_n = plan.tile
        self.n = n_q
        self.unit = math.lcm(tile_m, tile_n)
        units = -(-self.n // self.unit)
        per_block = np.bincount(np.arange(plan.n_mblocks) * tile_m // self.unit, weights=block_work(plan),
                                minlength=units)
        self.split = split if isinstance(split, str) else tuple(int(c) for c in split)
        unit_ranges = split_units(per_block, self.world_size, split)
        self.ranges = [[(lo * self.unit, min(hi * self.unit, self.n)) for lo, hi in rs] for rs in unit_ranges]
        self.work = np.array([sum(per_block[lo:hi].sum() for lo, hi in rs) for rs in unit_ranges])

        owner = np.empty(units, np.int64)
        for r, rs in enumerate(unit_ranges):
            for lo, hi in rs:
                owner[lo:hi] = r
        self.row_owner = owner[np.arange(plan.n_mblocks) * tile_m // self.unit]
        self.key_owner = owner[np.arange(plan.n_nblocks) * tile_n // self.unit]
        self.needs = np.zeros((self.world_size, plan.n_nblocks), bool)
        self.needs[self.row_owner[plan.entry_rows], plan.col_idx] = True
        sizes = _block_sizes(np.arange(plan.n_nblocks), tile_n, self.n)
        remote = self.needs & (self.key_owner[None, :] != np.arange(self.world_size)[:, None])
        self.send_tokens = np.zeros((self.world_size, self.world_size), np.int64)
        for d in range(self.world_size):
            self.send_tokens[:, d] = np.bincount(self.key_owner[remote[d]], weights=sizes[remote[d]],
                                                 minlength=self.world_size).astype(np.int64)
        self._plans = {}  # _cached: restricted plans and the layout answers made from them, per rank

    # tokens -------------------------------------------------------------------------------------------------

    def positions(self, r: int | None = None) -> np.ndarray:
        """int64: the plan positions rank r (default: this rank) owns, ascending."""
        rs = self.ranges[self.rank if r is None else r]
        return np.concatenate([np.arange(lo, hi) for lo, hi in rs] or [np.zeros(0, np.int64)]).astype(np.int64)

    def local_tokens(self, r: int | None = None) -> np.ndarray:
        """int64: the caller's tokens rank r (default: this rank) holds, in the order it holds them (the plan's):
        what :func:`maskattn.distributed.dispatch` takes from a full sequence, and the positions to give RoPE."""
        p = self.positions(r)
        return p if self.plan.perm is None else np.asarray(self.plan.perm)[p]

    @property
    def token_counts(self) -> np.ndarray:
        """int64 (world_size,): tokens per rank."""
        return np.array([sum(hi - lo for lo, hi in rs) for rs in self.ranges], np.int64)

    def row_blocks(self, r: int | None = None) -> np.ndarray:
        return np.flatnonzero(self.row_owner == (self.rank if r is None else r))

    def owned_blocks(self, r: int | None = None) -> np.ndarray:
        return np.flatnonzero(self.key_owner == (self.rank if r is None else r))

    def remote_blocks(self, r: int | None = None) -> np.ndarray:
        """The key blocks rank r fetches: those its rows reference that other ranks own, ascending."""
        r = self.rank if r is None else r
        return np.flatnonzero(self.needs[r] & (self.key_owner != r))

    def arrival_blocks(self, r: int | None = None) -> np.ndarray:
        """:meth:`remote_blocks` in the order the all-to-all delivers them: by owner rank, ascending within each."""
        blocks = self.remote_blocks(r)
        return blocks[np.argsort(self.key_owner[blocks], kind="stable")]

    def remote_index(self, r: int | None = None) -> np.ndarray | None:
        """int64: the rows of the arrival buffer that give the fetched keys in ascending order (what
        :meth:`remote_plan` indexes), or None where they arrive so (contiguous splits: owners in rank order)."""
        arrived = _block_positions(self.arrival_blocks(r), self.plan.tile[1], self.n)
        index = np.argsort(arrived, kind="stable")
        return None if np.array_equal(index, np.arange(index.size)) else index

    def packed_index(self, r: int | None = None) -> np.ndarray:
        """int64: the rows of (arrival buffer, then the rank's own keys) that give the packed buffer, every key it
        holds in ascending order (what :meth:`packed_plan` indexes)."""
        held = np.concatenate([_block_positions(self.arrival_blocks(r), self.plan.tile[1], self.n), self.positions(r)])
        return np.argsort(held, kind="stable")

    def fetched_before(self, r: int | None = None) -> int | None:
        """Where the packed buffer is the arrival buffer's first ``f`` keys, the rank's own keys, then the arrival
        buffer's rest (a rank owning one range of a contiguous split: what its rows reference below it arrives
        first), ``f``; else None (:meth:`packed_index` gathers)."""
        r = self.rank if r is None else r

        def find():
            index = self.packed_index(r)
            own = self.positions(r).size
            fetched = index.size - own
            arrived = _block_positions(self.arrival_blocks(r), self.plan.tile[1], self.n)
            first = int(np.count_nonzero(arrived < (self.ranges[r][0][0] if self.ranges[r] else 0)))
            layout = np.concatenate([np.arange(first), fetched + np.arange(own), first + np.arange(fetched - first)])
            return first if np.array_equal(index, layout) else None

        return self._cached(("fetched_before", r), find)

    def sends_once(self, r: int | None = None) -> bool:
        """Whether no key of rank r goes to two ranks (then the gradients coming back add to distinct rows)."""
        r = self.rank if r is None else r

        def once():
            index = self.send_index(r)
            return np.unique(index).size == index.size

        return self._cached(("sends_once", r), once)

    def send_runs(self, r: int | None = None) -> np.ndarray:
        """int64 (runs, 3): :meth:`send_index` cut into maximal runs of consecutive positions, as (first row, first
        position, length): where the gradients coming back add as slices."""
        r = self.rank if r is None else r

        def runs():
            index = self.send_index(r)
            starts = np.flatnonzero(np.diff(index, prepend=-2) != 1)
            return np.stack([starts, index[starts], np.diff(starts, append=index.size)], axis=1).astype(np.int64)

        return self._cached(("send_runs", r), runs)

    def send_index(self, r: int | None = None) -> np.ndarray:
        """int64: rank r's local key positions to send, destination by destination (ascending ranks), each
        destination's blocks ascending: the rows of the all-to-all's input."""
        r = self.rank if r is None else r
        owned = self.positions(r)
        tile_n = self.plan.tile[1]
        parts = []
        for d in range(self.world_size):
            if d != r:
                blocks = np.flatnonzero(self.needs[d] & (self.key_owner == r))
                parts.append(np.searchsorted(owned, _block_positions(blocks, tile_n, self.n)))
        return np.concatenate(parts or [np.zeros(0, np.int64)]).astype(np.int64)

    # plans ------------------------------------------------------------------------------------------------------

    def _cached(self, key, make):
        """``make()``, made once per key (the restricted plans and the answers about them; every step asks)."""
        if key not in self._plans:
            self._plans[key] = make()
        return self._plans[key]

    def _restricted(self, name, r, key_blocks):
        """Rank r's rows against ``key_blocks(r)``, restricted once."""
        r = self.rank if r is None else r
        return self._cached((name, r), lambda: restrict(self.plan, self.row_blocks(r), key_blocks(r)))

    def local_plan(self, r: int | None = None) -> BlockMask:
        """Rank r's rows against the keys it owns, in its local order."""
        return self._restricted("local", r, self.owned_blocks)

    def remote_plan(self, r: int | None = None) -> BlockMask:
        """Rank r's rows against the key blocks it fetches, ascending (:meth:`remote_blocks`)."""
        return self._restricted("remote", r, self.remote_blocks)

    def packed_plan(self, r: int | None = None) -> BlockMask:
        """Rank r's rows against every key block it holds, its own and fetched ones, ascending."""
        return self._restricted("packed", r, lambda r: np.union1d(self.remote_blocks(r), self.owned_blocks(r)))

    def source_plan(self, source: int, r: int | None = None) -> BlockMask:
        """Rank r's rows against every key rank ``source`` owns, in its local order (a ring step)."""
        return self._restricted(("source", source), r, lambda r: self.owned_blocks(source))

    # accounting -------------------------------------------------------------------------------------------------

    def stats(self) -> dict:
        """Tokens, work and traffic per rank: ``sent_tokens[r]`` keys rank r sends (the K/V blocks other ranks'
        rows reference), ``fetched_tokens[r]`` keys it receives, ``imbalance`` the heaviest rank's work over the
        mean."""
        mean = self.work.mean()
        return {
            "tokens": self.token_counts.tolist(),
            "work": self.work.tolist(),
            "imbalance": float(self.work.max() / mean) if mean > 0 else 1.0,
            "sent_tokens": self.send_tokens.sum(axis=1).tolist(),
            "fetched_tokens": self.send_tokens.sum(axis=0).tolist(),
        }

    def __repr__(self):
        s = self.stats()
        return (f"ShardedPlan(n={self.n}, world_size={self.world_size}, rank={self.rank}, split={self.split!r}, "
                f"tokens={s['tokens']}, imbalance={s['imbalance']:.3f}, fetched={s['fetched_tokens']})")
