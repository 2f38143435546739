"""The exact CPU backend: blockwise attention forward and backward in NumPy, over a compiled block plan.

This module owns the reference arithmetic that the GPU kernels are tested against and that NumPy callers
run: flash attention's online softmax over the tiles a :class:`~maskattn.plan.BlockMask` lists, and the
matching backward. It never forms an ``n_q x n_k`` matrix: memory is O(n * tile) besides the inputs and
outputs. Validation, layouts and dtype rules belong to ``maskattn.api``; here inputs are already in logical
"bhnd" order (possibly strided views). As in the CUDA kernels, arrays stay in the caller's row order: a plan's
token order (``plan.perm``: a reordered graph, a dilated Longformer; bits or intervals alike) is followed here, by
taking rows into it and results back.

The Python loops run over mask groups, query blocks and their tiles; every tile is computed for all the
(batch, head) pairs that share its mask group at once (all heads when the mask has one head), with GQA
query heads broadcast against their KV head instead of repeating K and V.
"""

from __future__ import annotations

import numpy as np

from .._arrays import require_finite
from ..plan import BlockMask


def _views(plan: BlockMask, q: np.ndarray, k: np.ndarray):
    """Yield ``(g, sel)`` per mask group: ``sel`` indexes the group's (batch, KV head, head-in-KV-group) block
    of the 5-D views ``(B, Hk, H // Hk, n, D)`` of query-shaped arrays; ``sel[:2]`` does the same for the
    ``(B, Hk, 1, n, D)`` views of key-shaped arrays.

    Basic slices only, so every selection is a view that can be read and written in place.
    """
    B, H, n_q, _ = q.shape
    Hk, n_k = k.shape[1], k.shape[2]
    Bm, Hm = plan.shape[:2]
    if plan.shape[2:] != (n_q, n_k) or Bm not in (1, B) or Hm not in (1, H):
        raise ValueError(f"plan of shape {plan.shape} does not fit q {q.shape} and k {k.shape}")
    rep = H // Hk
    everything = slice(None)
    for b in range(Bm):
        batches = slice(b, b + 1) if Bm > 1 else everything
        for h in range(Hm):
            if Hm > 1:
                kv_head, r = divmod(h, rep)
                sel = (batches, slice(kv_head, kv_head + 1), slice(r, r + 1))
            else:
                sel = (batches, everything, everything)
            yield plan.group(b, h), sel


