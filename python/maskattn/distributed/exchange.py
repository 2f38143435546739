"""Moving tokens between ranks over ``torch.distributed`` (NCCL on GPUs, gloo on CPUs): dispatch and undispatch of
a sequence, the all-to-all of the key/value blocks a sharded plan makes remote (and of their gradients back), and
the ring passes of the baseline.

Blocks travel token-major, ``(tokens, 2, B, Hk, D)``: K and V of a token side by side, so one all-to-all with split
sizes in tokens moves both, and the receiver reads K and V as strided ``(B, Hk, tokens, D)`` views without a copy.
Every send is counted in :data:`traffic` (bytes this process handed to the collectives for other ranks).
"""

from __future__ import annotations

import collections

import torch
import torch.distributed as dist

from .plan import ShardedPlan

traffic: "collections.Counter[str]" = collections.Counter()
"""Bytes this process sent to other ranks, by purpose: "kv" (forward) and "dkv" (backward): the all-to-all of remote
K/V blocks and of their gradients; "ring_kv" (forward), "ring_kv_bwd" and "ring_dkv" (backward): the ring baseline's
passes of K/V and of the dK/dV accumulators; "gather": undispatch."""


def reset_traffic():
    traffic.clear()


def plan_index(sharded: ShardedPlan, name: str, device) -> torch.Tensor | None:
    """One of the plan's index arrays for this rank as a tensor on ``device``, made once per device: "tokens"
    (:meth:`ShardedPlan.local_tokens`), "send" (:meth:`~ShardedPlan.send_index`), "remote"
    (:meth:`~ShardedPlan.remote_index`, may be None) or "packed" (:meth:`~ShardedPlan.packed_index`)."""
    cache = sharded.__dict__.setdefault("_tensors", {})
    key = (name, str(device))
    if key not in cache:
        values = {"tokens": sharded.local_tokens, "send": sharded.send_index, "remote": sharded.remote_index,
                  "packed": sharded.packed_index}[name]()
        cache[key] = None if values is None else torch.as_tensor(values, dtype=torch.int64, device=device)
    return cache[key]


def dispatch(x: torch.Tensor, sharded: ShardedPlan, dim: int = 2) -> torch.Tensor:
    """This rank's tokens of a full sequence ``x`` (the caller's order along ``dim``: 2 for (B, H, n, D), 1 for
    (B, n, hidden) or token ids (B, n)), in the order the rank holds them. Differentiable (an index)."""
    if x.shape[dim] != sharded.n:
        raise ValueError(f"x has {x.shape[dim]} tokens along dim {dim}; the sharded plan splits {sharded.n}")
    return x.index_select(dim, plan_index(sharded, "tokens", x.device))


def undispatch(x: torch.Tensor, sharded: ShardedPlan, dim: int = 2) -> torch.Tensor:
    """The full sequence, in the caller's order along ``dim``, from every rank's local part ``x`` (an all-gather,
    padded to the largest part). Not differentiable: compute losses on the local tokens."""
    counts = sharded.token_counts
    if x.shape[dim] != counts[sharded.rank]:
        raise ValueError(f"x has {x.shape[dim]} tokens along dim {dim}; rank {sharded.rank} holds "
                         f"{counts[sharded.rank]}")
    longest = int(counts.max())
    pad = list(x.shape)
    pad[dim] = longest - x.shape[dim]
    padded = torch.cat([x.detach(), x.new_zeros(pad)], dim=dim).contiguous()
    parts = [torch.empty_like(padded) for _ in range(sharded.world_size)]
    dist.all_gather(parts, padded, group=sharded.group)
    traffic["gather"] += padded.numel() * padded.element_size() * (sharded.world_size - 1)
    shape = list(x.shape)
    shape[dim] = sharded.n
    full = x.new_empty(shape)
    for r, part in enumerate(parts):
        tokens = torch.as_tensor(sharded.local_tokens(r), dtype=torch.int64, device=x.device)
        full.index_copy_(dim, tokens, part.narrow(dim, 0, int(counts[r])))
    return full


