"""Context-parallel attention with autograd, over ``maskattn.attention`` / ``attention_backward`` on the restricted
plans of a :class:`~maskattn.distributed.plan.ShardedPlan`:

- :class:`AllToAllAttention`: each rank fetches exactly the remote key/value blocks its rows reference (one
  all-to-all with split sizes), and in backward returns their dK/dV partials to the owners, which add them to
  their own. With ``overlap`` the exchange runs while the rank computes its rows against its own keys (NCCL's
  stream beside the compute stream on GPUs; gloo's thread on CPUs), then the fetched blocks' part follows and the
  two merge by their log-sum-exp; the backward computes the fetched blocks' gradients first and returns them while
  it computes its own. Without (the default), one call runs over the packed buffer of fetched and own blocks, and
  the fetched blocks' dK/dV go back after it.
- :class:`RingAttention`: the baseline. K/V of every rank pass round the ring; each step runs the rank's rows
  against one rank's keys (skipped where the plan lists no tile); in backward the dK/dV accumulators travel with
  them (float32 on GPUs, as ring-flash-attention keeps them) and arrive home after the last step.
"""

from __future__ import annotations

import torch

from .. import api
from .exchange import all_to_all, copy_words, kv_views, plan_index, ring_shift, token_major, wait


def _lse_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.float32 if q.is_cuda else q.dtype


def _acc_dtype(q: torch.Tensor) -> torch.dtype:
    """Where partial results add up: float32 for half-precision inputs, else their own dtype."""
    return torch.promote_types(q.dtype, torch.float32)


def partial_attention(q, k, v, plan, scale):
    """(out, lse) of q's rows against k, v over ``plan``; 0 and -inf where the plan lists nothing."""
    if plan.nnz == 0:
        return torch.zeros_like(q), q.new_full(q.shape[:3], float("-inf"), dtype=_lse_dtype(q))
    return api.attention(q.detach(), k.detach(), v.detach(), plan, scale=scale, return_lse=True, check_finite=False)


def partial_grads(do, q, k, v, out, lse, plan, scale):
    """(dq, dk, dv) of one part, given the merged out and lse of every part; bit-identical from run to run where torch's
    deterministic mode is on (as ``maskattn.torch``)."""
    if plan.nnz == 0:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    return api.attention_backward(*(x.detach() for x in (do, q, k, v, out, lse)), plan, scale=scale,
                                  check_finite=False, deterministic=torch.are_deterministic_algorithms_enabled())


def merge(out_a, lse_a, out_b, lse_b):
    """Attention over the union of two disjoint key sets from the parts over each: weights ``exp(lse_part - lse)``.
    The output comes in the accumulation dtype (float32 for half inputs); rows no part saw stay 0 and -inf."""
    lse = torch.logaddexp(lse_a, lse_b)
    base = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
    acc = torch.promote_types(out_a.dtype, lse.dtype)
    out = out_a.to(acc) * torch.exp(lse_a - base).unsqueeze(-1).to(acc)
    out += out_b.to(acc) * torch.exp(lse_b - base).unsqueeze(-1).to(acc)
    return out, lse


# Up to this many runs of consecutive keys (:meth:`ShardedPlan.send_runs`), the rows a rank sends are copied and the
# partials that come back added by slices, one copy or addition per run; beyond, by one index_select / index_add_
# (on causal's rank 0 of 4, a gather of 1.5 GiB of sends at ~1.3 TB/s, 2.5 ms, and the sums' atomic additions, 6 ms
# a step: issue 19, (k)).
SLICED_RUNS = 64


def _send_rows(k, v, sharded):
    """The token-major rows (:func:`~.exchange.token_major`) of the keys this rank sends, in send order."""
    runs = sharded.send_runs()
    if len(runs) > SLICED_RUNS:
        return token_major(k, v, plan_index(sharded, "send", k.device))
    rows = k.new_empty((int(runs[:, 2].sum()), 2, *k.shape[:2], k.shape[3]))
    for view, x in zip(kv_views(rows), (k, v)):
        for row, position, length in runs.tolist():
            copy_words(view[:, :, row:row + length], x[:, :, position:position + length])
    return rows


