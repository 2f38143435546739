"""Masks given by a rule: a vectorised predicate (FlexAttention's ``mask_mod`` on NumPy index arrays), evaluated
only on the tiles its support marks, and BigBird's block pattern built on it. Their partial tiles carry bits.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .._maskprep import plan as _maskprep
from .base import MaskSpec, _positive_int


class FunctionMask(MaskSpec):
    """A mask given by a vectorised predicate ``mask_mod(q_idx, kv_idx) -> bool`` (as FlexAttention's
    ``mask_mod`` on NumPy index arrays), evaluated only on the tiles ``support(tile)`` marks.

    ``support(tile)`` returns a bool array (n_mblocks, n_nblocks) that must cover every true element; None
    means every tile (cost O(n_q * n_k) at compile time). ``cell = (rows, cols)`` says the predicate is constant
    on cells of that size (a block pattern): where the tile is a multiple of it, the predicate is evaluated once
    per cell over the whole grid (O(n_q * n_k / cell area)) and the tiles are classified from their cells.

    ``perm`` (square masks): the token order the plan is built in, as :class:`GraphMask`'s; ``mask_mod`` and
    ``support`` then speak of positions in that order (position p is the caller's token ``perm[p]``), while
    :meth:`to_dense` and attention keep the caller's order.
    """

    def __init__(self, mask_mod: Callable, n_q: int, n_k: int, support: Callable | None = None, cell=None,
                 perm=None):
        super().__init__((1, 1, _positive_int("n_q", n_q), _positive_int("n_k", n_k)), perm)
        self.mask_mod = mask_mod
        self.support = support
        self.cell = None if cell is None else (_positive_int("cell rows", cell[0]), _positive_int("cell cols", cell[1]))

    def _eval(self, rows, cols):
        out = np.asarray(self.mask_mod(rows[:, None], cols[None, :]))
        if out.dtype != np.bool_ or out.shape != (rows.size, cols.size):
            raise TypeError(f"mask_mod must return a bool array of shape {(rows.size, cols.size)}; "
                            f"got {out.dtype} {out.shape}")
        return out

    def to_dense(self):
        return self._caller_order(self._eval(np.arange(self.n_q), np.arange(self.n_k)))[None, None]

    def _tiles(self, tile, threads):
        tile_m, tile_n = tile
        rows_b, cols_b = -(-self.n_q // tile_m), -(-self.n_k // tile_n)
        support = np.ones((rows_b, cols_b), bool) if self.support is None else np.asarray(self.support(tile))
        if support.shape != (rows_b, cols_b):
            raise ValueError(f"support returned shape {support.shape}; expected {(rows_b, cols_b)}")
        on_cells = self.cell is not None and tile_m % self.cell[0] == 0 and tile_n % self.cell[1] == 0
        raw = self._cell_tiles(tile, support) if on_cells else self._element_tiles(tile, support)
        return _maskprep.finish_bits(raw, self.n_q, self.n_k, tile_m, tile_n)

    def _element_tiles(self, tile, support):
        """The forward tiles, the predicate evaluated per element on each query-block strip's supported tiles."""
        tile_m, tile_n = tile
        n_q, n_k = self.n_q, self.n_k
        row_ptr, col_idx, kind, payload, bits = [0], [], [], [], []
        partial = 0
        for m in range(support.shape[0]):
            blocks = np.flatnonzero(support[m])
            if blocks.size == 0:
                row_ptr.append(row_ptr[-1])
                continue
            cols = (blocks[:, None] * tile_n + np.arange(tile_n)).ravel()
            cols = cols[cols < n_k]
            rows = np.arange(m * tile_m, min(n_q, (m + 1) * tile_m))
            piece = _maskprep.dense_tiles(self._eval(rows, cols)[None], tile_m, tile_n)
            col_idx.append(blocks[piece["col_idx"]])
            kind.append(piece["kind"])
            payload.append(np.where(piece["payload"] >= 0, piece["payload"] + partial, -1))
            bits.append(piece["bits"])
            partial += piece["bits"].shape[0]
            row_ptr.append(row_ptr[-1] + piece["col_idx"].size)
        words = tile_m * tile_n // 32
        return {
            "row_ptr": np.asarray(row_ptr, np.int64)[None],
            "col_idx": np.concatenate(col_idx) if col_idx else np.empty(0, np.int32),
            "kind": np.concatenate(kind) if kind else np.empty(0, np.uint8),
            "payload": np.concatenate(payload) if payload else np.empty(0, np.int32),
            "bits": np.concatenate(bits) if bits else np.empty((0, words), np.uint32),
        }

    def _cell_tiles(self, tile, support):
        """The forward tiles where the tile is a multiple of the cell: the predicate once per cell of the whole
        grid, each tile classified from its cells (FULL: every cell holding a valid element is true), one bit tile
        per distinct (cells, valid rows, valid columns) of the PARTIAL tiles."""
        (tile_m, tile_n), (cm, cn) = tile, self.cell
        n_q, n_k = self.n_q, self.n_k
        rows_b, cols_b = support.shape
        per_m, per_n = tile_m // cm, tile_n // cn
        first_row, first_col = np.arange(rows_b * per_m) * cm, np.arange(cols_b * per_n) * cn
        in_rows, in_cols = first_row < n_q, first_col < n_k
        cells = np.zeros((first_row.size, first_col.size), bool)  # cells past the edges hold no element: false
        cells[np.ix_(in_rows, in_cols)] = self._eval(first_row[in_rows], first_col[in_cols])
        cells &= np.repeat(np.repeat(support, per_m, axis=0), per_n, axis=1)

        def per_tile(reduce, x):  # (rows_b * per_m, cols_b * per_n) cells -> (rows_b, cols_b), two passes
            return reduce(reduce(x.reshape(rows_b, per_m, -1), axis=1).reshape(rows_b, cols_b, per_n), axis=2)

        listed = per_tile(np.logical_or.reduce, cells)
        m_idx, n_idx = np.nonzero(listed)  # row-major: key blocks ascending in each query block
        full = per_tile(np.logical_and.reduce, cells | ~(in_rows[:, None] & in_cols[None, :]))[m_idx, n_idx]
        pm, pn = m_idx[~full], n_idx[~full]
        valid_rows = np.minimum(tile_m, n_q - pm * tile_m).astype(np.int32)
        valid_cols = np.minimum(tile_n, n_k - pn * tile_n).astype(np.int32)
        by_tile = cells.reshape(rows_b, per_m, cols_b, per_n).swapaxes(1, 2)  # (rows_b, cols_b, per_m, per_n)
        keys = np.concatenate([np.packbits(by_tile[pm, pn].reshape(pm.size, per_m * per_n), axis=1),
                               valid_rows[:, None].view(np.uint8), valid_cols[:, None].view(np.uint8)], axis=1)
        # one bytes value per key (np.unique over rows, axis=0, is ten times slower)
        _, first, which = np.unique(keys.view(f"V{keys.shape[1]}").ravel(), return_index=True, return_inverse=True)
        elements = np.repeat(np.repeat(by_tile[pm[first], pn[first]], cm, axis=1), cn, axis=2)
        elements &= np.arange(tile_m)[None, :, None] < valid_rows[first, None, None]
        elements &= np.arange(tile_n)[None, None, :] < valid_cols[first, None, None]
        payload = np.full(m_idx.size, -1, np.int32)
        payload[~full] = which.ravel()
        bits = np.packbits(elements.reshape(first.size, tile_m * tile_n), axis=1, bitorder="little")
        return {
            "row_ptr": np.concatenate([[0], np.cumsum(listed.sum(axis=1))]).astype(np.int64)[None],
            "col_idx": n_idx.astype(np.int32),
            "kind": np.where(full, 1, 2).astype(np.uint8),  # FULL, PARTIAL
            "payload": payload,
            "bits": bits.view(np.uint32),  # element (r, c) at bit r * tile_n + c, as dense_tiles writes them
        }


def coarse_support(table, cell, n_q: int, n_k: int):
    """``support`` for a :class:`FunctionMask` that can be true only inside the true cells of a coarse grid
    ``table`` of ``cell = (rows, cols)``-sized cells (a block pattern, another library's block mask)."""
    # 0/1 matrices multiplied in float32 (BLAS; integer matmul has none): each entry counts the true cells a tile
    # meets, at most the cells of one tile, exact in float32 below 2**24
    table = np.asarray(table, bool).astype(np.float32)

    def meets(t, size, n, cells):
        first = np.arange(-(-n // t)) * t
        last = np.minimum(first + t, n) - 1
        c = np.arange(cells)
        return ((first[:, None] // size <= c) & (c <= last[:, None] // size)).astype(np.float32)

    def support(tile):
        rows = meets(tile[0], cell[0], n_q, table.shape[0])
        cols = meets(tile[1], cell[1], n_k, table.shape[1])
        return (rows @ table @ cols.T) > 0

    return support


def from_function(mask_mod: Callable, n_q: int, n_k: int | None = None, *, support=None) -> FunctionMask:
    """A mask from a vectorised predicate over NumPy index arrays, ``mask_mod(q_idx, kv_idx) -> bool``
    (FlexAttention's ``mask_mod`` without batch and head). See :class:`FunctionMask` for ``support``."""
    return FunctionMask(mask_mod, n_q, n_q if n_k is None else n_k, support)


def bigbird(n: int, block: int, window_blocks: int = 3, global_blocks: int = 2, random_blocks: int = 3,
            seed: int = 0) -> FunctionMask:
    """BigBird's block pattern on ``block``-token blocks: each block row sees ``window_blocks`` blocks around
    its diagonal, the first ``global_blocks`` block rows and columns are global, and each block row sees
    ``random_blocks`` other blocks drawn (seeded) from those it does not see yet."""
    n = _positive_int("n", n)
    block = _positive_int("block", block)
    nb = -(-n // block)
    w = _positive_int("window_blocks", window_blocks, 0)
    g = min(_positive_int("global_blocks", global_blocks, 0), nb)
    r = _positive_int("random_blocks", random_blocks, 0)
    bi = np.arange(nb)
    table = np.abs(bi[:, None] - bi[None, :]) <= w // 2
    table[:g] = True
    table[:, :g] = True
    rng = np.random.default_rng(seed)
    for row in range(g, nb):
        free = np.flatnonzero(~table[row])
        table[row, rng.choice(free, size=min(r, free.size), replace=False)] = True

    def mask_mod(i, j):
        return table[i // block, j // block]

    support = coarse_support(table, (block, block), n, n)
    spec = FunctionMask(mask_mod, n, n, support, cell=(block, block))
    spec.block_table = table
    return spec
