"""``python -m maskattn bench``: the benchmarks, one module per mode, outside the core's import graph.

- :mod:`.attention` (default, ``--backward``, ``--plans-only``, ``--tables``): every workload of WORKLOADS.md,
  maskattn beside the peers of :mod:`.peers` (FlexAttention's Triton and FLASH backends, FlashAttention-4, SDPA) on
  one GPU;
- :mod:`.decode` (``--decode``): tree verification and single-token decode, KV-read bandwidth;
- :mod:`.host` (``--host``): the plan compiler alone, on the CPU;
- :mod:`.sdpa` (``--sdpa``): ``maskattn.torch.scaled_dot_product_attention`` beside torch's SDPA with the same dense
  mask, planned on the GPU in every call, and the plan alone;
- :mod:`.overhead` (``--overhead``): host time of one call;
- :mod:`.cpu` (``--cpu``): the CPU kernels on NumPy float32 beside torch's SDPA on the CPU and the float32 GEMM rate;
- :mod:`.distributed` (``--distributed``, under torchrun): context parallelism on N ranks against one rank and a ring;
- :mod:`.workloads`: the seeded workload masks (shared with the demo and the asv suite).
"""

from __future__ import annotations

import json
import pathlib

from . import workloads
from .common import DEFAULT_HEAD_DIM, DEFAULT_HEADS, DEFAULT_N
from .peers import PEERS


def main(args) -> int:
    from . import attention, cpu, decode, host, overhead, sdpa

    out_dir = pathlib.Path(args.out) if args.out else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    args.heads = args.heads or (cpu.HEADS if args.cpu else DEFAULT_HEADS)
    args.head_dim = args.head_dim or (cpu.HEAD_DIM if args.cpu else DEFAULT_HEAD_DIM)
    if args.distributed:
        from . import distributed

        args.n = args.n or [distributed.DEFAULT_N]
        args.workloads = args.workloads or list(distributed.DEFAULT_WORKLOADS)
        rows = distributed.run(args)
        if rows is not None:  # rank 0 reports
            _report(rows, distributed.markdown(rows), "distributed", out_dir)
        return 0
    args.workloads = args.workloads or list(workloads.NAMES)
    args.n = args.n or (cpu.N if args.cpu else DEFAULT_N)
    if args.overhead:
        overhead.run(args)
        return 0
    for mode, module in (("decode", decode), ("sdpa", sdpa), ("cpu", cpu)):
        if getattr(args, mode):
            rows = module.run(args)
            _report(rows, module.markdown(rows), mode, out_dir)
            return 0
    if args.tables:
        rows = [row for path in args.tables for row in json.loads(pathlib.Path(path).read_text())]
        _report(rows, attention.markdown(rows, any("maskattn_fwdbwd_ms" in r for r in rows)), "bench", out_dir)
        return 0
    if args.host:
        rows = host.run(args)
        if out_dir is not None:
            (out_dir / "host.json").write_text(json.dumps(rows, indent=1))
        return 0
    rows = attention.run(args)
    if args.plans_only:
        return 0
    _report(rows, attention.markdown(rows, args.backward), "bench", out_dir)
    if out_dir is not None:
        attention.picture(rows, out_dir / "bench.png", args)
    return 0


def _report(rows, table: str, name: str, out_dir):
    """The table printed last; rows and table written to ``out_dir`` (name.json, name.md) when given."""
    print()
    print(table)
    if out_dir is not None:
        (out_dir / f"{name}.json").write_text(json.dumps(rows, indent=1))
        (out_dir / f"{name}.md").write_text(table + "\n")


def add_arguments(p):
    p.add_argument("--n", type=int, nargs="+", help="default 8192 16384 (--cpu: 4096 16384; --distributed: 131072)")
    p.add_argument("--workloads", nargs="+", choices=workloads.NAMES, metavar="NAME",
                   help="default: all (--distributed: doc_causal causal sink_swa shared_question graph_rcm)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, help="default 16 (--cpu: 8)")
    p.add_argument("--head-dim", type=int, help="default 128 (--cpu: 64)")
    p.add_argument("--kv-heads", type=int, default=None, help="--distributed: KV heads (GQA; default --heads)")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--backward", action="store_true", help="also time forward+backward")
    p.add_argument("--host", action="store_true", help="time only the plan compiler, on the CPU")
    p.add_argument("--cpu", action="store_true",
                   help="the CPU kernels (NumPy float32) beside torch SDPA on the CPU with the dense mask and the "
                        "float32 GEMM rate, fwd and fwd+bwd (n 4096 16384, H 8, D 64 unless given)")
    p.add_argument("--sdpa", action="store_true",
                   help="GPU: maskattn.torch.scaled_dot_product_attention against SDPA with the same dense mask, "
                        "planned in every call (--backward: also the host plan's forward+backward)")
    p.add_argument("--decode", action="store_true",
                   help="inference shapes: MEDUSA tree verification and single-token decode (GPU)")
    p.add_argument("--prefix", type=int, nargs="+", default=[1024, 4096, 16384], help="--decode: tree prefixes")
    p.add_argument("--cache", type=int, nargs="+", default=[4096, 16384, 65536], help="--decode: cache lengths")
    p.add_argument("--distributed", action="store_true",
                   help="under torchrun: context parallelism on every rank against one rank and a ring (NCCL on "
                        "GPUs, gloo on CPUs)")
    p.add_argument("--overhead", action="store_true",
                   help="host time of one call: tree verification and decode, torch and CuPy, beside SDPA (GPU)")
    p.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS), metavar="PEER",
                   help=f"the peers to time beside maskattn (default: all of {', '.join(PEERS)}; FA4, cuDNN and "
                        "SDPA flash only on full and causal)")
    p.add_argument("--graph", action="store_true",
                   help="time every call in CUDA graphs instead of with do_bench: kernels alone, no host launch time "
                        "(FlexAttention's FLASH backend spends a few hundred microseconds a call on the host)")
    p.add_argument("--tables", nargs="+", metavar="BENCH_JSON",
                   help="no timing: the tables of earlier runs' bench.json files, joined (runs split to fit a time "
                        "limit)")
    p.add_argument("--plans-only", action="store_true",
                   help="GPU: time only plan compile + upload beside Flex's create_block_mask")
    p.add_argument("--tile", type=int, nargs=2, default=[128, 128],
                   help="--host, --distributed on CPUs: the tile to compile for")
    p.add_argument("--threads", type=int, default=None,
                   help="--host: compile threads for dense / sparse masks; --cpu: the kernels' and torch's threads")
    p.add_argument("--reps", type=int, default=50, help="--host: repetitions per workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="folder for bench.json, bench.md and bench.png")