def _add_returned(dk, dv, returned, sharded):
    """dk, dv plus the partials other ranks returned for the keys they fetched (:meth:`ShardedPlan.send_index`).
    Where no key comes back twice (:meth:`~ShardedPlan.sends_once`) each element takes one addition, rounded once,
    in place (torch adds half-precision values in float, by slices or index_add_ alike; index_add_'s atomics took
    2 ms for each of causal's dK and dV on rank 0 of 2, (l)). Else a key sent to several ranks comes back
    from each, and the partials add up in float32 first, token by token: each key's K and V one contiguous row (along
    the head-major token axis the same sums took 12 ms of causal's rank 0 of 4), by slices over runs of consecutive
    keys (:meth:`~ShardedPlan.send_runs`) where these are few."""
    if returned.shape[0] == 0:
        return dk, dv
    runs = sharded.send_runs()
    sliced = len(runs) <= SLICED_RUNS
    index = None if sliced else plan_index(sharded, "send", dk.device)
    if sharded.sends_once():
        for grad, back in zip((dk, dv), kv_views(returned)):
            if sliced:
                for row, position, length in runs.tolist():
                    grad[:, :, position:position + length] += back[:, :, row:row + length]
            else:
                grad.index_add_(2, index, back)
        return dk, dv
    acc = token_major(dk, dv, dtype=_acc_dtype(dk))
    if sliced:
        for row, position, length in runs.tolist():
            acc[position:position + length] += returned[row:row + length]
    else:
        acc.index_add_(0, index, returned.to(acc.dtype))
    return tuple(torch.empty_like(g).copy_(view) for view, g in zip(kv_views(acc), (dk, dv)))


def _packed_keys(k, v, recv, sharded):
    """K and V (B, Hk, held tokens, D) of every key the rank holds, ascending: its own k, v where it fetched nothing;
    one copy of its own and the fetched keys where these lie before and after its own
    (:meth:`ShardedPlan.fetched_before`); else a gather from the arrival buffer and its own keys."""
    if recv.shape[0] == 0:
        return k, v
    first = sharded.fetched_before()
    if first is None:
        return kv_views(torch.cat((recv, token_major(k, v))).index_select(0, plan_index(sharded, "packed", k.device)))
    held = []
    for own, fetched in zip((k, v), kv_views(recv)):
        # copies into slices (torch's cat of these strided pieces ran at a third of the speed: issue 17, (j))
        x = own.new_empty((*own.shape[:2], own.shape[2] + fetched.shape[2], own.shape[3]))
        copy_words(x[:, :, :first], fetched[:, :, :first])
        copy_words(x[:, :, first:first + own.shape[2]], own)
        copy_words(x[:, :, first + own.shape[2]:], fetched[:, :, first:])
        held.append(x)
    return tuple(held)


def _split_packed(dk, dv, sharded, k, v):
    """(the fetched keys' dK/dV token-major in arrival order, the own keys' dK, dV) from gradients over the packed
    keys (:func:`_packed_keys`). The own ones come in k's and v's layouts, as autograd hands them to leaves: this copy
    of the strided slices is faster than autograd's (:func:`~.exchange.copy_words`)."""
    own = k.shape[2]
    if dk.shape[2] == own:
        return token_major(dk[:, :, :0], dv[:, :, :0]), dk, dv
    first = sharded.fetched_before()
    if first is None:
        held = _unpermute(token_major(dk, dv), plan_index(sharded, "packed", dk.device))
        fetched = held.shape[0] - own
        return held[:fetched], *(x.contiguous() for x in kv_views(held[fetched:]))
    back = dk.new_empty((dk.shape[2] - own, 2, *dk.shape[:2], dk.shape[3]))
    for view, g in zip(kv_views(back), (dk, dv)):
        copy_words(view[:, :, :first], g[:, :, :first])
        copy_words(view[:, :, first:], g[:, :, first + own:])
    return back, *(copy_words(torch.empty_like(x), g[:, :, first:first + own]) for x, g in ((k, dk), (v, dv)))


def _unpermute(rows, index):
    """The rows ``x`` with ``x[index] == rows``: undoes ``x.index_select(0, index)``."""
    return torch.empty_like(rows).index_copy_(0, index, rows)


