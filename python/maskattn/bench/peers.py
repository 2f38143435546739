"""The peers as their users would call them: FlexAttention (compiled, with the ``mask_mod`` a user writes per
workload) on its Triton and FLASH backends, and for the masks they take without one (full, causal),
FlashAttention-4 and SDPA's cuDNN and flash kernels."""

from __future__ import annotations

from . import workloads

PEERS = {"flex": "Flex Triton", "flex_flash": "Flex FLASH", "fa4": "FA4", "cudnn": "cuDNN", "sdpa_flash": "SDPA flash"}
DENSE = ("full", "causal")  # the workloads FA4 and SDPA's kernels compute without a mask (is_causal / causal=True)
FLASH = {"BACKEND": "FLASH"}  # FlexAttention's CuTe DSL backend: FlashAttention-4's kernels


def flash_attn_4():
    """(FlashAttention-4's ``flash_attn_func``, its version) or (None, the reason it is not importable)."""
    from importlib import import_module, metadata

    from .common import attempt

    fa4, reason = attempt(lambda: import_module("flash_attn.cute").flash_attn_func)
    if fa4 is None:
        return None, f"not importable: {reason}"
    version, _ = attempt(lambda: metadata.version("flash-attn-4"))
    return fa4, version or "version unknown"


def sdpa(backend: str, causal: bool = False):
    """``attn(q, k, v)``: SDPA without a mask (``is_causal`` where ``causal``) on one backend ("FLASH_ATTENTION",
    "CUDNN_ATTENTION", a name of ``torch.nn.attention.SDPBackend``), which raises where that kernel refuses."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def attn(q, k, v):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return attn


def peer_calls(workload: str, flex, block_mask, fa4) -> dict:
    """``{peer: attn(q, k, v) -> out}`` for every peer that computes ``workload``'s mask (Flex every one, the others
    those of :data:`DENSE`), on (B, H, n, D) tensors; FA4 takes (B, n, H, D) and gets transposed views. ``flex``
    and ``fa4`` are only called, never checked: skip the peers whose library is missing."""
    calls = {"flex": lambda q, k, v: flex(q, k, v, block_mask=block_mask),
             "flex_flash": lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=FLASH)}
    if workload in DENSE:
        causal = workload == "causal"

        def fa4_attn(q, k, v):
            out = fa4(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
            return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)  # 4.0 returns (out, lse)

        calls.update(fa4=fa4_attn, cudnn=sdpa("CUDNN_ATTENTION", causal), sdpa_flash=sdpa("FLASH_ATTENTION", causal))
    return calls


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
