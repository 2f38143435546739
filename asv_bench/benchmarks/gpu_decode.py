"""Inference on the GPU, the shapes of ``python -m maskattn bench --decode``: bf16, head dim 128, forward only.

- ``TreeVerification``: MEDUSA's mc_sim_7b_63 tree (64 tree tokens) over a KV prefix of 1024, 4096 or 16384
  tokens, batch 1 or 8, 32 query and 32 KV heads.
- ``Decode``: one new token over a KV cache of 4096, 16384 or 65536 tokens, batch 8, 32 query heads over 8 KV heads
  (GQA packing).

``time_*``: wall time of one call, synchronised inside the timed call (the host time of a prepared call is most of a
small one). ``TreeBandwidth`` / ``DecodeBandwidth``: K and V bytes read per second, from CUDA events around 20 calls
back to back that take their turns over enough input sets to overflow L2 twice (every call reads K and V from device
memory), all cases in one process per run (``setup_cache``). Without CuPy or a GPU, setup raises
``NotImplementedError``.
"""

import maskattn
from maskattn import masks

from .common import workloads
from .gpu import cupy_or_skip, gpu_ms, l2_bytes, random_arrays, synchronize

HEAD_DIM = 128
PREFIXES = [1024, 4096, 16384]
TREE_BATCHES = [1, 8]
CACHES = [4096, 16384, 65536]
TREE_HEADS = (32, 32)
DECODE_HEADS, DECODE_BATCH = (32, 8), 8


def _tree_case(prefix, batch):
    return masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=prefix), batch, *TREE_HEADS


def _decode_case(cache):
    return masks.causal(1, cache), DECODE_BATCH, *DECODE_HEADS


def _calls(cupy, spec, batch, heads, kv_heads, sets=1):
    """One call per input set (seeded), and the K and V bytes one call reads."""
    n_q, n_k = spec.shape[-2:]
    calls = []
    for s in range(sets):
        q, = random_arrays(cupy, [(batch, heads, n_q, HEAD_DIM)], seed=2 * s)
        k, v = random_arrays(cupy, [(batch, kv_heads, n_k, HEAD_DIM)] * 2, seed=2 * s + 1)
        calls.append(lambda q=q, k=k, v=v: maskattn.attention(q, k, v, spec))
    return calls, 2 * batch * kv_heads * n_k * HEAD_DIM * 2


class _Timed:
    rounds = 1
    repeat = (5, 10, 0.5)
    timeout = 120

    def _prepare(self, spec, batch, heads, kv_heads):
        self.cupy = cupy_or_skip()
        (self.call,), _ = _calls(self.cupy, spec, batch, heads, kv_heads)
        for _ in range(2):  # plan, kernel builds, the prepared call
            self.call()
        synchronize(self.cupy)


class TreeVerification(_Timed):
    params = [PREFIXES, TREE_BATCHES]
    param_names = ["prefix", "batch"]

    def setup(self, prefix, batch):
        self._prepare(*_tree_case(prefix, batch))

    def time_tree(self, prefix, batch):
        self.call()
        synchronize(self.cupy)


class Decode(_Timed):
    params = [CACHES]
    param_names = ["cache"]

    def setup(self, cache):
        self._prepare(*_decode_case(cache))

    def time_decode(self, cache):
        self.call()
        synchronize(self.cupy)


def measure_bandwidth(self):
    """setup_cache of ``Bandwidth``: {("tree", prefix, batch) or ("decode", cache): GB/s or why it did not run};
    without a GPU, {"skip": why}."""
    try:
        cupy = cupy_or_skip()
    except NotImplementedError as err:
        return {"skip": str(err)}
    cases = {("tree", p, b): _tree_case(p, b) for p in PREFIXES for b in TREE_BATCHES}
    cases.update({("decode", c): _decode_case(c) for c in CACHES})
    table = {}
    for key, (spec, batch, heads, kv_heads) in cases.items():
        try:
            _, kv_bytes = _calls(cupy, spec, batch, heads, kv_heads, sets=0)
            calls, _ = _calls(cupy, spec, batch, heads, kv_heads, sets=max(1, -(-2 * l2_bytes(cupy) // kv_bytes)))
            table[key] = kv_bytes / gpu_ms(cupy, calls, warmup=len(calls) + 2, batch=20) / 1e6
        except Exception as err:  # one case failing on an old commit must not lose the others
            table[key] = f"{type(err).__name__}: {err}"
        calls = None
        cupy.get_default_memory_pool().free_all_blocks()
    return table


measure_bandwidth.timeout = 300


class _Bandwidth:
    setup_cache = measure_bandwidth

    def setup(self, table, *case):
        row = table.get("skip") or table[self.kind, *case]
        if isinstance(row, str):
            raise NotImplementedError(row)


class TreeBandwidth(_Bandwidth):
    params = [PREFIXES, TREE_BATCHES]
    param_names = ["prefix", "batch"]
    kind = "tree"

    def track_gbs(self, table, prefix, batch):
        return table["tree", prefix, batch]

    track_gbs.unit = "GB/s"


class DecodeBandwidth(_Bandwidth):
    params = [CACHES]
    param_names = ["cache"]
    kind = "decode"

    def track_gbs(self, table, cache):
        return table["decode", cache]

    track_gbs.unit = "GB/s"
