"""The peers as their users would call them: FlexAttention (compiled, with the ``mask_mod`` a user writes per
workload)."""

from __future__ import annotations

from . import workloads


def _interval_mask_mod(spec, device):
    """FlashMask's column intervals as a mask_mod: what a FlashMask user moving to Flex writes."""
    import torch

    iv = torch.tensor(spec.startend_row_indices[0, 0], device=device)
    lts, lte, uts, ute = iv.unbind(-1)

    def mask_mod(b, h, q, kv):
        return ~(((lts[kv] <= q) & (q < lte[kv])) | ((uts[kv] <= q) & (q < ute[kv])))

    return mask_mod


def _lookup_mask_mod(dense, device):
    import torch

    table = torch.as_tensor(dense, device=device)

    def mask_mod(b, h, q, kv):
        return table[q, kv]

    return mask_mod


def flex_mask_mod(name: str, spec, device):
    """The mask_mod a FlexAttention user would write for workload ``name`` (None: no mask)."""
    import torch

    if name == "full":
        return None
    if name == "causal":
        return lambda b, h, q, kv: q >= kv
    if name == "swa":
        return lambda b, h, q, kv: (q >= kv) & (q - kv < 1024)
    if name == "sink_swa":
        return lambda b, h, q, kv: (q >= kv) & ((q - kv < 1024) | (kv < 64))
    if name == "lf_dilated":
        return lambda b, h, q, kv: ((q - kv).abs() <= 1024) & ((q - kv) % 2 == 0)
    if name == "lf_global":
        return lambda b, h, q, kv: ((q - kv).abs() <= 512) | (q < 64) | (kv < 64)
    if name == "bigbird":
        table = torch.as_tensor(spec.block_table, device=device)
        return lambda b, h, q, kv: table[q // 64, kv // 64]
    if name in workloads.INTERVAL_NAMES:
        return _interval_mask_mod(spec, device)
    dense = spec.to_dense()[0, 0]
    if spec.perm is not None:  # the reordered graph: give Flex the same node order maskattn uses
        dense = dense[spec.perm][:, spec.perm]
    return _lookup_mask_mod(dense, device)


def compiled_flex():
    """(torch.compile'd flex_attention, create_block_mask), or (None, None) where FlexAttention is missing.

    Every workload's mask_mod and every shape is new to Dynamo: the recompile limits are raised so that each
    compiles, instead of falling back, after the eighth, to an unfused flex_attention that materialises the scores.
    """
    import torch

    for limit in ("recompile_limit", "accumulated_recompile_limit", "cache_size_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 4096)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        print("FlexAttention is not importable: its columns are skipped")
        return None, None
    return torch.compile(flex_attention, dynamic=False), create_block_mask
