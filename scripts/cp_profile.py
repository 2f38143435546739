"""Where a context-parallel step's time goes, per rank (issue 17): run under torchrun on N GPUs.

    torchrun --nproc-per-node 2 scripts/cp_profile.py [--n 131072] [--workloads doc_causal causal ...] [--split work]
        [--trace]

Per workload (B = 1, H = 16, D = 128, bf16), every rank prints, from medians over repetitions:
- compute alone (no exchange, its GPU to itself): the forward and the backward of its local and remote plans (the
  overlapped path's four kernel calls, merges included) and of its packed plan;
- the exchange alone: the forward's all-to-all of K/V blocks and the backward's of their gradients, from a barrier;
- whole steps of ``maskattn.distributed.attention`` (packed and overlapped) and of the ring, this rank's own time
  from a common barrier (not the slowest rank's);
and rank 0 the one-GPU step over the whole plan, with the split's modelled work per rank beside the measured times;
"enqueued": the host's time until the step returned, before the GPU finished. ``--trace``: torch's profile of three
packed steps per rank, the operators by device time, then the GPU's timeline of one more step (every kernel, copy
and memset from a common barrier, and the idle gaps between them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

import maskattn
from maskattn import distributed as md
from maskattn.backends import cuda as backend
from maskattn.bench import workloads
from maskattn.bench.distributed import _fwd_bwd
from maskattn.distributed.attention import merge, partial_attention, partial_grads
from maskattn.distributed.exchange import all_to_all, kv_views, plan_index, token_major, wait

REPS = 5


ENQUEUED = {}  # label -> median ms until fn returned (the host's part; the rest of the time the GPU ran behind)


def _ms(fn, barrier=False, label=None):
    """Median ms of fn over REPS after one warm-up; with ``barrier`` every rank starts each repetition together."""
    fn()
    times, enqueued = [], []
    for _ in range(REPS):
        torch.cuda.synchronize()
        if barrier:
            dist.barrier()
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        enqueued.append(1e3 * (time.perf_counter() - start))
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - start))
    if label:
        ENQUEUED[label] = statistics.median(enqueued)
    return statistics.median(times)


def _trace(fn, rows=14):
    """The GPU's and the host's time of three calls of fn by torch's profiler: the top operators by device time; then
    the GPU's timeline of one call started from a barrier (:func:`_timeline`)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=rows, max_name_column_width=60)
    dist.barrier()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        dist.barrier()
        torch.cuda.synchronize()
        with torch.profiler.record_function("step"):
            fn()
        torch.cuda.synchronize()
    return table + "\n\n" + _timeline(prof)