def _split_heads(x: np.ndarray, kv_heads: int) -> np.ndarray:
    """(B, H, ...) -> (B, Hk, H // Hk, ...); splitting one axis never copies, so outputs stay writable views."""
    return x.reshape(x.shape[0], kv_heads, x.shape[1] // kv_heads, *x.shape[2:])


def _tile_scores(plan: BlockMask, g: int, m: int, entry, q_tile: np.ndarray, k_group: np.ndarray,
                 scale: float):
    """Scaled scores ``scale * Q K^T`` of one listed tile, ``-inf`` where the mask hides an element.

    Parameters
    ----------
    plan : BlockMask
    g, m : int
        Mask group and query block.
    entry : (int, int, int)
        ``(n_block, kind, payload)`` as :meth:`BlockMask.entries` yields it.
    q_tile : (b, Hk, r, rows, D) array
        The query block's rows for every head of the group.
    k_group : (b, Hk, 1, n_k, D) array
    scale : float

    Returns
    -------
    scores : (b, Hk, r, rows, cols) array in the input dtype
    cols : slice
        The tile's key columns (``k_group[..., cols, :]``); the last block's slice runs past ``n_k`` and
        NumPy clips it, as the plan's short last block expects.
    """
    n_block, kind, payload = entry
    tile_n = plan.tile[1]
    cols = slice(n_block * tile_n, (n_block + 1) * tile_n)
    scores = q_tile @ k_group[..., cols, :].swapaxes(-1, -2)
    scores *= scale
    inside = plan.entry_mask(g, m, n_block, kind, payload)
    if inside is not None:
        scores[..., ~inside] = -np.inf
    return scores, cols


def _reorder(index, *xs):
    """The rows (axis 2) of each x taken in ``index`` order; the arrays themselves where index is None."""
    return xs if index is None else tuple(np.take(x, index, axis=2) for x in xs)


def forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, plan: BlockMask, scale: float, key_lens=None, *,
            check_finite: bool = False):
    """Exact masked attention, ``softmax(scale * Q K^T + mask) V``, tile by tile over ``plan``.

    Parameters
    ----------
    q : (B, H, n_q, D) float32 or float64 array
    k, v : (B, Hk, n_k, D) arrays of q's dtype, ``H % Hk == 0``
        Query head h reads KV head ``h // (H // Hk)``. Any strides.
    plan : BlockMask
        ``plan.shape == (1 or B, 1 or H, n_q, n_k)``; its forward CSR lists the tiles visited (in its node order
        ``plan.perm``, where it has one; the arrays stay in the caller's).
    scale : float
        Multiplies the scores before the softmax.
    key_lens : (B,) integer array, optional
        Per batch the number of keys to see: keys ``j >= key_lens[b]`` are masked besides the plan (plans without a
        node order).
    check_finite : bool
        Raise ValueError, naming the input, where q, k or v holds inf or NaN.

    Returns
    -------
    out : (B, H, n_q, D) array of q's dtype, C-contiguous
        Zero on rows that see no key.
    lse : (B, H, n_q) array of q's dtype
        Natural-log log-sum-exp of each row's scaled, visible scores; ``-inf`` on rows that see no key.

    Notes
    -----
    Online softmax (FlashAttention): per query block a running row maximum, row sum and output accumulator,
    rescaled as each tile arrives; the result is exact up to rounding in the input dtype (float64 in,
    float64-accurate out). Arithmetic runs in the input dtype, float32 included, accumulating as the
    kernels do in float32.
    """
    if check_finite:
        require_finite(np, q=q, k=k, v=v)
    q, k, v = _reorder(plan.perm, q, k, v)
    Hk = k.shape[1]
    tile_m = plan.tile[0]
    out = np.zeros(q.shape, q.dtype)
    lse = np.full(q.shape[:3], -np.inf, q.dtype)
    q5, out5, lse5 = _split_heads(q, Hk), _split_heads(out, Hk), _split_heads(lse, Hk)
    k5, v5 = k[:, :, None], v[:, :, None]
    for g, sel in _views(plan, q, k):
        q_group, k_group, v_group = q5[sel], k5[sel[:2]], v5[sel[:2]]
        # the key bound of the group's batches (sel[0]: one or all), against the tile's columns
        bound = None if key_lens is None else np.asarray(key_lens)[sel[0], None, None, None, None]
        for m in range(plan.n_mblocks):
            rows = slice(m * tile_m, (m + 1) * tile_m)
            q_tile = q_group[..., rows, :]
            row_max = np.full(q_tile.shape[:-1], -np.inf, q.dtype)
            row_sum = np.zeros(q_tile.shape[:-1], q.dtype)
            acc = np.zeros(q_tile.shape, q.dtype)
            for entry in plan.entries(g, m):
                scores, cols = _tile_scores(plan, g, m, entry, q_tile, k_group, scale)
                if bound is not None:
                    scores = np.where(np.arange(cols.start, cols.start + scores.shape[-1]) < bound, scores, -np.inf)
                new_max = np.maximum(row_max, scores.max(axis=-1))
                # rows with nothing visible yet are shifted by 0, so exp(-inf - shift) is 0 rather than NaN
                shift = np.where(new_max == -np.inf, 0, new_max)
                p = np.exp(scores - shift[..., None])
                rescale = np.exp(row_max - shift)
                row_sum = rescale * row_sum + p.sum(axis=-1)
                acc = rescale[..., None] * acc + p @ v_group[..., cols, :]
                row_max = new_max
            # a row with a visible key has row_sum >= 1 (its maximum contributes exp(0))
            seen = row_sum > 0
            safe_sum = np.where(seen, row_sum, 1)
            out5[sel][..., rows, :] = acc / safe_sum[..., None]
            lse5[sel][..., rows] = np.where(seen, row_max + np.log(safe_sum), -np.inf)
    return _reorder(plan.inverse_perm, out, lse)


