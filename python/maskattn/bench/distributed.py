"""``python -m maskattn bench --distributed``, under torchrun: context parallelism (``maskattn.distributed``) on N ranks
against one rank and against the ring baseline, per workload.

    torchrun --nproc-per-node 2 -m maskattn bench --distributed                      # GPUs: NCCL, bf16, 128K tokens
    torchrun --nproc-per-node 2 -m maskattn bench --distributed --n 2048 --heads 2   # CPUs: gloo, float32

For each workload (default doc_causal, causal, sink_swa, shared_question, graph_rcm) it times one forward+backward
step, and the forward alone (with its TFLOP/s per GPU over the mask's true elements), of the attention alone (torch
autograd, the slowest rank's time from a common barrier, median of repetitions):
``maskattn.torch.attention`` on rank 0 alone over the whole sequence, ``maskattn.distributed.attention`` on every rank
with the work split, and ``ring_attention`` with a zigzag split; counts the bytes each rank hands the collectives
(``maskattn.distributed.traffic``) against the bytes of its K/V blocks that other ranks' rows reference (forward) and of
their gradients (backward), and checks the distributed output against the single-rank one.
"""

from __future__ import annotations

import os
import statistics
import time

import maskattn
from maskattn import distributed as md

from . import workloads
from .common import fmt

DEFAULT_WORKLOADS = ("doc_causal", "causal", "sink_swa", "shared_question", "graph_rcm")
DEFAULT_N = 131072
WARMUP, REPS = 2, 7


def _setup(args):
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    # NVLink multicast stays off on the lent multi-GPU machines (their KINDS.md)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", **({"device_id": device} if cuda else {}))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype] if cuda else torch.float32
    if cuda:
        from maskattn.backends import cuda as backend

        tile = backend.tile_for(args.head_dim, "float16" if args.dtype == "fp16" else "bfloat16", device.index)
    else:
        tile = tuple(args.tile)
    return device, dtype, tuple(tile)


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step_ms(step, device, together: bool, reps=REPS, warmup=WARMUP) -> float:
    """Median milliseconds of ``step`` over repetitions; ``together``: every rank runs it, each repetition starts at a
    barrier and counts the slowest rank's time."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        _sync(device)
        if together:
            dist.barrier()
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    if together:
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        times = slowest.tolist()
    return statistics.median(times) * 1e3


def _fwd(attend, q, k, v, do):
    """The forward alone, without autograd's graph."""
    import torch

    with torch.no_grad():
        return attend(q, k, v)


def _fwd_bwd(attend, q, k, v, do):
    """One training step of attention alone: forward, backward into fresh leaves; returns the output."""
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    out = attend(*leaves)
    out.backward(do)
    return out.detach()


def _gather(values, device):
    """Every rank's list of numbers, on every rank: a (world, len) list."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.float64, device=device)
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    return [p.tolist() for p in parts]


def run(args) -> list[dict] | None:
    """Rows of results on rank 0, None on the others."""
    import torch
    import torch.distributed as dist

    device, dtype, tile = _setup(args)
    rows = []
    for n in args.n:
        for name in args.workloads:
            row = _workload(name, n, args, device, dtype, tile)
            if dist.get_rank() == 0:
                rows.append(row)
                print_row(row, flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    dist.barrier()
    return rows if dist.get_rank() == 0 else None


def _workload(name, n, args, device, dtype, tile) -> dict:
    """One workload: times and bytes of one rank, of context parallelism and of the ring (complete on rank 0)."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    B, H, D = args.batch, args.heads, args.head_dim
    Hk = args.kv_heads or H
    plan = maskattn.compile_mask(workloads.build(name, n, seed=args.seed), tile)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    q = torch.randn(B, H, n, D, device=device, dtype=dtype, generator=gen)
    k, v = (torch.randn(B, Hk, n, D, device=device, dtype=dtype, generator=gen) for _ in range(2))
    do = torch.randn(B, H, n, D, device=device, dtype=dtype, generator=gen)
    row = {"workload": name, "n": n, "ranks": world, "B": B, "H": H, "Hk": Hk, "D": D, "dtype": str(dtype),
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "tile": tile,
           "mask_flops": 4 * B * H * D * plan.stats(D)["density"] * n * n}

    def alone(phase=_fwd_bwd):
        return phase(lambda a, b, c: maskattn.torch.attention(a, b, c, plan), q, k, v, do)

    single = None
    if rank == 0:  # the others wait: rank 0's device runs alone
        single = alone().float()
        row["single_ms"] = _step_ms(alone, device, together=False)
        row["single_fwd_ms"] = _step_ms(lambda: alone(_fwd), device, together=False)
    dist.barrier()

    row_bytes = 2 * B * Hk * D * q.element_size()  # K and V of one token
    for label, split, attend in (("cp", "work", md.attention), ("ring", "zigzag", md.ring_attention)):
        sharded = md.shard(plan, split=split)
        local = [md.dispatch(x, sharded) for x in (q, k, v, do)]

        def step(phase=_fwd_bwd):
            return phase(lambda a, b, c: attend(a, b, c, sharded), *local)

        md.reset_traffic()
        full = md.undispatch(step(), sharded)
        sent = dict(md.traffic)
        row[f"{label}_ms"] = _step_ms(step, device, together=True)
        row[f"{label}_fwd_ms"] = _step_ms(lambda: step(_fwd), device, together=True)
        kinds = (("kv",), ("dkv",)) if label == "cp" else (("ring_kv",), ("ring_kv_bwd", "ring_dkv"))
        measured = _gather([sum(sent.get(kind, 0) for kind in purposes) for purposes in kinds], device)
        row[f"{label}_fwd_bytes"] = [int(m[0]) for m in measured]
        row[f"{label}_bwd_bytes"] = [int(m[1]) for m in measured]
        stats = sharded.stats()
        row[f"{label}_tokens"], row[f"{label}_imbalance"] = stats["tokens"], stats["imbalance"]
        if label == "cp":  # what the split makes remote: K/V of a rank's blocks other ranks' rows reference
            row["referenced_fwd_bytes"] = [int(sharded.send_tokens[r].sum()) * row_bytes for r in range(world)]
            row["referenced_bwd_bytes"] = [int(sharded.send_tokens[:, r].sum()) * row_bytes for r in range(world)]
        if rank == 0:
            row[f"{label}_rel_err"] = float((full.float() - single).norm() / single.norm())
    if rank == 0:
        # forward TFLOP/s per GPU, counting the mask's true elements (4·B·H·D each) as MagiAttention's figures do
        row["single_fwd_tflops"] = row["mask_flops"] / row["single_fwd_ms"] / 1e9
        row["cp_fwd_tflops_per_gpu"] = row["mask_flops"] / row["cp_fwd_ms"] / world / 1e9
        row["speedup"] = row["single_ms"] / row["cp_ms"]
        row["ring_speedup"] = row["single_ms"] / row["ring_ms"]
        row["gain_vs_ring"] = row["ring_ms"] / row["cp_ms"]
    return row


