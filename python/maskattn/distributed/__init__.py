"""maskattn across GPUs: context parallelism over ``torch.distributed`` (NCCL on GPUs, gloo on CPUs), split by the
plan's work, moving only the key blocks each rank's rows reference.

::

    sharded = maskattn.distributed.shard(spec)                  # the same on every rank, no communication
    q, k, v = (maskattn.distributed.dispatch(x, sharded) for x in (q, k, v))   # this rank's tokens
    out = maskattn.distributed.attention(q, k, v, sharded)       # autograd; out holds this rank's rows

The README has a whole training step under torchrun.

:func:`shard` splits the sequence into contiguous token ranges, one per rank, at the granularity of the plan's tiles,
balancing the tiles' forward and backward cost (FULL and PARTIAL weighted apart), and lists per rank the key blocks
its rows reference that other ranks own. :func:`attention` fetches exactly those blocks (one all-to-all with split
sizes), runs the kernels on plans restricted to the rank's rows and packed key blocks, and in backward returns the
fetched blocks' dK/dV to their owners, summed there. :func:`ring_attention` is the baseline: a token split (zigzag
for causal masks) with K/V passed round a ring over the same restricted plans.

Modules: :mod:`.plan` (the split and the restricted plans; NumPy only), :mod:`.exchange` (dispatch, all-to-all,
ring passes, byte counts), :mod:`.attention` (the autograd functions).
"""

from __future__ import annotations

import math

from .. import api
from ..masks import MaskSpec
from ..plan import DEFAULT_TILE, BlockMask
from .attention import AllToAllAttention, RingAttention
from .exchange import dispatch, group_geometry, reset_traffic, traffic, undispatch
from .plan import SPLITS, ShardedPlan, block_work, restrict

__all__ = ["shard", "ShardedPlan", "dispatch", "undispatch", "attention", "ring_attention", "traffic",
           "reset_traffic", "restrict", "block_work", "SPLITS"]


def shard(mask, group=None, *, tile=None, split="work", world_size: int | None = None,
          rank: int | None = None) -> ShardedPlan:
    """Split a mask across the ranks of ``group`` for :func:`attention` (or :func:`ring_attention`).

    Parameters
    ----------
    mask : mask spec or BlockMask
        A square mask over the whole sequence, in the caller's token order (a graph's reordering, ``perm``, is
        followed: ranks own runs of the plan's order, and :meth:`ShardedPlan.local_tokens` says which caller tokens).
    group : torch.distributed process group, optional
        Default: the default group.
    tile : (int, int), optional
        The kernels' tile, for a spec: on GPUs ``maskattn.backends.cuda.tile_for(D, dtype)``; default (128, 128).
    split : {"work", "even", "zigzag"} or sequence of ints
        "work" (default): contiguous token ranges balancing the tiles' cost; "even": contiguous equal ranges;
        "zigzag": 2 x world_size equal chunks, rank r holding chunks r and 2 x world_size - 1 - r (the ring's split
        for causal masks); or world_size + 1 boundaries in units of ``lcm(tile_m, tile_n)`` tokens.
    world_size, rank : int, optional
        Instead of ``group`` (tests, planning offline).

    Returns
    -------
    ShardedPlan
        Identical on every rank but for ``rank``: computed from the mask alone.
    """
    if world_size is None or rank is None:
        world_size, rank = group_geometry(group)
    if isinstance(mask, MaskSpec):
        plan = api.compile_mask(mask, DEFAULT_TILE if tile is None else tile)
    elif isinstance(mask, BlockMask):
        plan = mask
    else:
        raise api.mask_type_error(mask)
    return ShardedPlan(plan, world_size, rank, split, group=group)


def _check(q, k, v, sharded: ShardedPlan, scale):
    if not isinstance(sharded, ShardedPlan):
        raise TypeError(f"sharded must be a ShardedPlan from maskattn.distributed.shard; got {type(sharded).__name__}")
    tokens = int(sharded.token_counts[sharded.rank])
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4 or x.shape[2] != tokens:
            raise ValueError(f"{name} has shape {tuple(x.shape)}; rank {sharded.rank} holds {tokens} tokens: "
                             f"(B, H, {tokens}, D) (layout bhnd, from maskattn.distributed.dispatch)")
    if k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or q.shape[1] % k.shape[1]:
        raise ValueError(f"k and v must have shape (B, Hk, n, D) with H % Hk == 0 for q {tuple(q.shape)}; got "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    return 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)


def attention(q, k, v, sharded: ShardedPlan, *, scale: float | None = None, overlap: bool = False):
    """Masked attention of this rank's rows over the whole sequence, with autograd.

    Parameters
    ----------
    q : torch.Tensor (B, H, n_r, D)
        This rank's queries (:func:`dispatch`); CUDA float16 / bfloat16 (the kernels) or CPU float32 / float64
        (the CPU kernels).
    k, v : torch.Tensor (B, Hk, n_r, D)
        This rank's keys and values; ``H % Hk == 0`` (GQA).
    sharded : ShardedPlan
        From :func:`shard`, on every rank of its group (every rank must call, also one with no tokens).
    scale : float, optional
        Default ``1 / sqrt(D)``.
    overlap : bool, optional
        Overlap the exchange with the rank's own blocks (two plans whose results merge by log-sum-exp) instead of
        one call over the packed buffer after it (the default). For links much slower than NVLink: on two H200s the
        exchange took 1% of a step, the merges cost more than that, and in the backward a rank that joins the
        gradients' return early holds SMs in NCCL's kernel while it waits (docs/performance.md, issue 17).

    Returns
    -------
    torch.Tensor like q: this rank's rows of the output. Gradients reach q, k and v of every rank.
    """
    scale = _check(q, k, v, sharded, scale)
    return AllToAllAttention.apply(q, k, v, sharded, scale, bool(overlap))


def ring_attention(q, k, v, sharded: ShardedPlan, *, scale: float | None = None):
    """The ring baseline: as :func:`attention`, with every rank's K/V passed round a ring (world_size - 1 passes
    forward; K/V and float32 dK/dV accumulators in backward) and each step's tiles taken from the plan."""
    scale = _check(q, k, v, sharded, scale)
    return RingAttention.apply(q, k, v, sharded, scale)
