"""``python -m maskattn demo`` and ``python -m maskattn bench``."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _gpu_available() -> bool:
    from ._arrays import cupy_or_none

    cupy = cupy_or_none()
    if cupy is None:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError:
        return False


def demo(args) -> int:
    import maskattn
    from maskattn.bench import workloads
    from maskattn.testing import dense_softmax_attention

    n, heads, head_dim = args.n, args.heads, args.head_dim
    spec = workloads.build("doc_causal", n, seed=args.seed)
    on_gpu = _gpu_available() and not args.cpu
    tile = None
    if on_gpu:
        from .backends import cuda

        tile = cuda.tile_for(head_dim, "bfloat16")
    start = time.perf_counter()
    plan = maskattn.compile_mask(spec, tile)
    compile_ms = (time.perf_counter() - start) * 1e3
    print(f"packed documents, n={n}: plan compiled in {compile_ms:.3f} ms")
    print(plan)
    s = plan.stats(head_dim)
    print(f"active {s['active_blocks']}/{s['total_blocks']} blocks ({s['full_blocks']} full, {s['partial_blocks']} "
          f"partial), density {s['density']:.4f}, {s['fwd_flops'] * heads / 1e9:.2f} GFLOP forward")

    rng = np.random.default_rng(args.seed)
    q, k, v = (rng.standard_normal((1, heads, n, head_dim)).astype(np.float32) for _ in range(3))
    if on_gpu:
        import cupy

        qd, kd, vd = (cupy.asarray(x).astype(cupy.dtype("bfloat16")) for x in (q, k, v))
        maskattn.attention(qd, kd, vd, plan)  # compile the kernels outside the timing
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        out = maskattn.attention(qd, kd, vd, plan)
        cupy.cuda.Device().synchronize()
        elapsed = time.perf_counter() - start
        out = cupy.asnumpy(out.astype(cupy.float32))
        q, k, v = (cupy.asnumpy(x.astype(cupy.float32)) for x in (qd, kd, vd))
        backend = f"CUDA ({cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, bfloat16)"
    else:
        start = time.perf_counter()
        out = maskattn.attention(q, k, v, plan)
        elapsed = time.perf_counter() - start
        backend = "CPU reference (float32)"
    reference = dense_softmax_attention(q, k, v, spec.to_dense(), 1 / np.sqrt(head_dim))
    err = np.linalg.norm(out - reference) / np.linalg.norm(reference)
    print(f"attention on {backend}: {elapsed * 1e3:.1f} ms for B=1, H={heads}, D={head_dim}")
    print(f"relative L2 error against a dense float64 softmax: {err:.2e}")
    limit = 1e-2 if on_gpu else 1e-5
    if not err <= limit:
        print(f"FAILED: error above {limit:g}")
        return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m maskattn", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="packed documents: plan, picture, attention checked against dense softmax")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu", action="store_true", help="use the CPU reference even when a GPU is present")
    p.set_defaults(run=demo)
    from . import bench

    p = sub.add_parser("bench", help="every workload: maskattn beside FlexAttention and SDPA (GPU), or --host, --cpu")
    bench.add_arguments(p)
    p.set_defaults(run=bench.main)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