def _mb(values) -> str:
    return "/".join(f"{v / 2**20:.1f}" for v in values)


def _bytes_ratio(row) -> float | None:
    """The largest relative deviation of the bytes sent from the referenced bytes, over ranks and directions."""
    worst = 0.0
    for sent, want in ((row["cp_fwd_bytes"], row["referenced_fwd_bytes"]),
                       (row["cp_bwd_bytes"], row["referenced_bwd_bytes"])):
        for s, w in zip(sent, want):
            worst = max(worst, abs(s - w) / w if w else float(s != 0))
    return worst


def print_row(row, flush=False):
    print(f"{row['workload']:16s} n={row['n']} ranks={row['ranks']} | 1 rank {row['single_ms']:9.2f} ms | "
          f"cp {row['cp_ms']:9.2f} ms ({row['speedup']:.2f}x, tokens {row['cp_tokens']}, imbalance "
          f"{row['cp_imbalance']:.3f}) | ring {row['ring_ms']:9.2f} ms ({row['ring_speedup']:.2f}x) | cp/ring "
          f"{row['gain_vs_ring']:.2f}x | fwd 1 rank {row['single_fwd_ms']:.2f} ms cp {row['cp_fwd_ms']:.2f} ms "
          f"({row['cp_fwd_tflops_per_gpu']:.0f} TFLOP/s per GPU) | MiB sent fwd {_mb(row['cp_fwd_bytes'])} (referenced "
          f"{_mb(row['referenced_fwd_bytes'])}) bwd {_mb(row['cp_bwd_bytes'])} | ring fwd {_mb(row['ring_fwd_bytes'])} "
          f"bwd {_mb(row['ring_bwd_bytes'])} | err cp {row['cp_rel_err']:.1e} ring {row['ring_rel_err']:.1e}",
          flush=flush)


def markdown(rows) -> str:
    head = ["workload", "n", "ranks", "1 rank ms", "cp ms", "speedup", "ring ms", "ring speedup", "cp vs ring",
            "fwd 1 rank ms", "fwd cp ms", "fwd speedup", "fwd TFLOP/s per GPU (1 rank)", "fwd ring ms",
            "tokens per rank", "work imbalance", "ring imbalance", "fwd MiB sent per rank",
            "referenced K/V MiB per rank", "bwd MiB sent per rank", "max |sent/referenced - 1|", "ring fwd MiB",
            "ring bwd MiB", "rel err cp", "rel err ring"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["workload"], r["n"], r["ranks"], f"{r['single_ms']:.2f}", f"{r['cp_ms']:.2f}",
                 f"{r['speedup']:.2f}", f"{r['ring_ms']:.2f}", f"{r['ring_speedup']:.2f}", f"{r['gain_vs_ring']:.2f}",
                 f"{r['single_fwd_ms']:.2f}", f"{r['cp_fwd_ms']:.2f}", f"{r['single_fwd_ms'] / r['cp_fwd_ms']:.2f}",
                 f"{r['cp_fwd_tflops_per_gpu']:.0f} ({r['single_fwd_tflops']:.0f})", f"{r['ring_fwd_ms']:.2f}",
                 "/".join(map(str, r["cp_tokens"])), f"{r['cp_imbalance']:.3f}", f"{r['ring_imbalance']:.3f}",
                 _mb(r["cp_fwd_bytes"]),
                 _mb(r["referenced_fwd_bytes"]), _mb(r["cp_bwd_bytes"]), fmt(_bytes_ratio(r), ".3f"),
                 _mb(r["ring_fwd_bytes"]), _mb(r["ring_bwd_bytes"]), f"{r['cp_rel_err']:.1e}",
                 f"{r['ring_rel_err']:.1e}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)