def token_major(k: torch.Tensor, v: torch.Tensor, index: torch.Tensor | None = None, dtype=None) -> torch.Tensor:
    """(tokens, 2, B, Hk, D): k and v (B, Hk, n, D) at ``index`` (all tokens when None), token by token, in ``dtype``
    (default k's)."""
    if index is not None:
        k, v = k.index_select(2, index), v.index_select(2, index)
    rows = k.new_empty((k.shape[2], 2, *k.shape[:2], k.shape[3]), dtype=dtype)
    for view, x in zip(kv_views(rows), (k, v)):
        copy_words(view, x)
    return rows


def copy_words(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` for tensors of one dtype and shape, through views of 8-byte words where both layouts allow
    it: torch copies strided tensors element by element, and a strided bf16 copy of K ran at 1.7 TB/s on an H200,
    3.8 through words (issue 17, (k))."""
    if dst.dtype == src.dtype and dst.shape == src.shape and _wordy(dst) and _wordy(src):
        dst.view(torch.int64).copy_(src.view(torch.int64))
    else:
        dst.copy_(src)
    return dst


def _wordy(x: torch.Tensor) -> bool:
    """Whether x views as int64 words along its last dimension: every stride and offset in bytes a multiple of 8."""
    size = x.element_size()
    return bool(x.numel()) and size < 8 and x.stride(-1) == 1 and all(
        (n * size) % 8 == 0 for n in (x.shape[-1], x.storage_offset(), *x.stride()[:-1]))


def kv_views(buffer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V (B, Hk, tokens, D) of a token-major buffer: strided views, the last dimension contiguous."""
    return buffer[:, 0].permute(1, 2, 0, 3), buffer[:, 1].permute(1, 2, 0, 3)


def all_to_all(send: torch.Tensor, send_counts, recv_counts, group, purpose: str):
    """Start the all-to-all of token-major rows: ``send_counts[d]`` rows of ``send`` (in rank order) go to rank d,
    ``recv_counts[s]`` arrive from rank s. Returns (receive buffer, work to wait on). Every rank of the group must
    call it, also with nothing to send or receive (the caller skips it on all ranks at once when the whole exchange
    is empty)."""
    recv = send.new_empty((int(sum(recv_counts)), *send.shape[1:]))
    work = dist.all_to_all_single(recv, send, [int(c) for c in recv_counts], [int(c) for c in send_counts],
                                  group=group, async_op=True)
    row = send[0].numel() * send.element_size() if send.shape[0] else 0
    traffic[purpose] += row * int(sum(send_counts))
    return recv, work


def ring_shift(x: torch.Tensor, recv_shape, sharded: ShardedPlan, purpose: str, tag: int):
    """Start sending ``x`` to the next rank of the ring and receiving a tensor of ``recv_shape`` from the previous
    one. Returns (receive buffer, works to wait on); on a ring of one rank, x itself."""
    r, P = sharded.rank, sharded.world_size
    if P == 1:
        return x, []
    group = sharded.group
    peer = (lambda i: i) if group is None else (lambda i: dist.get_global_rank(group, i))
    recv = x.new_empty(recv_shape)
    ops = [dist.P2POp(dist.isend, x.contiguous(), peer((r + 1) % P), group, tag),
           dist.P2POp(dist.irecv, recv, peer((r - 1) % P), group, tag)]
    traffic[purpose] += x.numel() * x.element_size()
    return recv, dist.batch_isend_irecv(ops)


def wait(works):
    for work in works if isinstance(works, (list, tuple)) else [works]:
        if work is not None:
            work.wait()


def group_geometry(group) -> tuple[int, int]:
    """(world size, rank) of ``group`` (None: the default group)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group first "
                           "(torchrun sets the environment), or pass world_size and rank")
    return dist.get_world_size(group), dist.get_rank(group)