def _timeline(prof):
    """One line per GPU activity of the profiled step, in start order: start and end in ms from the step's start on
    the host, the idle gap before it on the GPU, its stream and name."""
    import json
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    step = next(e for e in events
                if e.get("name") == "step" and e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation")
    t0 = step["ts"]
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and e["ts"] >= t0), key=lambda e: e["ts"])
    header = f"host step {step['dur'] / 1e3:.3f} ms; start, end, gap before (ms), stream, GPU activity"
    lines, busy_until = [header], None
    for e in gpu:
        start, end = (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3
        gap = "" if busy_until is None else f"{max(0.0, start - busy_until):.3f}"
        busy_until = end if busy_until is None else max(busy_until, end)
        lines.append(f"{start:8.3f} {end:8.3f} {gap:>6} s{e.get('args', {}).get('stream', '?')} {e['name'][:90]}")
    return "\n".join(lines)


def profile(name, n, split, device, trace, H=16, D=128, dtype=torch.bfloat16):
    rank, world = dist.get_rank(), dist.get_world_size()
    tile = backend.tile_for(D, "bfloat16", device.index)
    plan = maskattn.compile_mask(workloads.build(name, n), tile)
    sharded = md.shard(plan, split=split)
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v, do = (torch.randn(1, H, n, D, device=device, dtype=dtype, generator=gen) for _ in range(4))
    ql, kl, vl, dol = (md.dispatch(x, sharded) for x in (q, k, v, do))
    scale = D ** -0.5
    row = {}
    if rank == 0:
        row["one GPU"] = _ms(lambda: _fwd_bwd(lambda a, b, c: maskattn.torch.attention(a, b, c, plan), q, k, v, do),
                             label="one GPU")
        row["one GPU enqueued"] = ENQUEUED["one GPU"]
    dist.barrier()

    # compute alone: the remote keys stood in by this rank's own tokens' slots (same counts, no exchange)
    fetched_count = int(sharded.send_tokens[:, rank].sum())
    stand_in = token_major(kl, vl)[torch.arange(fetched_count, device=device) % max(1, kl.shape[2])]
    local, remote, packed = sharded.local_plan(), sharded.remote_plan(), sharded.packed_plan()
    state = {}

    def forward_parts():
        out, lse = partial_attention(ql, kl, vl, local, scale)
        if remote.nnz:
            out, lse = merge(out, lse, *partial_attention(ql, *kv_views(stand_in), remote, scale))
            out = out.to(ql.dtype)
        state["out"], state["lse"] = out, lse

    def backward_parts():
        partial_grads(dol, ql, *kv_views(stand_in), state["out"], state["lse"], remote, scale)
        partial_grads(dol, ql, kl, vl, state["out"], state["lse"], local, scale)

    row["fwd local+remote"] = _ms(forward_parts)
    row["bwd remote+local"] = _ms(backward_parts)
    held = torch.cat((stand_in, token_major(kl, vl)))

    def packed_step():
        out, lse = partial_attention(ql, *kv_views(held), packed, scale)
        partial_grads(dol, ql, *kv_views(held), out, lse, packed, scale)

    row["packed fwd+bwd"] = _ms(packed_step)
    row["tiles local/remote"] = f"{local.nnz}/{remote.nnz}"

    # the exchange alone
    send = token_major(kl, vl, plan_index(sharded, "send", device))
    if sharded.send_tokens.any():
        row["all-to-all K/V"] = _ms(lambda: wait(all_to_all(
            send, sharded.send_tokens[rank], sharded.send_tokens[:, rank], None, "kv")[1]), True)
        row["MiB out"] = send.numel() * send.element_size() / 2 ** 20
    for overlap in (False, True):
        label = f"cp {'overlap' if overlap else 'packed'} step"
        row[label] = _ms(
            lambda: _fwd_bwd(lambda a, b, c: md.attention(a, b, c, sharded, overlap=overlap), ql, kl, vl, dol), True,
            label)
        row[label + " enqueued"] = ENQUEUED[label]
    if trace:
        table = _trace(lambda: _fwd_bwd(lambda a, b, c: md.attention(a, b, c, sharded), ql, kl, vl, dol))
        for r in range(world):
            dist.barrier()
            if r == rank:
                print(f"\n### {name}: rank {rank}, three packed steps\n{table}", flush=True)
    ring = md.shard(plan, split="zigzag")
    rq, rk, rv, rdo = (md.dispatch(x, ring) for x in (q, k, v, do))
    row["ring step (own time)"] = _ms(lambda: _fwd_bwd(lambda a, b, c: md.ring_attention(a, b, c, ring), rq, rk, rv,
                                                       rdo), True)
    row["model work"] = float(sharded.work[rank])
    row["tokens"] = int(sharded.token_counts[rank])
    rows = [None] * world
    dist.all_gather_object(rows, row)
    if rank == 0:
        keys = list(dict.fromkeys(key for r in rows for key in r))
        print(f"\n## {name} n={n} split={split} ranks={world}")
        print("| rank | " + " | ".join(keys) + " |")
        print("|---" * (len(keys) + 1) + "|")
        for r, values in enumerate(rows):
            cells = [f"{values[key]:.2f}" if isinstance(values.get(key), float) else str(values.get(key, ""))
                     for key in keys]
            print(f"| {r} | " + " | ".join(cells) + " |", flush=True)
    torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=131072)
    p.add_argument("--workloads", nargs="+", default=["causal", "doc_causal", "shared_question", "sink_swa"])
    p.add_argument("--split", default="work", type=lambda x: x if x in md.SPLITS else [int(c) for c in x.split(",")],
                   help="work, even, zigzag or comma-separated unit boundaries (units of lcm(tile) tokens)")
    p.add_argument("--trace", action="store_true", help="print each rank's profile of three packed steps")
    args = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    for name in args.workloads:
        profile(name, args.n, args.split, device, args.trace)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
