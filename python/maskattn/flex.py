"""maskattn and FlexAttention (torch): block masks in both directions.

``to_block_mask(plan)`` gives torch's ``BlockMask`` with the plan's FULL tiles as Flex's full blocks, its PARTIAL
tiles as Flex's partial blocks and a ``mask_mod`` that reads the plan's own payload (intervals or bit tiles), so
Flex computes exactly the plan's mask. ``from_block_mask(block_mask)`` gives a spec whose tiles are the Flex block
mask's blocks, evaluating its ``mask_mod`` only where Flex would.

In a program: ``spec = maskattn.flex.from_block_mask(create_block_mask(mask_mod, 1, 1, n, n))``, and back,
``maskattn.flex.to_block_mask(maskattn.compile_mask(spec, (128, 128)))`` for ``flex_attention``.
"""

from __future__ import annotations

import numpy as np

from .masks import FunctionMask, coarse_support
from .plan import FULL, PARTIAL, BlockMask


def _block_lists(plan: BlockMask, kind: int):
    """(num_blocks (B, H, M), indices (B, H, M, N)) int32 of the plan's entries of one kind, Flex's layout."""
    B, H = plan.shape[:2]
    M, N = plan.n_mblocks, plan.n_nblocks
    num = np.zeros((B * H, M), np.int32)
    idx = np.zeros((B * H, M, N), np.int32)
    for g in range(plan.groups):
        lo, hi = plan.row_ptr[g, 0], plan.row_ptr[g, -1]
        sel = plan.kind[lo:hi] == kind
        rows, cols = plan.entry_rows[lo:hi][sel], plan.col_idx[lo:hi][sel]
        counts = np.bincount(rows, minlength=M)
        rank = np.arange(rows.size) - (np.cumsum(counts) - counts)[rows]
        num[g] = counts
        idx[g, rows, rank] = cols
    return num.reshape(B, H, M), idx.reshape(B, H, M, N)


def _plan_mask_mod(plan: BlockMask, device):
    """A Flex mask_mod that evaluates the plan's mask exactly from its payload."""
    import torch

    B, H = plan.shape[:2]
    tile_m, tile_n = plan.tile

    def group(b, h):
        return (b if B > 1 else 0) * H + (h if H > 1 else 0)

    if plan.intervals is not None:
        iv = torch.tensor(plan.intervals, device=device)  # a copy: the plan's arrays are read-only

        def mask_mod(b, h, q, kv):
            v = iv[group(b, h), kv]
            return ~(((v[..., 0] <= q) & (q < v[..., 1])) | ((v[..., 2] <= q) & (q < v[..., 3])))

        return mask_mod
    # bits: per tile, -2 not listed, -1 FULL, else the pool row
    table = np.full((plan.groups, plan.n_mblocks, plan.n_nblocks), -2, np.int64)
    for g in range(plan.groups):
        lo, hi = plan.row_ptr[g, 0], plan.row_ptr[g, -1]
        table[g, plan.entry_rows[lo:hi], plan.col_idx[lo:hi]] = plan.payload_idx[lo:hi]
    table = torch.as_tensor(table, device=device)
    pool = torch.as_tensor(plan.bit_pool.astype(np.int64), device=device)

    def mask_mod(b, h, q, kv):
        p = table[group(b, h), q // tile_m, kv // tile_n]
        bit = (q % tile_m) * tile_n + kv % tile_n
        word = pool[p.clamp(min=0), bit // 32] if pool.numel() else torch.zeros_like(bit)
        return torch.where(p == -1, True, (p >= 0) & (((word >> (bit % 32)) & 1) == 1))

    return mask_mod


def to_block_mask(plan: BlockMask, device="cuda"):
    """torch's FlexAttention ``BlockMask`` for this plan (its tile becomes Flex's ``BLOCK_SIZE``).

    Parameters
    ----------
    plan : BlockMask
    device : torch device for the block tensors and the mask_mod's lookup tables
    """
    import torch
    from torch.nn.attention.flex_attention import BlockMask as FlexBlockMask

    if plan.perm is not None:
        raise ValueError("this plan is in a token order of its own (perm: a reordered graph, a dilated Longformer); "
                         "Flex would need q, k, v permuted by it: use the plan's to_dense() in perm order, or "
                         "maskattn.attention, which permutes for you")
    part_num, part_idx = _block_lists(plan, PARTIAL)
    full_num, full_idx = _block_lists(plan, FULL)
    t = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
    return FlexBlockMask.from_kv_blocks(t(part_num), t(part_idx), t(full_num), t(full_idx),
                                        BLOCK_SIZE=plan.tile, mask_mod=_plan_mask_mod(plan, device),
                                        seq_lengths=plan.shape[2:])


def from_block_mask(block_mask):
    """A maskattn spec with exactly the mask a FlexAttention ``BlockMask`` describes: its full blocks are all
    true, its partial blocks follow its ``mask_mod``, everything else is masked.

    Only block masks shared across batch and heads (B = H = 1) are taken; the spec's tiles are re-classified
    exactly when compiled, for any tile.
    """
    import torch

    B, H, M = block_mask.kv_num_blocks.shape
    if (B, H) != (1, 1):
        raise ValueError(f"from_block_mask takes block masks of B = H = 1; this one has B={B}, H={H}")
    n_q, n_k = (int(s) for s in block_mask.seq_lengths)
    bq, bkv = block_mask.BLOCK_SIZE
    N = block_mask.kv_indices.shape[-1]
    state = np.zeros((M, N), np.int8)  # 0 masked, 1 partial, 2 full
    for nums, idxs, value in ((block_mask.kv_num_blocks, block_mask.kv_indices, 1),
                              (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, 2)):
        if nums is None:
            continue
        nums, idxs = nums[0, 0].cpu().numpy(), idxs[0, 0].cpu().numpy()
        for m in range(M):
            state[m, idxs[m, : nums[m]]] = value
    device = block_mask.kv_num_blocks.device
    mask_mod = block_mask.mask_mod

    def predicate(rows, cols):
        s = state[np.minimum(rows // bq, M - 1), np.minimum(cols // bkv, N - 1)]
        if not np.any(s == 1):
            return s == 2
        zero = torch.zeros((), dtype=torch.int64, device=device)
        q = torch.as_tensor(np.broadcast_to(rows, s.shape).copy(), device=device)
        kv = torch.as_tensor(np.broadcast_to(cols, s.shape).copy(), device=device)
        inside = mask_mod(zero, zero, q, kv).cpu().numpy().astype(bool)
        return (s == 2) | ((s == 1) & inside)

    return FunctionMask(predicate, n_q, n_k, coarse_support(state > 0, (bq, bkv), n_q, n_k))
