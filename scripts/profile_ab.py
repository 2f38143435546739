"""Forward and forward+backward times of a few workloads for whichever maskattn is importable (GPU machine), to
compare builds side by side: install another checkout with `pip install --no-build-isolation --no-deps --target
/tmp/inst_X .` and run this once per install with PYTHONPATH=/tmp/inst_X first.

    python3 scripts/profile_ab.py LABEL
"""
import sys

import torch
from triton.testing import do_bench

import maskattn
from maskattn import workloads

print(maskattn.__file__)
for name, n, H, D in (("full", 8192, 16, 128), ("causal", 8192, 16, 128), ("graph_rcm", 8192, 16, 128),
                      ("graph_rcm", 16384, 16, 128), ("lf_dilated", 8192, 16, 128), ("lf_dilated", 16384, 16, 128),
                      ("full", 8192, 32, 64), ("graph_rcm", 8192, 32, 64)):
    spec = workloads.build(name, n)
    q, k, v, do = (torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))

    def fwd_bwd():
        o, lse = maskattn.attention(q, k, v, spec, return_lse=True)
        maskattn.attention_backward(do, q, k, v, o, lse, spec)

    fwd = do_bench(lambda: maskattn.attention(q, k, v, spec), warmup=25, rep=100, return_mode="median")
    both = do_bench(fwd_bwd, warmup=25, rep=100, return_mode="median")
    print(f"{sys.argv[1]:10s} {name:10s} n={n:5d} D={D:3d} fwd {fwd:.3f} ms  fwd+bwd {both:.3f} ms", flush=True)