def backward(do: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, lse: np.ndarray,
             plan: BlockMask, scale: float, *, check_finite: bool = False):
    """Gradients of :func:`forward` with respect to q, k and v, recomputing the probabilities from ``lse``.

    Parameters
    ----------
    do : (B, H, n_q, D) array
        Gradient of the loss with respect to ``out``.
    q, k, v, plan, scale :
        As given to :func:`forward`.
    out, lse :
        As :func:`forward` returned them (``lse`` in any float dtype; ``-inf`` marks rows that see no key).
    check_finite : bool
        Raise ValueError, naming the input, where do, q, k, v or out holds inf or NaN.

    Returns
    -------
    dq : (B, H, n_q, D) array of q's dtype
    dk, dv : (B, Hk, n_k, D) arrays of q's dtype
        Summed over the query heads that share each KV head (GQA).

    Notes
    -----
    With ``P = exp(scale * S - lse)`` on visible elements and 0 elsewhere, ``delta = rowsum(dO * O)``:
    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - delta)``, ``dQ = scale * dS K``,
    ``dK = scale * dS^T Q``. One pass over the forward CSR computes each tile once and adds its share to
    dQ, dK and dV in the plan's fixed order, so results are deterministic. Rows that see no key and keys
    that no row sees get zero gradients. Arithmetic runs in the input dtype, float32 included.
    """
    if check_finite:
        require_finite(np, do=do, q=q, k=k, v=v, out=out)
    do, q, k, v, out, lse = _reorder(plan.perm, do, q, k, v, out, lse)
    Hk = k.shape[1]
    tile_m = plan.tile[0]
    dq = np.zeros(q.shape, q.dtype)
    dk = np.zeros(k.shape, q.dtype)
    dv = np.zeros(v.shape, q.dtype)
    delta = np.einsum("...d,...d->...", do, out)
    # +inf on rows that see no key makes P = exp(scores - inf) = 0 there, whatever the scores are
    lse_shift = np.where(lse == -np.inf, np.inf, lse).astype(q.dtype, copy=False)
    q5, do5, dq5 = _split_heads(q, Hk), _split_heads(do, Hk), _split_heads(dq, Hk)
    lse5, delta5 = _split_heads(lse_shift, Hk), _split_heads(delta, Hk)
    k5, v5, dk5, dv5 = k[:, :, None], v[:, :, None], dk[:, :, None], dv[:, :, None]
    for g, sel in _views(plan, q, k):
        q_group, do_group, k_group, v_group = q5[sel], do5[sel], k5[sel[:2]], v5[sel[:2]]
        dk_group, dv_group = dk5[sel[:2]], dv5[sel[:2]]
        for m in range(plan.n_mblocks):
            rows = slice(m * tile_m, (m + 1) * tile_m)
            q_tile, do_tile = q_group[..., rows, :], do_group[..., rows, :]
            lse_tile, delta_tile = lse5[sel][..., rows, None], delta5[sel][..., rows, None]
            dq_tile = np.zeros(q_tile.shape, q.dtype)
            for entry in plan.entries(g, m):
                scores, cols = _tile_scores(plan, g, m, entry, q_tile, k_group, scale)
                p = np.exp(scores - lse_tile)
                dp = do_tile @ v_group[..., cols, :].swapaxes(-1, -2)
                ds = p * (dp - delta_tile)
                dq_tile += ds @ k_group[..., cols, :]
                # query heads of one KV head (axis 2) add into the same dK, dV rows
                dv_group[..., cols, :] += (p.swapaxes(-1, -2) @ do_tile).sum(axis=2, keepdims=True)
                dk_group[..., cols, :] += (ds.swapaxes(-1, -2) @ q_tile).sum(axis=2, keepdims=True)
            dq5[sel][..., rows, :] = scale * dq_tile
    dk *= scale
    return _reorder(plan.inverse_perm, dq, dk, dv)