class AllToAllAttention(torch.autograd.Function):
    """q (B, H, n_r, D), k and v (B, Hk, n_r, D): this rank's tokens; see the module docstring.

    Fetched blocks arrive token-major by owner rank (``recv``); the plans index them in ascending block order, which
    is the arrival order for contiguous splits (else one gather, ``remote`` / ``packed`` indices of the plan).
    """

    @staticmethod
    def forward(ctx, q, k, v, sharded, scale, overlap):
        r = sharded.rank
        send = _send_rows(k, v, sharded)
        moves = bool(sharded.send_tokens.any())  # the same on every rank: all call the collective, or none
        recv, work = (all_to_all(send, sharded.send_tokens[r], sharded.send_tokens[:, r], sharded.group, "kv")
                      if moves else (send[:0], None))
        if overlap:
            out, lse = partial_attention(q, k, v, sharded.local_plan(), scale)
            wait(work)
            remote_plan, order = sharded.remote_plan(), plan_index(sharded, "remote", k.device)
            # held_k, held_v: the keys the second plan indexes (here the fetched ones; packed: every key held)
            held_k, held_v = kv_views(recv if order is None else recv.index_select(0, order))
            if remote_plan.nnz:
                out, lse = merge(out, lse, *partial_attention(q, held_k, held_v, remote_plan, scale))
                out = out.to(q.dtype)
        else:
            wait(work)
            held_k, held_v = _packed_keys(k, v, recv, sharded)
            out, lse = partial_attention(q, held_k, held_v, sharded.packed_plan(), scale)
        ctx.save_for_backward(q, k, v, held_k, held_v, out, lse)
        ctx.sharded, ctx.scale, ctx.overlap, ctx.moves = sharded, scale, overlap, moves
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, held_k, held_v, out, lse = ctx.saved_tensors
        sharded, scale = ctx.sharded, ctx.scale
        do = do.contiguous()
        if ctx.overlap:
            dq, dk_remote, dv_remote = partial_grads(do, q, held_k, held_v, out, lse, sharded.remote_plan(), scale)
            grads = token_major(dk_remote, dv_remote)
            order = plan_index(sharded, "remote", k.device)
            back, work = _return(grads if order is None else _unpermute(grads, order), sharded, ctx.moves)
            dq_local, dk, dv = partial_grads(do, q, k, v, out, lse, sharded.local_plan(), scale)
            dq = (dq.to(_acc_dtype(q)) + dq_local.to(_acc_dtype(q))).to(q.dtype)
        else:
            dq, dk_held, dv_held = partial_grads(do, q, held_k, held_v, out, lse, sharded.packed_plan(), scale)
            fetched_grads, dk, dv = _split_packed(dk_held, dv_held, sharded, k, v)
            back, work = _return(fetched_grads, sharded, ctx.moves)
        wait(work)
        dk, dv = _add_returned(dk, dv, back, sharded)
        return dq, dk, dv, None, None, None


def _return(remote_grads, sharded, moves):
    """Start sending the fetched blocks' dK/dV partials (token-major, in arrival order) back to their owners."""
    r = sharded.rank
    if not moves:
        return remote_grads[:0], None
    return all_to_all(remote_grads, sharded.send_tokens[:, r], sharded.send_tokens[r], sharded.group, "dkv")


def _around_the_ring(kv, sharded, purpose):
    """Yield (source rank, its stacked K/V) for each step of the ring, the next step's K/V already in flight."""
    P, r = sharded.world_size, sharded.rank
    counts = sharded.token_counts
    for step in range(P):
        source = (r - step) % P
        if step + 1 < P:
            nxt, works = ring_shift(kv, _shape(kv, counts[(source - 1) % P]), sharded, purpose, tag=1)
        yield source, kv
        if step + 1 < P:
            wait(works)
            kv = nxt


class RingAttention(torch.autograd.Function):
    """The ring baseline over the same restricted plans: q (B, H, n_r, D), k and v (B, Hk, n_r, D)."""

    @staticmethod
    def forward(ctx, q, k, v, sharded, scale):
        out = torch.zeros(q.shape, dtype=_acc_dtype(q), device=q.device)
        lse = q.new_full(q.shape[:3], float("-inf"), dtype=_lse_dtype(q))
        for source, kv in _around_the_ring(torch.stack((k, v)), sharded, "ring_kv"):
            plan = sharded.source_plan(source)
            if plan.nnz:
                out, lse = merge(out, lse, *partial_attention(q, kv[0], kv[1], plan, scale))
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.sharded, ctx.scale = sharded, scale
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        sharded, scale = ctx.sharded, ctx.scale
        counts = sharded.token_counts
        do = do.contiguous()
        acc = _acc_dtype(q)
        dkv = torch.zeros((2, *k.shape), dtype=acc, device=k.device)  # the gradients of the keys kv holds
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        for source, kv in _around_the_ring(torch.stack((k, v)), sharded, "ring_kv_bwd"):
            plan = sharded.source_plan(source)
            if plan.nnz:
                g = partial_grads(do, q, kv[0], kv[1], out, lse, plan, scale)
                dq += g[0]
                dkv[0] += g[1]
                dkv[1] += g[2]
            # the accumulator of source's keys moves on with them; after the last step it reaches its owner
            dkv, works = ring_shift(dkv, _shape(dkv, counts[(source - 1) % sharded.world_size]), sharded,
                                    "ring_dkv", tag=2)
            wait(works)
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None


def _shape(x, tokens):
    """x's shape with ``tokens`` rows along the token axis (3 of a stacked (2, B, Hk, n, D))."""
    return (*x.shape[:3], int(tokens), x.shape[4])
