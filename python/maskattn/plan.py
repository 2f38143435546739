"""The block plan: which key blocks each query block visits, FULL or PARTIAL, and how PARTIAL tiles are masked.

A :class:`BlockMask` wraps the arrays a maskprep compiler wrote for a mask spec (``spec._tiles``, on the host) or
the CUDA backend's planner wrote for a dense mask on a GPU; ``maskattn.compile_mask`` makes and caches it. Kernels
and the reference backend consume nothing else. This layer knows the specs and maskprep, not the backends.
"""

from __future__ import annotations

import functools

import numpy as np

from ._maskprep.plan import PLAN_ARRAYS
from .masks.base import inverse_permutation

FULL, PARTIAL = 1, 2
DEFAULT_TILE = (128, 128)


def check_tile(tile) -> tuple[int, int]:
    try:
        tile_m, tile_n = map(int, tile)
    except (TypeError, ValueError):
        raise TypeError(f"tile must be a pair (tile_m, tile_n); got {tile!r}") from None
    for name, t in (("tile_m", tile_m), ("tile_n", tile_n)):
        if t < 16 or t > 256 or t % 16:
            raise ValueError(f"{name} is {t}; tiles must be multiples of 16 from 16 to 256")
    return tile_m, tile_n


class BlockMask:
    """A compiled mask: block lists in both directions plus the payload that masks PARTIAL tiles.

    Mask groups ``g = b * H + h`` cover the mask's batch ``B`` and heads ``H`` (each 1 when broadcast over
    the attention's batch or heads). Query block ``m`` holds rows ``[m * tile_m, (m + 1) * tile_m)``, key
    block ``n`` columns ``[n * tile_n, (n + 1) * tile_n)``; the last block of each may be short.

    Attributes
    ----------
    shape : (B, H, n_q, n_k)
    tile : (tile_m, tile_n)
    payload : {"none", "intervals", "bits"}
        How PARTIAL tiles are masked ("none": the plan has no PARTIAL tile).
    row_ptr : int64 (G, n_mblocks + 1)
        Forward CSR: entries of query block m of group g are ``row_ptr[g, m] : row_ptr[g, m + 1]`` (global
        offsets into the entry arrays), key blocks ascending.
    col_idx : int32 (nnz,)   key block of each forward entry
    kind : uint8 (nnz,)      FULL (1: no masking inside) or PARTIAL (2)
    payload_idx : int32 (nnz,) or None
        Bits plans: index of a PARTIAL entry's tile in ``bit_pool``, -1 for FULL entries.
    col_ptr, row_idx, bwd_kind, bwd_payload_idx :
        The backward CSR (the transpose): for key block n of group g, the query blocks that see it.
    bit_pool : uint32 (P, tile_m * tile_n / 32) or None
        Distinct PARTIAL tiles; element (r, c) of a tile is bit ``(r * tile_n + c) % 32`` of word
        ``(r * tile_n + c) // 32``. Bits outside the mask's extent are 0.
    intervals : int32 (G, n_k, 4) or None
        Interval plans: per column (LTS, LTE, UTS, UTE); row i of column j is masked iff
        ``LTS <= i < LTE or UTS <= i < UTE``.
    interval_minmax : int32 (G, n_nblocks, 8) or None
        min and max of LTS, LTE, UTS, UTE over each key block's columns.
    perm : int64 (n,) or None
        Plans in a token order of their own (reordered graphs, dilated Longformer): the plan is of the mask with rows
        and columns in this order (intervals too speak of positions in it).
    inverse_perm : int64 (n,) or None
        ``argsort(perm)``: taking rows of plan-order results at ``inverse_perm`` gives the caller's order.
    m_order : int32 (G, n_mblocks)
        Query blocks by descending number of entries, ties in ascending order (a stable sort): kernels start the
        heaviest rows first.
    n_order : int32 (G, n_nblocks)
        Key blocks likewise, by their backward entries.
    buffer : uint8 (read-only)
        The plan's memory: every array above but ``perm`` and ``inverse_perm`` is a view of it, at the place
        ``layout[name] = (offset, shape, dtype)`` says (16-byte aligned), so that a device copy is one transfer.
    on_host : bool
        Whether the arrays above exist on the host. A plan built on a GPU (:meth:`built_on_device`: a dense mask
        that lives there) starts without them; the first read of one copies the plan back (synchronising), so
        that every method here works on any plan.
    transient : bool
        Built for one call (``maskattn.torch.scaled_dot_product_attention`` plans its mask anew each call): the
        CUDA backend's caches of launches and prepared calls keep no reference to it.
    """

    transient = False

    def __init__(self, shape, tile, arrays, *, perm=None):
        """``arrays``: the :class:`maskattn._maskprep.plan.PlanArrays` a maskprep compiler wrote (for a tile it
        checked)."""
        self.shape = tuple(map(int, shape))
        self.tile = tuple(map(int, tile))
        self._set_arrays(arrays)
        self.perm = perm
        self.inverse_perm = None if perm is None else inverse_permutation(perm)
        if arrays.partial_count == 0:
            self.payload = "none"
        else:
            self.payload = "bits" if "bit_pool" in self.layout else "intervals"
        self._device_cache = {}

    @classmethod
    def built_on_device(cls, shape, tile, device_id: int, device_arrays, fetch, *, transient: bool = False):
        """A bits plan whose arrays a backend built on device ``device_id`` (``device_arrays``: what the backend's
        ``device_plan`` returns for it). ``fetch()`` returns the plan's host arrays (a ``PlanArrays``), called on
        the first read of one. Its payload is "bits" even where no tile is PARTIAL: how many are is known on the
        device only."""
        plan = cls.__new__(cls)
        plan.shape, plan.tile = tuple(map(int, shape)), tuple(map(int, tile))
        plan.perm = plan.inverse_perm = None
        plan.payload = "bits"
        plan.transient = bool(transient)
        plan._device_cache = {device_id: device_arrays}
        plan._fetch = fetch
        return plan

    def _set_arrays(self, arrays):
        # a plan never changes: its device copies mirror the buffer
        self.buffer, self.layout = arrays.buffer, arrays.layout
        self.buffer.setflags(write=False)

    @property
    def on_host(self) -> bool:
        return "buffer" in self.__dict__

    def __getattr__(self, name):
        # The arrays of PLAN_ARRAYS, made on first use: a view costs a few tenths of a microsecond, and uploading a
        # new plan needs none of them (its buffer travels whole). A plan built on a device fetches them first.
        if name not in PLAN_ARRAYS and name not in ("buffer", "layout"):
            raise AttributeError(f"'BlockMask' object has no attribute {name!r}")
        if not self.on_host:
            fetch = self.__dict__.get("_fetch")
            if fetch is None:  # not constructed yet (copy, pickle)
                raise AttributeError(f"'BlockMask' object has no attribute {name!r}")
            self._set_arrays(fetch())
            if name in ("buffer", "layout"):
                return self.__dict__[name]
        at = self.layout.get(name)
        view = None if at is None else np.ndarray(at[1], at[2], self.buffer, at[0])
        setattr(self, name, view)
        return view

    # geometry -------------------------------------------------------------------------------------------

    @property
    def groups(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def n_mblocks(self) -> int:
        return -(-self.shape[2] // self.tile[0])

    @property
    def n_nblocks(self) -> int:
        return -(-self.shape[3] // self.tile[1])

    @property
    def nnz(self) -> int:
        return int(self.col_idx.shape[0])

    def group(self, b: int, h: int) -> int:
        """The mask group used by batch b, query head h."""
        B, H = self.shape[:2]
        return (b if B > 1 else 0) * H + (h if H > 1 else 0)

    def _rows(self, m):
        r0 = m * self.tile[0]
        return r0, min(self.shape[2], r0 + self.tile[0])

    def _cols(self, n):
        c0 = n * self.tile[1]
        return c0, min(self.shape[3], c0 + self.tile[1])

    @functools.cached_property
    def entry_rows(self) -> np.ndarray:
        """int64 (nnz,): the query block of each forward entry (entries of group g:
        ``row_ptr[g, 0]:row_ptr[g, -1]``)."""
        per_row = np.diff(self.row_ptr, axis=1).ravel()
        return np.repeat(np.tile(np.arange(self.n_mblocks), self.groups), per_row)

    # tiles ----------------------------------------------------------------------------------------------

    def entry_mask(self, g: int, m: int, n: int, kind: int, payload: int) -> np.ndarray | None:
        """Mask of a listed tile (valid rows x valid columns), or None for a FULL tile."""
        if kind == FULL:
            return None
        (r0, r1), (c0, c1) = self._rows(m), self._cols(n)
        if self.intervals is not None:
            iv = self.intervals[g, c0:c1]
            rows = np.arange(r0, r1)[:, None]
            masked = ((iv[:, 0] <= rows) & (rows < iv[:, 1])) | ((iv[:, 2] <= rows) & (rows < iv[:, 3]))
            return ~masked
        tile_m, tile_n = self.tile
        words = self.bit_pool[payload]
        bits = np.unpackbits(words.view(np.uint8), bitorder="little").reshape(tile_m, tile_n)
        return bits[: r1 - r0, : c1 - c0].astype(bool)

    def tile_mask(self, g: int, m: int, n: int) -> np.ndarray:
        """The mask inside tile (m, n) of group g, bool (valid rows, valid columns)."""
        (r0, r1), (c0, c1) = self._rows(m), self._cols(n)
        lo, hi = self.row_ptr[g, m], self.row_ptr[g, m + 1]
        e = lo + np.searchsorted(self.col_idx[lo:hi], n)
        if e == hi or self.col_idx[e] != n:
            return np.zeros((r1 - r0, c1 - c0), bool)
        payload = -1 if self.payload_idx is None else self.payload_idx[e]
        inside = self.entry_mask(g, m, n, self.kind[e], payload)
        return np.ones((r1 - r0, c1 - c0), bool) if inside is None else inside

    def entries(self, g: int, m: int):
        """(key block, kind, payload index) of each entry of query block m of group g."""
        lo, hi = self.row_ptr[g, m], self.row_ptr[g, m + 1]
        payload = np.full(hi - lo, -1, np.int32) if self.payload_idx is None else self.payload_idx[lo:hi]
        return zip(self.col_idx[lo:hi].tolist(), self.kind[lo:hi].tolist(), payload.tolist())

    def to_dense(self) -> np.ndarray:
        """The mask this plan encodes, bool (B, H, n_q, n_k) (in ``perm`` order where the plan has one)."""
        dense = np.zeros(self.shape, bool)
        flat = dense.reshape(self.groups, *self.shape[2:])
        for g in range(self.groups):
            for m in range(self.n_mblocks):
                (r0, r1) = self._rows(m)
                for n, kind, payload in self.entries(g, m):
                    c0, c1 = self._cols(n)
                    inside = self.entry_mask(g, m, n, kind, payload)
                    flat[g, r0:r1, c0:c1] = True if inside is None else inside
        return dense

    def block_grid(self, g: int = 0) -> np.ndarray:
        """uint8 (n_mblocks, n_nblocks): 0 skipped, 1 FULL, 2 PARTIAL."""
        grid = np.zeros((self.n_mblocks, self.n_nblocks), np.uint8)
        lo, hi = self.row_ptr[g, 0], self.row_ptr[g, -1]
        grid[self.entry_rows[lo:hi], self.col_idx[lo:hi]] = self.kind[lo:hi]
        return grid

    # summaries ------------------------------------------------------------------------------------------

    def _tile_areas(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        tile_m, tile_n = self.tile
        h = np.minimum(tile_m, self.shape[2] - rows.astype(np.int64) * tile_m)
        w = np.minimum(tile_n, self.shape[3] - cols.astype(np.int64) * tile_n)
        return h * w

    def _true_elements(self) -> int:
        if self.intervals is not None:
            iv = self.intervals.astype(np.int64)
            lo = np.maximum(iv[..., 0], iv[..., 2])
            hi = np.minimum(iv[..., 1], iv[..., 3])
            masked = (iv[..., 1] - iv[..., 0]) + (iv[..., 3] - iv[..., 2]) - np.maximum(0, hi - lo)
            # broadcast groups of the intervals are the plan's groups
            return int((self.shape[2] - masked).sum())
        areas = self._tile_areas(self.entry_rows, self.col_idx)
        full = int(areas[self.kind == FULL].sum())
        partial = self.payload_idx[self.kind == PARTIAL]
        ones = np.unpackbits(self.bit_pool.view(np.uint8), axis=1).sum(axis=1) if partial.size else 0
        return full + int(np.sum(ones[partial])) if partial.size else full

    def stats(self, head_dim: int = 128) -> dict:
        """Block counts, density and the work the kernels do, summed over mask groups.

        ``computed_pairs`` counts the (query, key) pairs of every listed tile (what the kernels compute);
        ``fwd_flops`` is ``4 * head_dim * computed_pairs`` per (batch, head) of the mask's groups.
        """
        computed = int(self._tile_areas(self.entry_rows, self.col_idx).sum())
        total_elements = self.groups * self.shape[2] * self.shape[3]
        return {
            "active_blocks": self.nnz,
            "full_blocks": int(np.count_nonzero(self.kind == FULL)),
            "partial_blocks": int(np.count_nonzero(self.kind == PARTIAL)),
            "total_blocks": self.groups * self.n_mblocks * self.n_nblocks,
            "density": self._true_elements() / total_elements,
            "computed_pairs": computed,
            "fwd_flops": 4 * head_dim * computed,
            "bit_tiles": 0 if self.bit_pool is None else int(self.bit_pool.shape[0]),
        }

    def __repr__(self) -> str:
        s = self.stats()
        head = (f"BlockMask(shape={self.shape}, tile={self.tile}, payload={self.payload!r}, "
                f"active={s['active_blocks']}/{s['total_blocks']}, full={s['full_blocks']}, "
                f"partial={s['partial_blocks']}, density={s['density']:.4f})")
        if self.n_mblocks > 64 or self.n_nblocks > 64:
            return head
        lines = [head]
        for g in range(min(self.groups, 4)):
            if self.groups > 1:
                lines.append(f"group {g}:")
            grid = self.block_grid(g)
            lines.extend(" ".join(".FP"[k] for k in row) for row in grid)
        if self.groups > 4:
            lines.append(f"... {self.groups - 4} more groups")
        return "\n".join(lines)

    def equals(self, other: "BlockMask") -> bool:
        """Same shape, tile, token order (``perm``) and entries, and the same mask inside every PARTIAL tile."""
        if (self.shape, self.tile) != (other.shape, other.tile) or not np.array_equal(self.perm, other.perm):
            return False
        for name in ("row_ptr", "col_idx", "kind", "col_ptr", "row_idx", "bwd_kind"):
            if not np.array_equal(getattr(self, name), getattr(other, name)):
                return False
        if (self.intervals is None) != (other.intervals is None):
            return False
        if self.intervals is not None:
            return np.array_equal(self.intervals, other.intervals)
        partial = self.kind == PARTIAL
        return np.array_equal(self.bit_pool[self.payload_idx[partial]], other.bit_pool[other.payload_idx[partial]])
